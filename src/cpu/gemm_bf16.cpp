// gemm_bf16 (gemm_bf16.hpp): 8 x 32 tiles of C on vdpbf16ps, and the turned product for few rows of A.
// Measured (2-vCPU Zen 4, bfloat16 NHWC through the PyTorch op, batch 1, bias + ReLU, ms; torch's oneDNN in
// brackets; docs/perf.md 2026-12-05): 64 -> 64 3x3 at 40x40 0.32 (0.29), 256 3x3 at 10x10 0.35 (0.35),
// 1024 -> 256 1x1 at 10x10 0.20 (0.28); turned: 512 3x3 at 5x5 0.41 (0.62), 1024 -> 2048 1x1 at 5x5 0.40
// (1.02). Widened to float32 for SGEMM the first and the 512 layer took 0.72 and 2.23.
#include "cpu/gemm_bf16.hpp"

#include <algorithm>
#include <cstring>

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#define CONVKIT_GEMM_BF16 1
#endif

namespace convkit::detail {

bool gemm_bf16_available() {
#if defined(CONVKIT_GEMM_BF16)
  return true;
#else
  return false;
#endif
}

void gemm_bf16_pack(const uint16_t* b, int64_t ldb, int64_t n, int64_t k, int64_t k_real, uint16_t* packed,
                    int64_t jb0, int64_t jb1) {
  const int64_t pairs = k / 2;
  for (int64_t jb = jb0; jb < jb1; ++jb) {
    uint16_t* o = packed + jb * kGemmBf16Cols * k;
    const int64_t row0 = jb * kGemmBf16Cols;
    if (row0 + kGemmBf16Cols <= n && k_real == k) {
      // a whole block: a transpose of 4-byte pairs, 32 rows read side by side (their cache lines stay in L1
      // while 16 pairs of each are taken), the packed block written in order
      const uint16_t* r[kGemmBf16Cols];
      for (int64_t c = 0; c < kGemmBf16Cols; ++c) r[c] = b + (row0 + c) * ldb;
      for (int64_t p = 0; p < pairs; ++p, o += 2 * kGemmBf16Cols)
        for (int64_t c = 0; c < kGemmBf16Cols; ++c) std::memcpy(o + 2 * c, r[c] + 2 * p, 4);
      continue;
    }
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t c = 0; c < kGemmBf16Cols; ++c, o += 2) {
        const int64_t row = row0 + c, k0 = 2 * p;
        const uint16_t* r = b + row * ldb;
        o[0] = row < n && k0 < k_real ? r[k0] : uint16_t(0);
        o[1] = row < n && k0 + 1 < k_real ? r[k0 + 1] : uint16_t(0);
      }
  }
}

#if defined(CONVKIT_GEMM_BF16)
namespace {

// MR rows of C from A's rows a.. (stride lda) and one packed column block; `cols` of its 32 columns stored.
template <int MR>
void tile(const uint16_t* a, int64_t lda, const uint16_t* bp, int64_t pairs, float alpha, float* c, int64_t ldc,
          int64_t cols) {
  __m512 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + p * 64);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + p * 64 + 32);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + i * lda + 2 * p, 4);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? __mmask16(0xFFFF) : cols <= 16 ? __mmask16(0) : __mmask16((1u << (cols - 16)) - 1);
  for (int i = 0; i < MR; ++i) {
    _mm512_mask_storeu_ps(c + i * ldc, m0, _mm512_mul_ps(acc[i][0], al));
    if (m1) _mm512_mask_storeu_ps(c + i * ldc + 16, m1, _mm512_mul_ps(acc[i][1], al));
  }
}

// The turned tile: NR rows of B (n .. n + NR) x the 32 rows of A of one packed block; acc[i][h] holds
// C[m0 + 16 h + lane][n + i].
template <int NR>
void tile_turned(const uint16_t* ap, const uint16_t* b, int64_t ldb, int64_t k_real, int64_t pairs, float alpha,
                 float* c, int64_t ldc, int64_t rows) {
  __m512 acc[NR][2];
  for (int i = 0; i < NR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  const int64_t whole = std::min(pairs, k_real / 2);  // pairs wholly inside B's rows
  auto step = [&](int64_t p, auto pair_of) {
    const __m512bh a0 = (__m512bh)_mm512_loadu_si512(ap + p * 64);
    const __m512bh a1 = (__m512bh)_mm512_loadu_si512(ap + p * 64 + 32);
#pragma GCC unroll 8
    for (int i = 0; i < NR; ++i) {
      const __m512bh bv = (__m512bh)_mm512_set1_epi32(int32_t(pair_of(b + i * ldb + 2 * p)));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], bv, a0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], bv, a1);
    }
  };
  for (int64_t p = 0; p < whole; ++p)
    step(p, [](const uint16_t* e) {
      uint32_t v;
      std::memcpy(&v, e, 4);
      return v;
    });
  for (int64_t p = whole; p < pairs; ++p)  // an odd k_real's last element, its partner past the row taken as zero
    step(p, [k_real, p](const uint16_t* e) { return 2 * p < k_real ? uint32_t(e[0]) : 0u; });
  const __m512 al = _mm512_set1_ps(alpha);
  const __m512i lanes = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32(int32_t(ldc)));
  const __mmask16 m0 = rows >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << rows) - 1);
  const __mmask16 m1 = rows >= 32 ? __mmask16(0xFFFF) : rows <= 16 ? __mmask16(0) : __mmask16((1u << (rows - 16)) - 1);
  for (int i = 0; i < NR; ++i) {  // (ldc * 31 fits an int: checked by the caller)
    _mm512_mask_i32scatter_ps(c + i, m0, lanes, _mm512_mul_ps(acc[i][0], al), 4);
    if (m1) _mm512_mask_i32scatter_ps(c + 16 * ldc + i, m1, lanes, _mm512_mul_ps(acc[i][1], al), 4);
  }
}

}  // namespace
#endif

