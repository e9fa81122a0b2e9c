// The suite-file parser (bench/shapes/*.txt): any bytes either load as validated problems or are refused
// with a UsageError naming the file and line.
#include <cstdint>
#include <exception>

#include "fuzz_util.hpp"
#include "suite.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convkit;
  try {
    const auto problems = cli::load_suite(ckfuzz::as_file(data, size));
    for (const auto& np : problems) CKFUZZ_ASSERT(np.problem.validate().ok());
  } catch (const std::exception&) {
  }
  return 0;
}
