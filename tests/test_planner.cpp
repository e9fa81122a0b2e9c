// The planner (convkit/plan.hpp): plan() is pure and agrees with what runs; execute() logs what it runs;
// the operands reach the registry (alignment, per-sample weights) and an algorithm that refuses them is
// skipped with its reason, never run behind the log's back; the layout policy (PlanOptions::any_layout).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "convkit/per_sample.hpp"
#include "convkit/system.hpp"
#include "core/tune.hpp"
#include "test_util.hpp"

using namespace convkit;
using ckt::HostTensor;

namespace {

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// Sets an environment variable for the scope, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

const PlanVerdict* verdict_of(const Plan& pl, const std::string& name) {
  for (const PlanVerdict& v : pl.verdicts)
    if (v.algorithm == name) return &v;
  return nullptr;
}

}  // namespace

TEST(Planner, OperandsAlignment) {
  EXPECT_EQ(Operands::alignment_of(reinterpret_cast<void*>(0x1000)), 256u);
  EXPECT_EQ(Operands::alignment_of(reinterpret_cast<void*>(0x1002)), 2u);
  EXPECT_EQ(Operands::alignment_of(reinterpret_cast<void*>(0x1010)), 16u);
  EXPECT_EQ(Operands::alignment_of(nullptr), 256u);
  Operands o;
  EXPECT_EQ(o.to_string(), "aligned");
  o.src_align = 4;
  o.per_sample = true;
  EXPECT_EQ(o.to_string(), "input 4-byte aligned, per-sample weights");
  EXPECT_EQ(o.operand_align(), 4u);
}

TEST(Planner, PlanIsPureAndExecuteLogsOnce) {
  ScopedEnv cache("CONVKIT_TUNE_CACHE", "off");
  ScopedEnv log("CONVKIT_LOG", "dispatch");
  const Conv2dProblem p = Conv2dProblem::parse("n1c3h11w13k6r3s3p1u2");  // used by no other test
  const ConvConfig cfg{};
  HostTensor x(DType::f32, Layout::nchw, input_dims(p)), w(DType::f32, Layout::nchw, weight_dims(p)),
      y(DType::f32, Layout::nchw, output_dims(p));
  testing::internal::CaptureStderr();
  const Plan pl = plan(p, cfg, Operands::of(x.view(), w.view(), y.view(), {}));
  const std::string quiet = testing::internal::GetCapturedStderr();
  EXPECT_EQ(quiet, "") << "plan() printed";
  ASSERT_NE(pl.algorithm, nullptr);
  EXPECT_EQ(pl.source, "heuristic");
  EXPECT_FALSE(pl.transforms());
  EXPECT_EQ(pl.algorithm, &select(p, cfg));
  EXPECT_EQ(pl.workspace_bytes, pl.algorithm->workspace_bytes(p, cfg));
  size_t cpu = 0;
  for (const Algorithm* a : algorithms()) cpu += a->device() == Device::cpu;
  EXPECT_EQ(pl.verdicts.size(), cpu) << "one verdict per algorithm of the device";
  ASSERT_NE(verdict_of(pl, pl.algorithm->name()), nullptr);
  EXPECT_EQ(verdict_of(pl, pl.algorithm->name())->answer, "chosen");
  testing::internal::CaptureStderr();
  execute(pl, p, x.view(), w.view(), y.view());
  execute(pl, p, x.view(), w.view(), y.view());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(err, "[convkit dispatch]"), 1u) << err;
  EXPECT_NE(err.find("-> " + pl.algorithm->name()), std::string::npos) << err;
}

TEST(Planner, APlanRunsOnlyTheProblemItWasMadeFor) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c4h6w6k4r3s3p1"), q = Conv2dProblem::parse("n1c4h6w6k4r1s1");
  const Plan pl = plan(p, ConvConfig{});
  EXPECT_EQ(pl.problem, p);
  HostTensor x(DType::f32, Layout::nchw, input_dims(q)), w(DType::f32, Layout::nchw, weight_dims(q)),
      y(DType::f32, Layout::nchw, output_dims(q));
  try {
    execute(pl, q, x.view(), w.view(), y.view());
    FAIL() << "a plan ran another problem";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::invalid_problem);
    EXPECT_NE(std::string(e.what()).find(p.to_string()), std::string::npos) << e.what();
  }
}

