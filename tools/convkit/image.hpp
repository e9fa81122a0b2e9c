// The image reader behind `convkit filter` (stb_image's PNG and BMP decoders), the one place an image file
// is decoded, so that it can be fuzzed alone (tests/fuzz/fuzz_image.cpp).
// NOTE: stb_impl.cpp builds only those two decoders: fuzzing found Debian 12's stb_image JPEG decoder
// writing past its Huffman size table on a crafted file within seconds (build_huffman, index 257 of 257),
// and its PNM header parser overflowing a signed int on a long number (stbi__pnm_getinteger); the inputs are
// tests/fuzz/corpus/image/regression-*. Its other decoders are no better trusted.
#pragma once

#include <string>
#include <vector>

namespace convkit::cli {

struct Image {
  int w = 0, h = 0, c = 0;         // c = 3 (colour) or 1 (grey); alpha is dropped
  std::vector<unsigned char> px;   // interleaved, w * h * c bytes
};

// Throws convkit::Error(io_error) naming the file when it is not an image stb can decode, or when it is
// larger than kMaxImagePixels (a header can claim any size; nothing that large is allocated).
constexpr long long kMaxImagePixels = 1LL << 26;
Image read_image(const std::string& path);

}  // namespace convkit::cli
