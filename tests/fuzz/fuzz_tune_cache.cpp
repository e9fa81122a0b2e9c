// The tune-cache reader: every line through parse_tune_line (an entry that parses formats back to a line
// that parses to the same entry), and the whole input as a cache file (lookups and the entry list never
// crash, whatever the header or lines say). Nothing is written: the cache is only read.
#include <cstdint>
#include <exception>
#include <sstream>
#include <string>

#include "core/tune_cache.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace convkit::detail;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    TuneEntry e;
    std::string why;
    if (!parse_tune_line(line, &e, &why)) continue;
    TuneEntry again;
    CKFUZZ_ASSERT(parse_tune_line(format_tune_line(e), &again, &why));
    CKFUZZ_ASSERT(again.key == e.key && again.algorithm == e.algorithm && again.variant == e.variant);
  }
  try {
    TuneCache cache(ckfuzz::as_file(data, size));
    for (const TuneEntry& e : cache.entries()) (void)cache.lookup(e.key);
  } catch (const std::exception&) {
  }
  return 0;
}