TEST(Planner, NamedAlgorithmThatRefusesTheOperandsIsAnError) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c4h6w6k4r3s3p1");
  HostTensor x(DType::f32, Layout::nchw, input_dims(p)), w(DType::f32, Layout::nchw, weight_dims(p)),
      y(DType::f32, Layout::nchw, output_dims(p));
  RunOptions o;
  o.algo = "cpu_per_sample";
  try {
    conv2d(p, x.view(), w.view(), y.view(), {}, o);
    FAIL() << "cpu_per_sample ran a convolution with shared weights";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("per-sample weights only"), std::string::npos) << e.what();
  }
}

TEST(Planner, UnknownAlgorithmAndVariantRules) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c4h6w6k4r3s3p1");
  PlanOptions o;
  o.algo = "nope";
  try {
    plan(p, ConvConfig{}, {}, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::invalid_problem);
  }
  o.algo = "auto";
  o.variant = "x";
  try {
    plan(p, ConvConfig{}, {}, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::invalid_problem);
    EXPECT_NE(std::string(e.what()).find("needs a named algorithm"), std::string::npos) << e.what();
  }
}

TEST(Planner, PerSampleIsARequestPropertyTunedAndCached) {
  const std::string dir = testing::TempDir() + "/convkit_planner_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ScopedEnv cache("CONVKIT_TUNE_CACHE", (dir + "/cache.txt").c_str());
  const Conv2dProblem p = Conv2dProblem::parse("n2c4h7w7k5r3s3p1");
  Operands ops;
  ops.per_sample = true;
  const Plan pl = plan(p, ConvConfig{}, ops);
  ASSERT_NE(pl.algorithm, nullptr);
  EXPECT_EQ(pl.algorithm->name(), "cpu_per_sample");
  EXPECT_NE(verdict_of(pl, "cpu_ref")->answer.find("it has no per-sample-weights mode."), std::string::npos);
  EXPECT_EQ(verdict_of(pl, "cpu_direct")->answer, "rejected: it has no per-sample-weights mode.");
  // autotune: an entry of its own ("nchw+per_sample"), which a plain request does not see.
  HostTensor x(DType::f32, Layout::nchw, input_dims(p)), w(DType::f32, Layout::nchw, per_sample_weight_dims(p)),
      y(DType::f32, Layout::nchw, output_dims(p));
  RunOptions o;
  o.algo = "autotune";
  conv2d_per_sample(p, x.view(), w.view(), y.view(), {}, o);
  const Plan again = plan(p, ConvConfig{}, ops);
  EXPECT_EQ(again.source, "tune cache");
  EXPECT_EQ(again.algorithm->name(), "cpu_per_sample");
  EXPECT_EQ(plan(p, ConvConfig{}).source, "heuristic");
  bool found = false;
  for (const auto& e : detail::tune_cache()->entries()) found = found || e.key.layout == "nchw+per_sample";
  EXPECT_TRUE(found);
  std::filesystem::remove_all(dir);
}

TEST(Planner, LayoutIsFixedOnTheCpu) {
  PlanOptions o;
  o.any_layout = true;
  for (Layout l : {Layout::nchw, Layout::nhwc}) {
    const Plan pl = plan(Conv2dProblem::parse("n1c8h9w9k8r3s3p1"), ConvConfig{DType::f32, l, Device::cpu,
                                                                               MathMode::strict}, {}, o);
    EXPECT_EQ(pl.config.layout, l);
    EXPECT_FALSE(pl.transforms());
  }
}

// ---- on the GPU --------------------------------------------------------------------------------------

