// cpu_depthwise beyond the shared sweeps (test_algorithms.cpp runs it on the edge set, the random sweep and the
// exact small-integer sweep): larger images, 5x5 and 7x7 filters, stride 2, dilation 2, padding past R/2, every
// epilogue with the residual aliasing the output, both layouts, bit-equal to cpu_ref on small integers; and the
// heuristic choosing it for depthwise layers only.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "convkit/convkit.hpp"
#include "test_util.hpp"

using namespace convkit;

namespace {

std::vector<float> small_ints(size_t n, std::mt19937& rng) {
  const std::vector<double> d = ckt::small_ints(n, rng);
  return std::vector<float>(d.begin(), d.end());
}

TEST(Depthwise, BitEqualToReferenceOnLargerShapes) {
  const char* specs[] = {"n2c48h37w29k48r3s3p1g48", "n1c40h23w31k40r5s5p2u2g40", "n2c19h17w16k19r3s3p3d2g19",
                         "n1c16h15w15k16r7s7p3g16", "n3c70h9w11k70r3s3p1u2g70"};
  std::mt19937 rng(5);
  for (const char* spec : specs)
    for (Layout l : {Layout::nchw, Layout::nhwc})
      for (Activation act : {Activation::none, Activation::relu}) {
        const Conv2dProblem p = Conv2dProblem::parse(spec);
        auto x = small_ints(size_t(p.input_elems()), rng), w = small_ints(size_t(p.weight_elems()), rng);
        auto b = small_ints(size_t(p.k), rng), r = small_ints(size_t(p.output_elems()), rng);
        std::vector<float> want = r, got = r;  // the residual in place
        for (auto* y : {&want, &got}) {
          Epilogue e;
          e.activation = act;
          e.bias = b.data();
          e.residual = y->data();
          RunOptions o;
          o.algo = y == &want ? "cpu_ref" : "cpu_depthwise";
          conv2d(p, ckt::cpu_f32_view(x, l, input_dims(p)), ckt::cpu_f32_view(w, l, weight_dims(p)),
                 ckt::cpu_f32_view(*y, l, output_dims(p)), e, o);
        }
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << spec << " " << to_string(l) << " act " << int(act);
      }
}

TEST(Depthwise, TheHeuristicChoosesItForDepthwiseLayersOnly) {
  const ConvConfig cfg{DType::f32, Layout::nhwc, Device::cpu, MathMode::strict};
  EXPECT_EQ(select(Conv2dProblem::parse("n1c32h56w56k32r3s3p1g32"), cfg).name(), "cpu_depthwise");
  EXPECT_NE(select(Conv2dProblem::parse("n1c32h56w56k64r3s3p1g32"), cfg).name(), "cpu_depthwise");  // multiplier 2
  EXPECT_NE(select(Conv2dProblem::parse("n1c32h56w56k32r3s3p1"), cfg).name(), "cpu_depthwise");
}

}  // namespace
