// The device activations for 16-bit outputs (gelu_16bit and silu_16bit in src/cuda/common/epilogue.cuh):
// the GELU fit's coefficients on the host, with an exact tanh (gelu_tanh_arg in src/common/activation.hpp);
// on the GPU, both forms against the exact functions in double, through cuda_activation_probe (no rounding
// to 16 bits, so the forms' own error shows), and the fp32 outputs still on activate()'s forms.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/activation.hpp"
#include "convkit/convkit.hpp"
#include "test_util.hpp"
#if defined(CONVKIT_WITH_CUDA)
#include "cuda/common/activation_probe.hpp"
#endif

using namespace convkit;
using namespace convkit::detail;

namespace {

double phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double gelu_exact(double x) { return x * phi(x); }
double silu_exact(double x) { return x / (1.0 + std::exp(-x)); }

// -12 .. 12 in steps of 2^-10 (24577 values, every one exact in fp32).
std::vector<float> grid() {
  std::vector<float> x;
  for (int i = -12 * 1024; i <= 12 * 1024; ++i) x.push_back(float(std::ldexp(double(i), -10)));
  return x;
}

// The fit: Phi within 1.9e-5 with an exact tanh, and u rising up to the clamp (so that tanh(u) is monotone).
TEST(GeluTanhArg, FitsPhiWithinItsBound) {
  double worst = 0, at = 0;
  float prev = -std::numeric_limits<float>::infinity();
  for (float x : grid()) {
    const float u = gelu_tanh_arg(x);
    const double e = std::fabs(0.5 * (1.0 + std::tanh(double(u))) - phi(x));
    if (e > worst) worst = e, at = x;
    if (std::fabs(x) <= 8.0f) {
      EXPECT_GT(u, prev) << "u(x) does not rise at x = " << x;
      prev = u;
    }
  }
  EXPECT_LE(worst, 2.0e-5) << "worst |Phi error| " << worst << " at x = " << at;
  EXPECT_EQ(gelu_tanh_arg(100.0f), gelu_tanh_arg(8.0f));
  EXPECT_EQ(gelu_tanh_arg(-1e30f), -gelu_tanh_arg(8.0f));
  EXPECT_GT(std::tanh(double(gelu_tanh_arg(8.0f))), 1.0 - 1e-12);
}

#if defined(CONVKIT_WITH_CUDA)

struct Worst {
  double ratio = 0, x = 0;
};

// max |f(x) - exact(x)| / |x| over the grid (x = 0 must give 0 exactly).
template <typename Exact>
Worst worst_over_x(const std::vector<float>& x, const std::vector<float>& y, Exact exact) {
  Worst w;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::fabs(double(y[i]) - exact(double(x[i])));
    if (x[i] == 0.0f) {
      EXPECT_EQ(y[i], 0.0f);
      continue;
    }
    const double r = e / std::fabs(double(x[i]));
    if (r > w.ratio) w.ratio = r, w.x = x[i];
  }
  return w;
}

TEST(CudaActivation, SixteenBitFormsWithinBound) {
  CKT_REQUIRE_GPU();
  const std::vector<float> x = grid();
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(to_string(dt));
    const Worst g = worst_over_x(x, cuda_activation_probe(Activation::gelu, dt, x), gelu_exact);
    const Worst s = worst_over_x(x, cuda_activation_probe(Activation::silu, dt, x), silu_exact);
    std::printf("[ measured ] %s: GELU within %.3g |x| (worst at %g), SiLU within %.3g |x| (worst at %g)\n",
                to_string(dt), g.ratio, g.x, s.ratio, s.x);
    EXPECT_LE(g.ratio, std::ldexp(1.0, -15)) << "GELU, worst at x = " << g.x;
    EXPECT_LE(s.ratio, std::ldexp(1.0, -17)) << "SiLU, worst at x = " << s.x;
    // Past the grid and at the edges of fp32.
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> edge = {1e30f, -1e30f, inf, std::numeric_limits<float>::quiet_NaN(), -0.0f};
    const std::vector<float> ge = cuda_activation_probe(Activation::gelu, dt, edge);
    const std::vector<float> se = cuda_activation_probe(Activation::silu, dt, edge);
    EXPECT_EQ(ge[0], 1e30f);
    EXPECT_EQ(se[0], 1e30f);
    EXPECT_LE(std::fabs(ge[1]), 3.1e25f);  // exact: -0 in fp32; the bound is 2^-15 |x|
    EXPECT_EQ(ge[2], inf);
    EXPECT_EQ(se[2], inf);
    EXPECT_TRUE(std::isnan(ge[3]));
    EXPECT_TRUE(std::isnan(se[3]));
    EXPECT_EQ(ge[4], 0.0f);
    EXPECT_EQ(se[4], 0.0f);
  }
}

// fp32 outputs keep the exact forms: erff's and expf's error only.
TEST(CudaActivation, Fp32OutputsKeepTheExactForms) {
  CKT_REQUIRE_GPU();
  const std::vector<float> x = grid();
  const Worst g = worst_over_x(x, cuda_activation_probe(Activation::gelu, DType::f32, x), gelu_exact);
  const Worst s = worst_over_x(x, cuda_activation_probe(Activation::silu, DType::f32, x), silu_exact);
  std::printf("[ measured ] f32: GELU within %.3g |x|, SiLU within %.3g |x|\n", g.ratio, s.ratio);
  EXPECT_LE(g.ratio, std::ldexp(1.0, -20));
  EXPECT_LE(s.ratio, std::ldexp(1.0, -20));
}

#endif

}  // namespace