void gemm_bf16_turned(const uint16_t* packed_a, const uint16_t* b, int64_t ldb, int64_t k_real, int64_t m, int64_t n0,
                      int64_t n1, int64_t k, float alpha, float* c, int64_t ldc) {
#if defined(CONVKIT_GEMM_BF16)
  constexpr int kNR = 8;
  const int64_t pairs = k / 2;
  for (int64_t ib = 0; ib * kGemmBf16Cols < m; ++ib) {
    const uint16_t* ap = packed_a + ib * kGemmBf16Cols * k;
    const int64_t r0 = ib * kGemmBf16Cols, rows = std::min<int64_t>(kGemmBf16Cols, m - r0);
    float* cb = c + r0 * ldc;
    int64_t j = n0;
    for (; j + kNR <= n1; j += kNR) tile_turned<kNR>(ap, b + j * ldb, ldb, k_real, pairs, alpha, cb + j, ldc, rows);
    const uint16_t* br = b + j * ldb;
    float* cr = cb + j;
    switch (n1 - j) {
      case 7: tile_turned<7>(ap, br, ldb, k_real, pairs, alpha, cr, ldc, rows); break;
      case 6: tile_turned<6>(ap, br, ldb, k_real, pairs, alpha, cr, ldc, rows); break;
      case 5: tile_turned<5>(ap, br, ldb, k_real, pairs, alpha, cr, ldc, rows); break;
      case 4: tile_turned<4>(ap, br, ldb, k_real, pairs, alpha, cr, ldc, rows); break;
      case 3: tile_turned<3>(ap, br, ldb, k_real, pairs, alpha, cr, ldc, rows); break;
      case 2: tile_turned<2>(ap, br, ldb, k_real, pairs, alpha, cr, ldc, rows); break;
      case 1: tile_turned<1>(ap, br, ldb, k_real, pairs, alpha, cr, ldc, rows); break;
      default: break;
    }
  }
#else
  (void)packed_a, (void)b, (void)ldb, (void)k_real, (void)m, (void)n0, (void)n1, (void)k, (void)alpha, (void)c,
      (void)ldc;
#endif
}

void gemm_bf16(const uint16_t* a, int64_t lda, const uint16_t* packed, int64_t m, int64_t n, int64_t k, float alpha,
               float* c, int64_t ldc) {
#if defined(CONVKIT_GEMM_BF16)
  constexpr int kMR = 8;
  const int64_t pairs = k / 2;
  for (int64_t jb = 0; jb * kGemmBf16Cols < n; ++jb) {
    const uint16_t* bp = packed + jb * kGemmBf16Cols * k;
    const int64_t n0 = jb * kGemmBf16Cols, cols = std::min<int64_t>(kGemmBf16Cols, n - n0);
    int64_t i = 0;
    for (; i + kMR <= m; i += kMR) tile<kMR>(a + i * lda, lda, bp, pairs, alpha, c + i * ldc + n0, ldc, cols);
    const uint16_t* ar = a + i * lda;
    float* cr = c + i * ldc + n0;
    switch (m - i) {
      case 7: tile<7>(ar, lda, bp, pairs, alpha, cr, ldc, cols); break;
      case 6: tile<6>(ar, lda, bp, pairs, alpha, cr, ldc, cols); break;
      case 5: tile<5>(ar, lda, bp, pairs, alpha, cr, ldc, cols); break;
      case 4: tile<4>(ar, lda, bp, pairs, alpha, cr, ldc, cols); break;
      case 3: tile<3>(ar, lda, bp, pairs, alpha, cr, ldc, cols); break;
      case 2: tile<2>(ar, lda, bp, pairs, alpha, cr, ldc, cols); break;
      case 1: tile<1>(ar, lda, bp, pairs, alpha, cr, ldc, cols); break;
      default: break;
    }
  }
#else
  (void)a, (void)lda, (void)packed, (void)m, (void)n, (void)k, (void)alpha, (void)c, (void)ldc;
#endif
}

}  // namespace convkit::detail
