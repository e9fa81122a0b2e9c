// Tests for the tensor-core configurations: NHWC/KRSC tensors in
//   f16  (fp32 accumulation, the output rounded once to nearest even),
//   bf16 (the same), and
//   f32 with MathMode::tf32 (operands rounded to tf32, fp32 accumulation).
// Every registered CUDA algorithm (and the cuDNN peer) that accepts one of these configurations is run on
// it, once with its own heuristic choice (variant "") and once with every entry of variants() for each
// problem (ConvCall::variant). Nothing here names a kernel: a new tensor-core kernel is covered as soon as
// it is registered and its can_implement() says yes.
//
// What is checked (names start with TensorCore so `--gtest_filter=TensorCore*` picks them all):
//   TensorCore/Tc.<Test>/<algo>_<config>   the sweeps, one instance per CUDA algorithm and configuration:
//     ExactSmallIntegersEveryVariant       small integers, bit-equal to cpu_ref in the output dtype
//     GaussianWithinBoundsEveryVariant     Gaussian data: rel L2 and a per-element bound vs cpu_ref
//     EveryEpilogueEveryVariant            bias, relu, silu, gelu, residual, in place, alpha/beta != 1
//     PoisonPatternsEveryVariant           the output prefilled with NaN / huge / arbitrary patterns
//     MisalignedTensorsEveryVariant        every pointer one element off a 16-byte boundary
//     UnknownVariantIsAnError              run() with a variant that does not exist throws convkit::Error
//     Tf32OperandsRoundedToNearest         tf32 operands just off the grid: rounded, not truncated (tensor-
//                                          core kernels only)
//     QuickSanitizerSubset                 a few tiny shapes, every variant: the compute-sanitizer subset
//   (peers run only the first three; the others are about convkit's own kernels)
//   TensorCoreOracle.*      (CPU only; test_tensor_core_oracle.cpp) cpu_ref's rounding, the exactness of the integer cases, and the
//                           checker's bounds against emulated tensor-core arithmetic and injected faults
//   TensorCoreHarness.*     (CPU only; test_tensor_core_oracle.cpp) the sweeps above, run on a host emulation of a tensor-core kernel:
//                           the correct one passes everything, each injected classic bug is caught
//   TensorCoreDiscovery.*   which algorithm accepts which configuration; CONVKIT_REQUIRE_ALGOS is enforced
//   TensorCoreRejections.*  NCHW and strict fp32 are refused with a reason, and run() throws convkit::Error
//   TensorCoreHuge.*        an f16 NHWC problem past 2^31 elements (input and output), sampled exactly
//
// Environment: CONVKIT_REQUIRE_GPU=1 turns "no GPU" into a failure; CONVKIT_REQUIRE_ALGOS=a,b makes a named
// algorithm that is missing, unavailable, or (for a tensor-core algorithm) rejects a whole configuration a
// failure; CONVKIT_TEST_VERBOSE=1 names every run before it starts (to find a crashing one).
#include <gtest/gtest.h>

#include "tc_harness.hpp"


INSTANTIATE_TEST_SUITE_P(TensorCore, Tc, ::testing::ValuesIn(tc_params()), param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Tc);  // a build without CUDA has no CUDA algorithm

// ---- the sweeps ---------------------------------------------------------------------------------

TEST_P(Tc, ExactSmallIntegersEveryVariant) {
  // Integers in [-3, 3] ([-2, 2] for long reductions): every product and every fp32 partial sum is an
  // exact integer, so any summation order gives the exact sum, and the one final rounding (to nearest
  // even) equals cpu_ref's (double, exact, then rounded once). bf16 outputs past 256 and f16 past 2048
  // do round: the positive-integer cases make that common. Bias, residual (also in place), relu and
  // alpha/beta in {1, 2, -1} stay exact. tf32: small integers are exact in tf32.
  CKT_REQUIRE_USABLE(algo());
  Tally t;
  SweepOpts o;
  o.exact = true;
  sweep(algo(), cases(Set::exact, config()), o, t);
  report(algo().is_peer() ? "small integers (peer: rel L2 only)" : "small integers, bit-equal", t);
  TC_FINISH(t);
}

