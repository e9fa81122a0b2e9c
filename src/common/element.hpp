// Host-side element access for any dtype: load to / store from float or double. f16 and bf16 are
// converted by bit manipulation (round-to-nearest-even on store), so CPU code needs no vendor headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "convkit/tensor.hpp"

namespace convkit::detail {

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal
    float v = std::ldexp(float(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / nan
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t u = float_to_bits(f), sign = (u >> 16) & 0x8000;
  const uint32_t aexp = (u >> 23) & 0xff;
  uint32_t man = u & 0x7fffff;
  if (aexp == 0xff) return uint16_t(sign | 0x7c00 | (man ? 0x200 : 0));
  const int exp = int(aexp) - 127 + 15;
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {  // subnormal half: round |f| * 2^24 to an integer
    const float a = std::fabs(f);
    const float scaled = std::nearbyint(a * 16777216.0f);
    return uint16_t(sign | uint32_t(scaled));
  }
  uint32_t h = sign | (uint32_t(exp) << 10) | (man >> 13);
  const uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // may carry into the exponent: correct
  return uint16_t(h);
}

inline float bf16_to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 0x40);  // quiet nan
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

// Element i of any dtype as a float, and a float stored as element i (16-bit: round to nearest even).
inline float load_as_float(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  }
  return 0;
}

inline void store_from_float(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_half(v); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16(v); break;
  }
}

inline double load_as_double(const void* base, DType t, int64_t i) { return load_as_float(base, t, i); }

inline void store_from_double(void* base, DType t, int64_t i, double v) {
  store_from_float(base, t, i, static_cast<float>(v));
}

}  // namespace convkit::detail
