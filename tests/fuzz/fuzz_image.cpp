// The image reader behind `convkit filter`: any bytes decode to an image of the size it claims, or are
// refused with an exception.
#include <cstdint>
#include <exception>

#include "fuzz_util.hpp"
#include "image.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convkit;
  try {
    const cli::Image im = cli::read_image(ckfuzz::as_file(data, size));
    CKFUZZ_ASSERT(im.w > 0 && im.h > 0 && (im.c == 1 || im.c == 3));
    CKFUZZ_ASSERT(im.px.size() == size_t(im.w) * size_t(im.h) * size_t(im.c));
  } catch (const std::exception&) {
  }
  return 0;
}
