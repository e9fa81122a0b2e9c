// cpu_winograd beyond the shared sweeps (test_algorithms.cpp runs it on the edge set and the random sweep with
// its 1e-4 rel-L2 bound): images large enough for several chunks of tiles (each thread then takes whole
// chunks) and small enough for one (the threads share it), every epilogue with the residual aliasing the
// output, groups, both layouts; the selection never choosing it unasked; a short workspace refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "convkit/convkit.hpp"
#include "core/compare.hpp"
#include "core/tune.hpp"
#include "test_util.hpp"

using namespace convkit;

namespace {

std::vector<float> gaussian(size_t n, std::mt19937& rng) {
  const std::vector<double> d = ckt::gaussian(n, rng);
  return std::vector<float>(d.begin(), d.end());
}

// y = act(conv + bias + residual) by `algo`, the residual being y itself (in place) when `in_place`.
std::vector<float> run(const Conv2dProblem& p, Layout l, std::vector<float> x, std::vector<float> w,
                       std::vector<float> bias, std::vector<float> res, Activation act, bool in_place,
                       const std::string& algo, const std::string& variant = "") {
  std::vector<float> y = in_place ? res : std::vector<float>(size_t(p.output_elems()), std::nanf(""));
  Epilogue e;
  e.activation = act;
  e.bias = bias.data();
  e.residual = in_place ? y.data() : res.data();
  RunOptions o;
  o.algo = algo;
  o.variant = variant;
  conv2d(p, ckt::cpu_f32_view(x, l, input_dims(p)), ckt::cpu_f32_view(w, l, weight_dims(p)),
         ckt::cpu_f32_view(y, l, output_dims(p)), e, o);
  return y;
}

TEST(Winograd, ManyAndFewChunksEveryEpilogueBothLayoutsBothVariants) {
  // 41x37 at batch 2: 220 F(4x4) tiles (two chunks: each thread takes whole ones), 798 F(2x2) ones; 9x10 at
  // batch 1: 9 F(4x4) tiles (one chunk: the threads share it). Groups, padding 0, 1 and 2, odd K, the
  // residual in place; each variant and the own choice.
  const char* specs[] = {"n2c8h41w37k12r3s3p1", "n2c16h41w37k10r3s3p1g2", "n1c5h9w10k7r3s3p2", "n3c24h13w11k40r3s3p0"};
  std::mt19937 rng(11);
  for (const char* spec : specs)
    for (Layout l : {Layout::nchw, Layout::nhwc})
      for (Activation act : {Activation::none, Activation::relu, Activation::gelu}) {
        const Conv2dProblem p = Conv2dProblem::parse(spec);
        auto x = gaussian(size_t(p.input_elems()), rng), w = gaussian(size_t(p.weight_elems()), rng);
        auto b = gaussian(size_t(p.k), rng), r = gaussian(size_t(p.output_elems()), rng);
        const bool in_place = act != Activation::gelu;
        const auto want = run(p, l, x, w, b, r, act, in_place, "cpu_ref");
        for (const char* variant : {"", "f4x4", "f2x2"}) {
          const auto got = run(p, l, x, w, b, r, act, in_place, "cpu_winograd", variant);
          const auto cmp =
              detail::compare(got.data(), DType::f32, want.data(), DType::f32, int64_t(got.size()));
          ASSERT_EQ(cmp.nonfinite, 0) << spec << " " << to_string(l) << " " << variant;
          // (measured ~1e-6; the bound is 1e-4)
          EXPECT_LE(cmp.rel_l2, 1e-5) << spec << " " << to_string(l) << " act " << int(act) << " variant '" << variant
                                      << "'";
        }
      }
}

TEST(Winograd, NeverChosenUnasked) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c16h20w20k16r3s3p1");
  const ConvConfig cfg{DType::f32, Layout::nchw, Device::cpu, MathMode::strict};
  ASSERT_TRUE(find_algorithm("cpu_winograd")->can_implement(p, cfg));
  EXPECT_NE(select(p, cfg).name(), "cpu_winograd");
  std::vector<std::string> skipped;
  for (const auto& c : detail::tune_candidates(p, cfg, &skipped)) EXPECT_NE(c.algorithm->name(), "cpu_winograd");
  bool said = false;
  for (const std::string& s : skipped) said = said || s.rfind("cpu_winograd: ", 0) == 0;
  EXPECT_TRUE(said) << "the autotuner should say why it skips cpu_winograd";
}

TEST(Winograd, VariantsListTheOwnChoiceFirst) {
  const ConvConfig cfg{DType::f32, Layout::nhwc, Device::cpu, MathMode::strict};
  const Algorithm* a = find_algorithm("cpu_winograd");
  EXPECT_EQ(a->variants(Conv2dProblem::parse("n1c8h56w56k8r3s3p1"), cfg), (std::vector<std::string>{"f4x4", "f2x2"}));
  EXPECT_EQ(a->variants(Conv2dProblem::parse("n1c8h14w14k8r3s3p1"), cfg), (std::vector<std::string>{"f2x2", "f4x4"}));
  EXPECT_TRUE(a->variants(Conv2dProblem::parse("n1c8h14w14k8r1s1"), cfg).empty());
}

TEST(Winograd, ShortWorkspaceIsAnError) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c8h12w12k8r3s3p1");
  const ConvConfig cfg{DType::f32, Layout::nchw, Device::cpu, MathMode::strict};
  const Algorithm* a = find_algorithm("cpu_winograd");
  std::vector<float> x(size_t(p.input_elems()), 1.0f), w(size_t(p.weight_elems()), 1.0f), y(size_t(p.output_elems()));
  std::vector<float> ws(a->workspace_bytes(p, cfg) / sizeof(float) - 1);
  ConvCall c;
  c.problem = p;
  c.config = cfg;
  c.src = ckt::cpu_f32_view(x, Layout::nchw, input_dims(p));
  c.wei = ckt::cpu_f32_view(w, Layout::nchw, weight_dims(p));
  c.dst = ckt::cpu_f32_view(y, Layout::nchw, output_dims(p));
  c.workspace = ws.data();
  c.workspace_bytes = ws.size() * sizeof(float);
  try {
    a->run(c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("workspace"), std::string::npos) << e.what();
  }
}

}  // namespace