TEST_P(Tc, GaussianWithinBoundsEveryVariant) {
  // Gaussian data on every main shape, with a rotating epilogue: rel L2 within 1e-2 (f16/bf16) or 1e-3
  // (tf32) and every element within its own bound (see rel_l2_bound and ElementBound for the reasons).
  CKT_REQUIRE_USABLE(algo());
  Tally t;
  sweep(algo(), cases(Set::gaussian, config()), SweepOpts{}, t);
  report("Gaussian, rel L2 + per element", t);
  TC_FINISH(t);
}

TEST_P(Tc, EveryEpilogueEveryVariant) {
  // Every epilogue on three shapes (one of them split-K): exact where the data allow (integers: bias,
  // relu, residual, in place, alpha/beta in {1, 2, -1}), bounded for all of them on Gaussian data
  // (silu, gelu, alpha 0.5/1.75/-0.5/-1.25, beta 0/0.25/0.75/2.5, residual separate and in place).
  CKT_REQUIRE_USABLE(algo());
  Tally t;
  SweepOpts exact;
  exact.exact = true;
  sweep(algo(), cases(Set::epilogue_exact, config()), exact, t);
  sweep(algo(), cases(Set::epilogue_gaussian, config()), SweepOpts{}, t);
  report("every epilogue", t);
  TC_FINISH(t);
}

TEST_P(Tc, PoisonPatternsEveryVariant) {
  // The output starts as 0xFF.. (NaN in f16, bf16 and f32), 0x7F.. (NaN in f16; 3.4e38 in bf16 and f32)
  // and 0xA5.. (an ordinary negative number): an unwritten element stays NaN or wrong, and a kernel that
  // accumulates into dst instead of overwriting it is off by the pattern. Also the "mostly zeros" check.
  TC_CONVKIT_ONLY();
  CKT_REQUIRE_USABLE(algo());
  Tally t;
  SweepOpts o;
  o.exact = true;
  o.poisons = {0xFF, 0x7F, 0xA5};
  sweep(algo(), cases(Set::poison, config()), o, t);
  report("poison patterns", t);
  TC_FINISH(t);
}

TEST_P(Tc, MisalignedTensorsEveryVariant) {
  // Every tensor one element past a 16-byte boundary, channels that would otherwise take 16-byte paths:
  // an algorithm must notice and take a scalar path (or reject the problem with a reason).
  TC_CONVKIT_ONLY();
  CKT_REQUIRE_USABLE(algo());
  Tally t;
  SweepOpts o;
  o.exact = true;
  o.misalign = true;
  sweep(algo(), cases(Set::misaligned, config()), o, t);
  report("misaligned pointers", t);
  if (t.problems == 0 && t.refused_operands > 0)  // the planner hands those to another algorithm (test_planner.cpp)
    GTEST_SKIP() << algo().name() << " refuses misaligned operands (accepts()): " << t.first_operand_reason;
  TC_FINISH(t);
}

TEST_P(Tc, UnknownVariantIsAnError) {
  // A variant that is not in variants() must not silently run something else.
  TC_CONVKIT_ONLY();
  CKT_REQUIRE_USABLE(algo());
  int checked = 0;
  for (TcCase& tc : cases(Set::poison, config())) {
    const ConvConfig cfg = on_device(tc.c.config, algo().device());
    if (!algo().can_implement(tc.c.problem, cfg) || algo().variants(tc.c.problem, cfg).empty()) continue;
    ++checked;
    DeviceCase dc(algo().device(), tc.c);
    try {
      const std::string own;  // the workspace of its own choice: run() itself must refuse the variant
      dc.run(algo(), "no-such-variant/k999", 0xFF, false, &own);
      ADD_FAILURE() << algo().name() << " ran the unknown variant 'no-such-variant/k999' without an error on "
                    << tc.describe();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()), "") << algo().name();
    } catch (const std::exception& e) {
      ADD_FAILURE() << algo().name() << " threw a non-convkit exception for an unknown variant: " << e.what();
    }
  }
  if (checked == 0) GTEST_SKIP() << algo().name() << " lists no variants for " << config_name() << " problems";
}

