#include "image.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "convkit/status.hpp"

#ifdef CONVKIT_HAVE_STB
#include "stb_image.h"
#endif

namespace convkit::cli {

#ifdef CONVKIT_HAVE_STB
namespace {

// A PNG whose chunks claim more bytes than the file holds, or the reason. stb_image grows its buffer to the
// sum of the IDAT lengths a file claims before reading them: a 100-byte file made it allocate 2 GiB (found by
// tests/fuzz/fuzz_image). Chunks are length-prefixed, so the walk is exact; anything else goes to stb.
std::string bad_png_chunks(const std::vector<unsigned char>& b) {
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (b.size() < 8 || !std::equal(sig, sig + 8, b.begin())) return {};
  size_t i = 8;
  while (i + 8 <= b.size()) {
    const uint64_t len = (uint64_t(b[i]) << 24) | (uint64_t(b[i + 1]) << 16) | (uint64_t(b[i + 2]) << 8) | b[i + 3];
    const std::string type(reinterpret_cast<const char*>(&b[i + 4]), 4);
    if (len > b.size() - i - 8 || b.size() - i - 8 - len < 4)
      return "the PNG chunk '" + type + "' claims " + std::to_string(len) + " bytes but the file holds " +
             std::to_string(b.size() - i - 8 > 4 ? b.size() - i - 12 : 0) + " more";
    if (type == "IEND") return {};
    i += 12 + size_t(len);
  }
  return {};
}

std::vector<unsigned char> slurp_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(StatusCode::io_error, path + ": cannot open");
  std::vector<unsigned char> out;
  unsigned char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) {
    out.insert(out.end(), buf, buf + n);
    if (out.size() > (size_t(1) << 30)) {
      std::fclose(f);
      throw Error(StatusCode::io_error, path + ": larger than 1 GiB; not read as an image");
    }
  }
  std::fclose(f);
  return out;
}

}  // namespace
#endif

Image read_image(const std::string& path) {
#ifdef CONVKIT_HAVE_STB
  const std::vector<unsigned char> bytes = slurp_file(path);
  if (const std::string why = bad_png_chunks(bytes); !why.empty())
    throw Error(StatusCode::io_error, path + ": cannot decode: " + why);
  const int len = int(std::min<size_t>(bytes.size(), size_t(1) << 30));
  int w = 0, h = 0, n = 0;
  if (!stbi_info_from_memory(bytes.data(), len, &w, &h, &n))
    throw Error(StatusCode::io_error, path + ": cannot read as an image: " + stbi_failure_reason());
  if (w <= 0 || h <= 0 || (long long)w * h > kMaxImagePixels)
    throw Error(StatusCode::io_error, path + ": the image is " + std::to_string(w) + "x" + std::to_string(h) +
                                          " pixels; at most " + std::to_string(kMaxImagePixels) + " are read.");
  // NOTE: no PNG or BMP packs more than ~1032 decoded bytes per file byte (deflate's limit; BMP stores
  // pixels raw), so a header claiming more is a lie, and stb would spend seconds decoding it from
  // nothing (a 57-byte BMP claiming 8000x8000 took over 10 s under the fuzzer).
  if (double(w) * double(h) * double(std::max(n, 1)) > 1100.0 * double(bytes.size()) + double(1 << 20))
    throw Error(StatusCode::io_error, path + ": the header claims " + std::to_string(w) + "x" + std::to_string(h) +
                                          " pixels, more than a file of " + std::to_string(bytes.size()) +
                                          " bytes can hold");
  const int C = n >= 3 ? 3 : 1;
  unsigned char* px = stbi_load_from_memory(bytes.data(), len, &w, &h, &n, C);
  if (!px) throw Error(StatusCode::io_error, path + ": cannot decode: " + stbi_failure_reason());
  Image im{w, h, C, std::vector<unsigned char>(px, px + size_t(w) * size_t(h) * size_t(C))};
  stbi_image_free(px);
  return im;
#else
  throw Error(StatusCode::not_available, path + ": built without stb (apt-get install libstb-dev)");
#endif
}

}  // namespace convkit::cli