TEST(PlannerGpu, Bf16NchwIsComputedInNhwcOnATensorCoreKernel) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  PlanOptions o;
  o.any_layout = true;
  const Plan pl = plan(Conv2dProblem::parse("n2c64h14w14k64r3s3p1"),
                       ConvConfig{DType::bf16, Layout::nchw, Device::cuda, MathMode::strict}, {}, o);
  EXPECT_TRUE(pl.transforms());
  EXPECT_EQ(pl.config.layout, Layout::nhwc);
  ASSERT_NE(pl.algorithm, nullptr);
  EXPECT_EQ(pl.algorithm->name().rfind("cuda_igemm_", 0), 0u) << pl.algorithm->name();
  // Without any_layout the request's layout stands (and a slower kernel takes it).
  const Plan fixed = plan(Conv2dProblem::parse("n2c64h14w14k64r3s3p1"),
                          ConvConfig{DType::bf16, Layout::nchw, Device::cuda, MathMode::strict});
  EXPECT_FALSE(fixed.transforms());
}

// Algorithm::heuristic_choice: cuda_grouped can run a bf16 grouped layer of 8 channels a group with K != C,
// but the heuristic passes it over for the tensor-core kernels (its verdict says so); by name it still runs.
TEST(PlannerGpu, TheHeuristicPassesOverWhatItShouldNotChoose) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const Conv2dProblem p = Conv2dProblem::parse("n2c64h14w14k128r3s3p1g8");
  const ConvConfig cfg{DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict};
  const Plan pl = plan(p, cfg);
  ASSERT_NE(pl.algorithm, nullptr);
  EXPECT_NE(pl.algorithm->name(), "cuda_grouped");
  bool said = false;
  for (const PlanVerdict& v : pl.verdicts)
    if (v.algorithm == "cuda_grouped") said = v.answer.find("passed over by the heuristic") != std::string::npos;
  EXPECT_TRUE(said) << "cuda_grouped's verdict does not say it was passed over";
  PlanOptions named;
  named.algo = "cuda_grouped";
  EXPECT_EQ(plan(p, cfg, {}, named).algorithm->name(), "cuda_grouped");
  // 4 channels a group (its gather path elsewhere): chosen when K != C rules cuda_grouped_mma out
  EXPECT_EQ(plan(Conv2dProblem::parse("n2c64h14w14k128r3s3p1g16"), cfg).algorithm->name(), "cuda_grouped");
}