TEST_P(Tc, Tf32OperandsRoundedToNearest) {
  // tf32 means both operands rounded to tf32 to nearest (not truncated, not left at fp32): one operand
  // just off the tf32 grid, the other small integers, so the exact answer from the rounded operands is
  // exact in fp32, and a kernel must be bit-equal to it. Tensor-core kernels only (cuBLAS, cuDNN and
  // other library paths choose their own conversion).
  TC_CONVKIT_ONLY();
  if (kConfigs[config()].cfg.math != MathMode::tf32) GTEST_SKIP() << "a tf32 test";
  CKT_REQUIRE_USABLE(algo());
  if (!is_tensor_core_algo(algo())) GTEST_SKIP() << algo().name() << " is not a tensor-core kernel of convkit";
  Tally t;
  SweepOpts o;
  o.exact = true;
  sweep(algo(), cases(Set::tf32_rounding, config()), o, t);
  report("tf32 operand rounding", t);
  TC_FINISH(t);
}

TEST_P(Tc, QuickSanitizerSubset) {
  // Seven tiny shapes (C=3, C=12 stride 2, 1x1 with C=5 K=7, groups, split-K, dilation+stride, K=65),
  // every variant, integers (bias + in-place residual + relu, bit-equal) and Gaussian (bias + residual +
  // silu, bounded). Small enough for compute-sanitizer: --gtest_filter='TensorCore/Tc.Quick*'.
  TC_CONVKIT_ONLY();
  CKT_REQUIRE_USABLE(algo());
  Tally t;
  SweepOpts exact;
  exact.exact = true;
  sweep(algo(), cases(Set::quick_exact, config()), exact, t);
  sweep(algo(), cases(Set::quick_gaussian, config()), SweepOpts{}, t);
  report("quick subset", t);
  TC_FINISH(t);
}

// ---- discovery and rejections -------------------------------------------------------------------

TEST(TensorCoreDiscovery, RequiredAlgorithmsAndWhoAcceptsWhat) {
  // Every name in CONVKIT_REQUIRE_ALGOS must be registered; then (GPU) the acceptance matrix is printed,
  // and a required tensor-core algorithm must accept each of the three configurations somewhere.
  for (const std::string& name : ckt::required_algos())
    EXPECT_NE(find_algorithm(name), nullptr) << "CONVKIT_REQUIRE_ALGOS names '" << name << "', which is not registered";
  CKT_REQUIRE_GPU();
  int accepting_configs = 0;
  for (int ci = 0; ci < kNumConfigs; ++ci) {
    std::vector<std::string> who;
    for (const Algorithm* a : ckt::algorithms_and_peers()) {
      if (a->device() != Device::cuda) continue;
      if (!a->available()) {
        EXPECT_FALSE(ckt::is_required(a->name())) << a->name() << " is required but unavailable: " << a->available().reason;
        continue;
      }
      int yes = 0, total = 0;
      std::string why;
      for (const Shape& sh : main_shapes()) {
        ++total;
        const Support s = a->can_implement(Conv2dProblem::parse(sh.spec), on_device(kConfigs[ci].cfg, Device::cuda));
        if (s) ++yes;
        else if (why.empty()) why = std::string(sh.spec) + ": " + s.reason;
      }
      std::printf("  %-8s %-24s accepts %2d of %d problems%s%s\n", kConfigs[ci].name, a->name().c_str(), yes, total,
                  why.empty() ? "" : "; e.g. rejects ", why.c_str());
      if (yes > 0 && !a->is_peer()) who.push_back(a->name());
      if (ckt::is_required(a->name()) && is_tensor_core_algo(*a) && takes_dense_layers(*a)) {
        EXPECT_GT(yes, 0) << a->name() << " is a required tensor-core algorithm but rejects every " << kConfigs[ci].name
                          << " NHWC problem; e.g. " << why;
      }
    }
    accepting_configs += !who.empty();
    std::printf("  %s NHWC: %zu convkit algorithm(s) accept it\n", kConfigs[ci].name, who.size());
  }
  if (accepting_configs == 0) GTEST_SKIP() << "no convkit CUDA algorithm accepts f16, bf16 or tf32 NHWC problems yet";
}

