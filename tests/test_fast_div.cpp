// FastDiv (cuda/common/geometry.cuh), the tile decode of cuda_depthwise's TMA kernel: the host side runs the
// same arithmetic as the device (a multiply-high of the same 32-bit operands), checked against / and % for
// divisors and dividends on both sides of every power of two, the largest dividend the kernels pass
// (INT_MAX), and random pairs.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/common/geometry.cuh"

using convkit::detail::FastDiv;

namespace {

std::vector<uint32_t> edges() {
  std::vector<uint32_t> v{0, 1, 2, 3, 5, 7, 14, 28, 56, 112, 144, 960};
  for (int b = 1; b <= 31; ++b) {
    const uint64_t p = uint64_t(1) << b;
    for (int64_t off : {-2, -1, 0, 1, 2})
      if (int64_t(p) + off >= 0 && int64_t(p) + off <= INT_MAX) v.push_back(uint32_t(int64_t(p) + off));
  }
  v.push_back(INT_MAX);
  v.push_back(INT_MAX - 1);
  return v;
}

::testing::AssertionResult agrees(uint32_t n, uint32_t d) {
  const FastDiv f(d);
  uint32_t rem = 0;
  const uint32_t q = f.divmod(n, rem);
  if (q == n / d && rem == n % d && f.div(n) == q) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << n << " / " << d << ": got " << q << " rem " << rem << ", want " << n / d
                                       << " rem " << n % d;
}

TEST(FastDiv, EdgesOfEveryPowerOfTwo) {
  const std::vector<uint32_t> e = edges();
  for (uint32_t d : e) {
    if (d == 0) continue;
    for (uint32_t n : e) ASSERT_TRUE(agrees(n, d));
    // the dividends around each multiple of d near the top of the range
    const uint32_t top = uint32_t(INT_MAX) / d * d;
    for (uint32_t n : {top - 1, top, uint32_t(INT_MAX)}) ASSERT_TRUE(agrees(n, d));
  }
}

TEST(FastDiv, EveryDividendBelowTwoToTheSixteenForSmallDivisors) {
  for (uint32_t d = 1; d <= 300; ++d) {
    const FastDiv f(d);
    for (uint32_t n = 0; n < (1u << 16); ++n)
      if (f.div(n) != n / d) FAIL() << n << " / " << d << ": got " << f.div(n);
  }
}

TEST(FastDiv, RandomPairs) {
  std::mt19937 rng(19);
  std::uniform_int_distribution<uint32_t> any(0, INT_MAX);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t n = any(rng), d = (any(rng) >> (rng() % 31)) + 1;  // divisors of every magnitude
    ASSERT_TRUE(agrees(n, d));
  }
}

}  // namespace