// The 1x1 rule: cuda_pointwise_mma with a SiLU or sigmoid epilogue for C <= 32 (widening or not) where
// cuda_igemm_wgmma has no exact-width tile, and for C <= 192 on one-pixel images (squeeze-excitation); with
// any other activation, where an exact-width tile runs (its variant checked), from C = 40 on larger images,
// or above C = 192, the heuristic passes it over for the implicit GEMMs and its verdict says why; by name it
// still runs there.
TEST(PlannerGpu, OneByOneLayersOfFewChannelsWithSiluGoToThePointwiseKernel) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const Algorithm* pw = find_algorithm("cuda_pointwise_mma");
  if (pw == nullptr) GTEST_SKIP() << "cuda_pointwise_mma is not in this build";
  const ConvConfig cfg{DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict};
  Operands silu, sigmoid, relu6, plain;
  silu.activation = Activation::silu;
  sigmoid.activation = Activation::sigmoid;
  relu6.activation = Activation::relu6;
  for (const char* spec : {"n2c16h28w28k192r1s1", "n2c24h28w28k128r1s1", "n32c144h1w1k8r1s1", "n32c8h1w1k144r1s1"}) {
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    EXPECT_EQ(plan(p, cfg, silu).algorithm, pw) << spec;
    EXPECT_EQ(plan(p, cfg, sigmoid).algorithm, pw) << spec;
    for (const Operands& ops : {relu6, plain}) {
      const Plan pl = plan(p, cfg, ops);
      ASSERT_NE(pl.algorithm, nullptr) << spec;
      EXPECT_NE(pl.algorithm, pw) << spec;
      ASSERT_NE(verdict_of(pl, "cuda_pointwise_mma"), nullptr);
      EXPECT_NE(verdict_of(pl, "cuda_pointwise_mma")->answer.find("SiLU or sigmoid"), std::string::npos)
          << verdict_of(pl, "cuda_pointwise_mma")->answer;
    }
  }
  for (const char* spec : {"n2c40h28w28k240r1s1", "n2c144h14w14k40r1s1"}) {
    const Plan pl = plan(Conv2dProblem::parse(spec), cfg, silu);
    ASSERT_NE(pl.algorithm, nullptr) << spec;
    EXPECT_NE(pl.algorithm, pw) << spec;
    ASSERT_NE(verdict_of(pl, "cuda_pointwise_mma"), nullptr);
    EXPECT_NE(verdict_of(pl, "cuda_pointwise_mma")->answer.find("C > 32"), std::string::npos)
        << verdict_of(pl, "cuda_pointwise_mma")->answer;
  }
  // The exact-width tiles: the narrowest that holds K, on the heuristic's plan; 256 rows for at most 32
  // columns and 192 for 65-96 where every SM gets two such tiles (exact_width_rows: 56x56 and 112x112 at batch
  // 32 on 132 SMs or fewer); the 256x64 tile before them where a shallow layer widens past 128 channels
  // (tall_64_tile_wins).
  const Algorithm* wgmma = find_algorithm("cuda_igemm_wgmma");
  const std::pair<const char*, const char*> exact[] = {{"n32c16h28w28k96r1s1", "128x96w12s4p/k1"},
                                                       {"n32c16h112w112k96r1s1", "192x96w16s3p/k1"},
                                                       {"n2c24h28w28k144r1s1", "128x144w12s3p/k1"},
                                                       {"n32c24h56w56k144r1s1", "256x64w20s3p/k1"},
                                                       {"n32c144h14w14k24r1s1", "128x32w12s6p/k1"},
                                                       {"n32c32h14w14k16r1s1", "128x16w12s6p/k1"},
                                                       {"n32c32h112w112k16r1s1", "256x16w20s4p/k1"},
                                                       {"n32c96h56w56k24r1s1", "256x32w20s4p/k1"}};
  for (const auto& [spec, tile] : exact) {
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    const Plan pl = plan(p, cfg, silu);
    ASSERT_NE(pl.algorithm, nullptr) << spec;
    EXPECT_NE(pl.algorithm, pw) << spec;
    ASSERT_NE(verdict_of(pl, "cuda_pointwise_mma"), nullptr);
    EXPECT_NE(verdict_of(pl, "cuda_pointwise_mma")->answer.find("exact-width"), std::string::npos)
        << verdict_of(pl, "cuda_pointwise_mma")->answer;
    if (wgmma != nullptr && wgmma->available() && wgmma->can_implement(p, cfg)) {
      EXPECT_EQ(pl.algorithm, wgmma) << spec;
      EXPECT_EQ(wgmma->variants(p, cfg).front(), tile) << spec;
    }
  }
  // Deeper, or between the exact widths: the wave model's tiles.
  if (wgmma != nullptr && wgmma->available())
    for (const char* spec : {"n32c144h14w14k40r1s1", "n32c16h28w28k64r1s1", "n32c256h14w14k32r1s1"}) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      if (!wgmma->can_implement(p, cfg)) continue;
      const std::string v = wgmma->variants(p, cfg).front();
      for (const char* tile : {"128x16w", "128x32w", "128x96w", "128x144w", "256x16w", "256x32w", "192x96w", "256x64w"})
        EXPECT_EQ(v.find(tile), std::string::npos) << spec << ": " << v;
    }
  // The 256x64 tile: shallow layers widening past 128 channels with a tile an SM (relu6: no exact-width rule
  // in the way), not deeper ones nor small images; widening ones of depth 80-112 to part-filled 128-column
  // tiles take 192x128 instead (tall_128_tile_wins).
  if (wgmma != nullptr && wgmma->available()) {
    for (const char* spec : {"n32c64h14w14k384r1s1", "n32c32h28w28k192r1s1"}) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      ASSERT_TRUE(wgmma->can_implement(p, cfg)) << spec;
      EXPECT_EQ(plan(p, cfg, relu6).algorithm, wgmma) << spec;
      EXPECT_EQ(wgmma->variants(p, cfg).front(), "256x64w20s3p/k1") << spec;
    }
    for (const char* spec : {"n32c112h14w14k672r1s1", "n32c80h14w14k480r1s1"}) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      ASSERT_TRUE(wgmma->can_implement(p, cfg)) << spec;
      EXPECT_EQ(plan(p, cfg, relu6).algorithm, wgmma) << spec;
      EXPECT_EQ(wgmma->variants(p, cfg).front(), "192x128w16s3p/k1") << spec;
    }
    for (const char* spec : {"n32c320h7w7k1280r1s1", "n32c160h7w7k960r1s1", "n1c64h14w14k384r1s1"}) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      if (!wgmma->can_implement(p, cfg)) continue;
      EXPECT_EQ(wgmma->variants(p, cfg).front().find("256x64w"), std::string::npos) << spec;
    }
  }
  const Conv2dProblem wide = Conv2dProblem::parse("n2c384h14w14k1536r1s1");
  const Plan pl = plan(wide, cfg, silu);
  ASSERT_NE(pl.algorithm, nullptr);
  EXPECT_NE(pl.algorithm, pw);
  ASSERT_NE(verdict_of(pl, "cuda_pointwise_mma"), nullptr);
  EXPECT_NE(verdict_of(pl, "cuda_pointwise_mma")->answer.find("C > 192"), std::string::npos)
      << verdict_of(pl, "cuda_pointwise_mma")->answer;
  PlanOptions named;
  named.algo = "cuda_pointwise_mma";
  EXPECT_EQ(plan(wide, cfg, {}, named).algorithm, pw);
  EXPECT_EQ(plan(Conv2dProblem::parse("n2c16h28w28k96r1s1"), cfg, {}, named).algorithm, pw);
}