TEST(TensorCoreRejections, NchwAndStrictF32SayNoAndRunThrows) {
  // The gate of a tensor-core algorithm: NCHW (f16, bf16, tf32, f32) and strict fp32 NHWC are refused
  // with a one-sentence reason, and run() called anyway throws convkit::Error (it never computes them).
  CKT_REQUIRE_GPU();
  struct Bad {
    const char* what;
    ConvConfig cfg;
  };
  const Bad bad[] = {
      {"f16 NCHW", {DType::f16, Layout::nchw, Device::cuda, MathMode::strict}},
      {"bf16 NCHW", {DType::bf16, Layout::nchw, Device::cuda, MathMode::strict}},
      {"tf32 NCHW", {DType::f32, Layout::nchw, Device::cuda, MathMode::tf32}},
      {"strict f32 NHWC", {DType::f32, Layout::nhwc, Device::cuda, MathMode::strict}},
      {"strict f32 NCHW", {DType::f32, Layout::nchw, Device::cuda, MathMode::strict}},
  };
  const char* specs[] = {"n1c16h8w8k16r3s3p1", "n2c3h9w9k8r3s3p1u2"};
  int algos = 0;
  for (const Algorithm* a : algorithms()) {
    if (!is_tensor_core_algo(*a)) continue;
    std::string why;
    if (ckt::usability(*a, &why) != ckt::Use::ok) {
      EXPECT_FALSE(ckt::is_required(a->name())) << why;
      continue;
    }
    ++algos;
    for (const Bad& b : bad)
      for (const char* spec : specs) {
        const Conv2dProblem p = Conv2dProblem::parse(spec);
        const Support s = a->can_implement(p, b.cfg);
        EXPECT_FALSE(s.ok) << a->name() << " accepts " << b.what << " " << spec << "; tensor cores take NHWC f16/bf16/tf32 only";
        if (s.ok) continue;
        expect_good_reason(*a, s, std::string(b.what) + " " + spec);
        const TcCase tc = make_tc_case(b.what, p, b.cfg, epi(true, false, false, Activation::none), 77, Data::ints);
        try {
          DeviceCase dc(Device::cuda, tc.c);
          dc.run(*a, "", 0xFF);
          ADD_FAILURE() << a->name() << " ran " << b.what << " " << spec << " although can_implement says: " << s.reason;
        } catch (const Error& e) {
          EXPECT_FALSE(std::string(e.what()).empty()) << a->name();
        } catch (const std::exception& e) {
          ADD_FAILURE() << a->name() << " on " << b.what << " " << spec << " threw a non-convkit exception: " << e.what();
        }
      }
    std::printf("  %s refuses NCHW and strict fp32 with reasons\n", a->name().c_str());
  }
  if (algos == 0) GTEST_SKIP() << "no tensor-core algorithm is registered (and usable) yet";
}

// ---- past 2^31 elements -------------------------------------------------------------------------

namespace {
template <typename F>
void tc_parallel_for(int64_t n, F&& fn) {
  const int threads = int(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { fn(n * t / threads, n * (t + 1) / threads); });
  for (auto& th : pool) th.join();
}

// A small integer in [-2, 2] from an element offset (no second host copy needed).
inline int huge_pattern(uint64_t i, uint64_t salt) {
  const uint64_t h = (i + salt) * 0x9E3779B97F4A7C15ull;
  return int((h >> 40) % 5) - 2;
}
}  // namespace

