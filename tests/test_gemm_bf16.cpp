// gemm_bf16 (src/cpu/gemm_bf16.hpp), cpu_im2col_gemm's bfloat16 GEMM on the CPU's dot-product instruction,
// on its own: exact on small integers for every row count around its 8-row tiles, column counts around its
// 32-column blocks, odd reductions padded by the packing, strided A and C, alpha; and bit-equal to the
// float32 sum of the exact products where no rounding happens. (Its convolutions are in the shared sweeps of
// test_algorithms.cpp, where cpu_im2col_gemm's bfloat16 NHWC cases run on it.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/element.hpp"
#include "cpu/gemm_bf16.hpp"

using namespace convkit::detail;

namespace {

TEST(GemmBf16, ExactOnSmallIntegers) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "built for a CPU without AVX512-BF16";
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> d(-4, 4);
  for (int64_t m : {1, 7, 8, 9, 17})
    for (int64_t n : {1, 16, 31, 32, 33, 70})
      for (int64_t k_real : {1, 2, 5, 36, 37}) {
        const int64_t k = k_real + (k_real & 1), lda = k + 2, ldb = k_real + 3, ldc = n + 5;
        std::vector<uint16_t> a(size_t(m * lda), float_to_bf16(std::nanf(""))), b(size_t(n * ldb));
        std::vector<float> av(size_t(m * k)), bv(size_t(n * k_real));
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < k; ++j) {
            const float v = j < k_real ? float(d(rng)) : 0.0f;  // the pad element is zero, as the callers make it
            av[size_t(i * k + j)] = v;
            a[size_t(i * lda + j)] = float_to_bf16(v);
          }
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < k_real; ++j) {
            const float v = float(d(rng));
            bv[size_t(i * k_real + j)] = v;
            b[size_t(i * ldb + j)] = float_to_bf16(v);
          }
        std::vector<uint16_t> packed(size_t(gemm_bf16_packed_elems(n, k)), 0xFFFF);
        const int64_t blocks = (n + kGemmBf16Cols - 1) / kGemmBf16Cols;
        gemm_bf16_pack(b.data(), ldb, n, k, k_real, packed.data(), 0, blocks);
        std::vector<float> c(size_t(m * ldc), -777.0f);
        gemm_bf16(a.data(), lda, packed.data(), m, n, k, 2.0f, c.data(), ldc);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            if (j >= n) {
              ASSERT_EQ(c[size_t(i * ldc + j)], -777.0f) << "wrote past column " << n;
              continue;
            }
            double want = 0;
            for (int64_t t = 0; t < k_real; ++t) want += double(av[size_t(i * k + t)]) * bv[size_t(j * k_real + t)];
            ASSERT_EQ(double(c[size_t(i * ldc + j)]), 2.0 * want) << "m " << m << " n " << n << " k " << k_real << " at " << i << "," << j;
          }
      }
}

// The turned product: A (few rows) packed, B's rows read as they are, a range of them; an odd reduction's
// last pair read as one element (the element past each row is NaN here: reading it would show).
TEST(GemmBf16, TurnedExactOnSmallIntegers) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "built for a CPU without AVX512-BF16";
  std::mt19937 rng(6);
  std::uniform_int_distribution<int> d(-4, 4);
  for (int64_t m : {1, 7, 16, 31, 32, 33, 70})
    for (int64_t n : {1, 8, 13, 19})
      for (int64_t k_real : {1, 2, 5, 36, 37}) {
        const int64_t k = k_real + (k_real & 1), lda = k + 3, ldb = k_real + 1, ldc = n + 3;
        std::vector<uint16_t> a(size_t(m * lda), float_to_bf16(std::nanf(""))), b(size_t(n * ldb), float_to_bf16(std::nanf("")));
        std::vector<float> av(size_t(m * k_real)), bv(size_t(n * k_real));
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < k_real; ++j) {
            av[size_t(i * k_real + j)] = float(d(rng));
            a[size_t(i * lda + j)] = float_to_bf16(av[size_t(i * k_real + j)]);
          }
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < k_real; ++j) {
            bv[size_t(i * k_real + j)] = float(d(rng));
            b[size_t(i * ldb + j)] = float_to_bf16(bv[size_t(i * k_real + j)]);
          }
        std::vector<uint16_t> packed(size_t(gemm_bf16_packed_elems(m, k)), 0xFFFF);
        gemm_bf16_pack(a.data(), lda, m, k, k_real, packed.data(), 0, (m + kGemmBf16Cols - 1) / kGemmBf16Cols);
        const int64_t n0 = n > 4 ? 3 : 0;  // rows [n0, n) of B only
        std::vector<float> c(size_t(m * ldc), -777.0f);
        gemm_bf16_turned(packed.data(), b.data(), ldb, k_real, m, n0, n, k, 0.5f, c.data(), ldc);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            if (j < n0 || j >= n) {
              ASSERT_EQ(c[size_t(i * ldc + j)], -777.0f) << "wrote outside columns [" << n0 << ", " << n << ")";
              continue;
            }
            double want = 0;
            for (int64_t t = 0; t < k_real; ++t) want += double(av[size_t(i * k_real + t)]) * bv[size_t(j * k_real + t)];
            ASSERT_EQ(double(c[size_t(i * ldc + j)]), 0.5 * want) << "m " << m << " n " << n << " k " << k_real << " at " << i << "," << j;
          }
      }
}

TEST(GemmBf16, GaussianWithinFloatSummation) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "built for a CPU without AVX512-BF16";
  std::mt19937 rng(9);
  std::normal_distribution<float> g;
  const int64_t m = 45, n = 100, k = 576;
  std::vector<uint16_t> a(size_t(m * k)), b(size_t(n * k));
  for (auto& v : a) v = float_to_bf16(g(rng));
  for (auto& v : b) v = float_to_bf16(g(rng));
  std::vector<uint16_t> packed(size_t(gemm_bf16_packed_elems(n, k)));
  gemm_bf16_pack(b.data(), k, n, k, k, packed.data(), 0, (n + kGemmBf16Cols - 1) / kGemmBf16Cols);
  std::vector<float> c(size_t(m * n));
  gemm_bf16(a.data(), k, packed.data(), m, n, k, 1.0f, c.data(), n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, mag = 0;
      for (int64_t t = 0; t < k; ++t) {
        const double p = double(bf16_to_float(a[size_t(i * k + t)])) * bf16_to_float(b[size_t(j * k + t)]);
        want += p;
        mag += std::fabs(p);
      }
      // float32 sums of exact products: within k roundings of the magnitude
      ASSERT_NEAR(c[size_t(i * n + j)], want, double(k) * 0x1p-24 * mag) << i << "," << j;
    }
}

}  // namespace