// The 192x128 persistent tile: deeper layers of whole 128-column tiles with no more rows an SM on it than on
// 128-row tiles (tall_128_tile_wins: 1536 -> 384 at 14x14, 3x3 128 at 28x28, 192 -> 768 at 28x28, batch
// 32; 96 -> 384 at 56x56 ahead of the 256x64 tile's rule), not where it has more (the 7x7 layers, 1024 ->
// 256 at 14x14) or half its columns are past K.
TEST(PlannerGpu, DeepLayersWhoseRoundsFavourItTakeTheTallTile) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const Algorithm* wgmma = find_algorithm("cuda_igemm_wgmma");
  if (wgmma == nullptr || !wgmma->available()) GTEST_SKIP() << "cuda_igemm_wgmma is not usable here";
  const convkit::SystemInfo sys = convkit::system_info();
  if (sys.gpus.empty() || sys.gpus.front().sm_count != 132) GTEST_SKIP() << "the rounds are counted for 132 SMs";
  const ConvConfig cfg{DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict};
  for (const char* spec : {"n32c1536h14w14k384r1s1", "n32c128h28w28k128r3s3p1", "n32c192h28w28k768r1s1",
                           "n32c96h56w56k384r1s1"}) {
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    ASSERT_TRUE(wgmma->can_implement(p, cfg)) << spec;
    EXPECT_EQ(plan(p, cfg, {}).algorithm, wgmma) << spec;
    EXPECT_EQ(wgmma->variants(p, cfg).front(), "192x128w16s3p/k1") << spec;
  }
  for (const char* spec : {"n32c3072h7w7k768r1s1", "n32c1024h14w14k256r1s1", "n32c768h28w28k192r1s1"}) {
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    if (!wgmma->can_implement(p, cfg)) continue;
    EXPECT_EQ(wgmma->variants(p, cfg).front().find("192x128w"), std::string::npos) << spec;
  }
}