// Runs every CUDA convkit algorithm that accepts `spec` in f16 NHWC on integer data (see the tests below).
void check_huge_f16(const char* spec) {
  const Conv2dProblem p = Conv2dProblem::parse(spec);
  const ConvConfig cfg{DType::f16, Layout::nhwc, Device::cuda, MathMode::strict};
  ASSERT_GT(p.output_elems(), int64_t(1) << 31);
  std::vector<const Algorithm*> algos;
  for (const Algorithm* a : algorithms()) {
    std::string why;
    if (a->device() != Device::cuda || ckt::usability(*a, &why) != ckt::Use::ok || !ckt::plain(*a)) continue;
    const Support s = a->can_implement(p, cfg);
    if (s) algos.push_back(a);
    else std::printf("  %s rejects %s %s: %s\n", a->name().c_str(), p.to_string().c_str(), cfg.to_string().c_str(),
                     s.reason.c_str());
  }
  if (algos.empty()) GTEST_SKIP() << "no CUDA algorithm accepts " << p.to_string() << " in f16 NHWC";
  const auto t0 = std::chrono::steady_clock::now();

  Buffer src, dst, wei, bias;
  const size_t in_bytes = size_t(p.input_elems()) * 2, out_bytes = size_t(p.output_elems()) * 2;
  try {
    src = Buffer(Device::cuda, in_bytes);
    dst = Buffer(Device::cuda, out_bytes);
  } catch (const Error& e) {
    GTEST_SKIP() << "not enough free device memory for two 4.3 GB f16 tensors: " << e.what();
  }
  uint16_t bits[5];
  for (int v = -2; v <= 2; ++v) bits[v + 2] = detail::float_to_half(float(v));
  std::vector<uint16_t> host(size_t(std::max(p.input_elems(), p.output_elems())));
  tc_parallel_for(p.input_elems(), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) host[size_t(i)] = bits[huge_pattern(uint64_t(i), 1) + 2];
  });
  src.copy_from_host(host.data(), in_bytes);
  std::vector<uint16_t> w(size_t(p.weight_elems())), b(size_t(p.k));
  for (size_t i = 0; i < w.size(); ++i) w[i] = bits[huge_pattern(i, 2) + 2];
  for (size_t i = 0; i < b.size(); ++i) b[i] = bits[huge_pattern(i, 3) + 2];
  wei = Buffer(Device::cuda, w.size() * 2);
  wei.copy_from_host(w.data(), w.size() * 2);
  bias = Buffer(Device::cuda, b.size() * 2);
  bias.copy_from_host(b.data(), b.size() * 2);

  // Sample points and their exact values (computed now, while `host` still holds the input).
  const int64_t P = p.p(), Q = p.q();
  std::vector<std::array<int64_t, 4>> points;
  for (int64_t n : {int64_t(0), p.n - 1})
    for (int64_t k : {int64_t(0), int64_t(1), p.k / 2, p.k - 1})
      for (int64_t pp : {int64_t(0), int64_t(1), P / 2, P - 2, P - 1})
        for (int64_t qq : {int64_t(0), int64_t(1), Q / 2, Q - 2, Q - 1}) points.push_back({n, k, pp, qq});
  std::mt19937_64 rng(4242);
  for (int i = 0; i < 3000; ++i)
    points.push_back({int64_t(rng() % uint64_t(p.n)), int64_t(rng() % uint64_t(p.k)), int64_t(rng() % uint64_t(P)),
                      int64_t(rng() % uint64_t(Q))});
  const TensorView xh{host.data(), DType::f16, Layout::nhwc, Device::cpu, input_dims(p)};
  const TensorView wh{w.data(), DType::f16, Layout::nhwc, Device::cpu, weight_dims(p)};
  const TensorView yv{nullptr, DType::f16, Layout::nhwc, Device::cuda, output_dims(p)};
  std::vector<double> want(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    const auto [n, k, pp, qq] = points[i];
    want[i] = detail::reference_dot(p, xh, wh, n, k, pp, qq) + detail::half_to_float(b[size_t(k)]);
    ASSERT_LE(std::fabs(want[i]), 2048.0);  // exact in f16
  }
  ASSERT_EQ(yv.offset(p.n - 1, p.k - 1, P - 1, Q - 1), p.output_elems() - 1);

  int ran = 0;
  for (const Algorithm* a : algos) {
    std::vector<std::string> vars{""};
    const std::vector<std::string> listed = a->variants(p, cfg);
    if (listed.size() > 1) vars.push_back(listed.back());
    for (const std::string& v : vars) {
      const std::string who = a->name() + " (variant '" + v + "') on " + p.to_string() + " " + cfg.to_string();
      const size_t ws_bytes = v.empty() ? a->workspace_bytes(p, cfg) : a->variant_workspace_bytes(p, cfg, v);
      Buffer ws;
      try {
        ws = Buffer(Device::cuda, ws_bytes);
      } catch (const Error& e) {
        std::printf("  %s: a workspace of %.1f GB does not fit next to the tensors, skipped: %s\n", who.c_str(),
                    double(ws_bytes) / 1e9, e.what());
        continue;
      }
      dst.fill_bytes(0xFF);
      ConvCall call;
      call.problem = p;
      call.config = cfg;
      call.src = TensorView{src.data(), DType::f16, Layout::nhwc, Device::cuda, input_dims(p)};
      call.wei = TensorView{wei.data(), DType::f16, Layout::nhwc, Device::cuda, weight_dims(p)};
      call.dst = TensorView{dst.data(), DType::f16, Layout::nhwc, Device::cuda, output_dims(p)};
      call.epilogue.bias = bias.data();
      call.workspace = ws.data();
      call.workspace_bytes = ws_bytes;
      call.variant = v;
      const auto r0 = std::chrono::steady_clock::now();
      try {
        a->run(call);
        device_synchronize(Device::cuda);
      } catch (const std::exception& e) {
        ADD_FAILURE() << who << " threw: " << e.what();
        continue;
      }
      const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
      ++ran;
      dst.copy_to_host(host.data(), out_bytes);
      std::atomic<int64_t> nonfinite{0};
      tc_parallel_for(p.output_elems(), [&](int64_t lo, int64_t hi) {
        int64_t local = 0;
        for (int64_t i = lo; i < hi; ++i) local += (host[size_t(i)] & 0x7C00u) == 0x7C00u;  // NaN or Inf
        nonfinite += local;
      });
      EXPECT_EQ(nonfinite.load(), 0) << who << ": outputs left unwritten (NaN poison) or non-finite";
      int bad = 0;
      for (size_t i = 0; i < points.size(); ++i) {
        const auto [n, k, pp, qq] = points[i];
        const int64_t off = yv.offset(n, k, pp, qq);
        const double got = detail::half_to_float(host[size_t(off)]);
        if (got != want[i] && bad++ < 5)
          ADD_FAILURE() << who << " at (n=" << n << ",k=" << k << ",p=" << pp << ",q=" << qq << ") offset " << off
                        << ": got " << got << ", want " << want[i];
      }
      std::printf("  %s: %.3f s, %d of %zu sampled points wrong, %lld non-finite\n", who.c_str(), run_s, bad,
                  points.size(), static_cast<long long>(nonfinite.load()));
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  f16 past 2^31: %d runs in %.1f s\n", ran, secs);
  if (ran == 0) GTEST_SKIP() << "no CUDA algorithm had device memory for its workspace";
}

TEST(TensorCoreHuge, F16NhwcPast2e31Elements) {
  // n2c32h5793w5793k32r3s3p1 in f16 NHWC: 2,147,766,336 input and output elements each (> 2^31; 4.3 GB
  // each). Integers in [-2, 2] and an integer bias: every output is an integer of magnitude <= 1154, exact
  // in f16. Every output is scanned for leftover NaN poison; a few thousand points (the corners and edges
  // of both images, the last element, random ones) are compared exactly with a host double sum
  // (detail::reference_dot). Every CUDA convkit algorithm that accepts it runs its own choice and, when it
  // has variants, its last one too.
  CKT_REQUIRE_GPU();
  ASSERT_GT(Conv2dProblem::parse("n2c32h5793w5793k32r3s3p1").input_elems(), int64_t(1) << 31);
  check_huge_f16("n2c32h5793w5793k32r3s3p1");
}

TEST(TensorCoreHuge, F16NhwcStemPast2e31Outputs) {
  // A 3-channel 3x3 stem (cuda_stem_mma's kind) whose output passes 2^31 elements (2,152,960,000; 4.3 GB)
  // while its input (101 M elements) does not: output offsets in 64 bits. Checked as above.
  CKT_REQUIRE_GPU();
  check_huge_f16("n1c3h5800w5800k64r3s3p1");
}

TEST(TensorCoreHuge, F16Nhwc1x1WideningPast2e31Outputs) {
  // A widening 1x1 (16 -> 128 channels, cuda_pointwise_mma's kind) whose output passes 2^31 elements
  // (2,149,580,800; 4.3 GB) while its input does not: the output offsets m * K in 64 bits. Outputs are
  // integers of magnitude <= 34, checked as above.
  CKT_REQUIRE_GPU();
  check_huge_f16("n1c16h4096w4100k128r1s1");
}
