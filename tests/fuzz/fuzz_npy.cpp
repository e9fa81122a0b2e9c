// The .npy reader behind `convkit run` (every dtype, header and shape form): any bytes either read as an
// array whose size matches its shape, or are refused with an exception; never a crash, a leak or UB.
#include <cstdint>
#include <exception>

#include "convkit/tensor.hpp"
#include "fuzz_util.hpp"
#include "npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convkit;
  try {
    const cli::NpyArray a = cli::read_npy(ckfuzz::as_file(data, size));
    const int64_t n = a.count();
    CKFUZZ_ASSERT(n >= 0);
    CKFUZZ_ASSERT(a.bytes.size() == size_t(n) * (a.dtype == DType::f32 ? 4 : 2));
    if (n <= (1 << 16))
      for (DType to : {DType::f32, DType::f16, DType::bf16})
        CKFUZZ_ASSERT(a.as(to).size() == size_t(n) * (to == DType::f32 ? 4 : 2));
  } catch (const std::exception&) {
  }
  return 0;
}