// The operands' activation is part of what a plan is for: equal operands, equal activations.
TEST(Planner, OperandsCarryTheEpiloguesActivation) {
  Epilogue epi;
  epi.activation = Activation::silu;
  const TensorView none{};
  const Operands a = Operands::of(none, none, none, epi);
  EXPECT_EQ(a.activation, Activation::silu);
  Operands b = a;
  EXPECT_TRUE(a == b);
  b.activation = Activation::relu;
  EXPECT_FALSE(a == b);
}

TEST(PlannerGpu, MisalignedOperandsGoToAnAlgorithmThatTakesThem) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const Algorithm* wgmma = find_algorithm("cuda_igemm_wgmma");
  const Conv2dProblem p = Conv2dProblem::parse("n2c64h10w10k64r3s3p1");
  const ConvConfig cfg{DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict};
  if (!wgmma || !wgmma->available() || !wgmma->can_implement(p, cfg)) GTEST_SKIP() << "no Hopper kernel here";
  ckt::EpilogueSpec spec;
  const ckt::Case c = ckt::make_case(p, cfg, spec, 7, ckt::Fill::small_ints);
  const size_t off = 2;  // one bf16 element: off every 16-byte boundary
  Buffer xs(Device::cuda, c.src.bytes.size() + off), ws(Device::cuda, c.wei.bytes.size() + off),
      ys(Device::cuda, size_t(p.output_elems()) * dtype_size(cfg.dtype) + off);
  std::vector<unsigned char> hx(off, 0), hw(off, 0);
  hx.insert(hx.end(), c.src.bytes.begin(), c.src.bytes.end());
  hw.insert(hw.end(), c.wei.bytes.begin(), c.wei.bytes.end());
  xs.copy_from_host(hx.data(), hx.size());
  ws.copy_from_host(hw.data(), hw.size());
  // The output poisoned (0xFF bytes: bf16 NaNs), its leading pad included, so that every byte read back has
  // been written (initcheck) and an output the kernel skipped shows.
  ys.fill_bytes(0xFF);
  auto at = [&](const Buffer& b) { return static_cast<unsigned char*>(b.data()) + off; };
  const TensorView x{at(xs), cfg.dtype, cfg.layout, cfg.device, input_dims(p)};
  const TensorView w{at(ws), cfg.dtype, cfg.layout, cfg.device, weight_dims(p)};
  const TensorView y{at(ys), cfg.dtype, cfg.layout, cfg.device, output_dims(p)};
  const Plan pl = plan(p, cfg, Operands::of(x, w, y, {}));
  ASSERT_NE(pl.algorithm, nullptr);
  EXPECT_NE(pl.algorithm, wgmma);
  ASSERT_NE(verdict_of(pl, "cuda_igemm_wgmma"), nullptr);
  EXPECT_NE(verdict_of(pl, "cuda_igemm_wgmma")->answer.find("16-byte aligned"), std::string::npos)
      << verdict_of(pl, "cuda_igemm_wgmma")->answer;
  execute(pl, p, x, w, y);
  device_synchronize(Device::cuda);
  HostTensor out(cfg.dtype, cfg.layout, output_dims(p));
  std::vector<unsigned char> back(out.bytes.size() + off);
  ys.copy_to_host(back.data(), back.size());
  std::copy(back.begin() + off, back.end(), out.bytes.begin());
  const auto ref = ckt::reference(c).memory_order();
  const auto v = ckt::check_output(*pl.algorithm, c, out, ref, 1e-2, true);
  EXPECT_TRUE(v.ok) << v.message;
  // Named, it refuses with the reason instead of running another kernel.
  RunOptions named;
  named.algo = "cuda_igemm_wgmma";
  try {
    conv2d(p, x, w, y, {}, named);
    FAIL() << "cuda_igemm_wgmma ran misaligned operands";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), StatusCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("16-byte aligned"), std::string::npos) << e.what();
  }
}
