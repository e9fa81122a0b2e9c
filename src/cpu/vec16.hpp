// 16 floats as one value of the compiler's vector extension, and the 16-bit dtypes to and from it, for the CPU
// code that loads or stores float16/bfloat16 16 values at a time (epilogue_span, cpu_depthwise's NHWC blocks).
// Each conversion gives element.hpp's scalar conversion's bits lane by lane (tests/test_epilogue_span.cpp,
// tests/test_depthwise.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__AVX512F__) || defined(__F16C__))
#include <immintrin.h>
#endif

#include "common/element.hpp"

namespace convkit::detail {

// One AVX-512 register, two AVX2 ones; loads and stores by memcpy (no alignment asked). Passed by reference:
// a vector argument or return value would change the ABI where the machine's vectors are narrower (g++ warns).
typedef float v16 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));

// bfloat16: a float's upper 16 bits. Stores round to nearest even and keep a NaN quiet (float_to_bf16). The
// scalar loops cost more than libmvec's expf in a SiLU epilogue of 16 -> 96 1x1 at 64x64, batch 8 (3.1 ms
// against 0.3 with ReLU, whose loop the compiler vectorises).
inline void bf16_to_floats(v16& v, const uint16_t* p) {
  u16x16 h;
  std::memcpy(&h, p, sizeof(h));
  const u32x16 u = __builtin_convertvector(h, u32x16) << 16;
  std::memcpy(&v, &u, sizeof(v));
}
inline void floats_to_bf16(uint16_t* p, const v16& v) {
  u32x16 u;
  std::memcpy(&u, &v, sizeof(u));
  const u32x16 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const u32x16 nan = (u32x16)((u & 0x7fffffffu) > 0x7f800000u);  // all ones where NaN
  const u32x16 bits = (rounded & ~nan) | (((u >> 16) | 0x40u) & nan);
  const u16x16 h = __builtin_convertvector(bits, u16x16);
  std::memcpy(p, &h, sizeof(h));
}

// float16 loads: the conversion instruction where the build has AVX-512 or F16C (exact, as half_to_float),
// else half_to_float lane by lane.
// (The masked AVX-512 forms below: GCC 12 warns about the unmasked intrinsics' undefined source operand.)
inline void f16_to_floats(v16& v, const uint16_t* p) {
#if defined(__x86_64__) && defined(__AVX512F__)
  const __m512 f = _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  std::memcpy(&v, &f, sizeof(v));
#elif defined(__x86_64__) && defined(__F16C__)
  const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  std::memcpy(&v, &lo, sizeof(lo));
  std::memcpy(reinterpret_cast<char*>(&v) + sizeof(lo), &hi, sizeof(hi));
#else
  for (int i = 0; i < 16; ++i) v[i] = half_to_float(p[i]);
#endif
}

// float16 stores where the build has AVX-512 F, BW and VL (CONVKIT_VEC16_F16_STORES): round to nearest even,
// subnormals exact, a NaN stored as float_to_half's quiet NaN (the instruction keeps the payload's top bits,
// the scalar conversion does not). Elsewhere callers store with float_to_half one value at a time.
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define CONVKIT_VEC16_F16_STORES 1
inline void floats_to_f16(uint16_t* p, const v16& v) {
  __m512 f;
  std::memcpy(&f, &v, sizeof(f));
  const __m256i h = _mm512_maskz_cvtps_ph(0xffff, f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  // float_to_half's NaN: the sign, 0x7c00 and the quiet bit 0x200
  const __m256i canon = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(int16_t(0x8000))),
                                        _mm256_set1_epi16(int16_t(0x7e00)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_mask_mov_epi16(h, nan, canon));
}
#endif

}  // namespace convkit::detail
