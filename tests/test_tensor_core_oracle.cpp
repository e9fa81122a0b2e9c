// The tensor-core harness checked on the CPU: cpu_ref's rounding, the exactness of the integer cases, the
// checker's bounds against emulated tensor-core arithmetic and injected faults (TensorCoreOracle.*), and the
// sweeps of test_tensor_core.cpp run on a host emulation of a tensor-core kernel: the correct one passes
// everything, each injected classic bug is caught (TensorCoreHarness.*).
#include <gtest/gtest.h>

#include "tc_harness.hpp"

// ---- the oracle and the checker, on the CPU -----------------------------------------------------

namespace {
// Rounds an integer to `bits` significant bits, to nearest, ties to even, in integer arithmetic: the
// value an exact integer sum must take in a format with that significand (f16 11, bf16 8, f32 24).
int64_t round_integer(int64_t v, int bits) {
  const bool neg = v < 0;
  uint64_t m = uint64_t(neg ? -v : v);
  int len = 0;
  while ((m >> len) != 0) ++len;
  if (len <= bits) return v;
  const int shift = len - bits;
  uint64_t q = m >> shift;
  const uint64_t rem = m & ((uint64_t(1) << shift) - 1), half = uint64_t(1) << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  const int64_t r = int64_t(q << shift);
  return neg ? -r : r;
}

int significand_bits(DType t) { return t == DType::f16 ? 11 : t == DType::bf16 ? 8 : 24; }

// The memory-order output of the test's own double loop, rounded with round_integer (integer cases).
std::vector<double> integer_rounded_reference(const TcCase& t) {
  std::vector<double> logical = ckt::independent_reference_logical(t.c);
  for (double& v : logical) {
    EXPECT_EQ(v, std::nearbyint(v)) << "not an integer: " << t.describe();
    v = double(round_integer(int64_t(v), significand_bits(t.c.config.dtype)));
  }
  std::vector<double> mem(logical.size());
  const auto dims = output_dims(t.c.problem);
  const TensorView view{nullptr, t.c.config.dtype, t.c.config.layout, Device::cpu, dims};
  size_t i = 0;
  for (int64_t a = 0; a < dims[0]; ++a)
    for (int64_t b = 0; b < dims[1]; ++b)
      for (int64_t c = 0; c < dims[2]; ++c)
        for (int64_t d = 0; d < dims[3]; ++d) mem[size_t(view.offset(a, b, c, d))] = logical[i++];
  return mem;
}

// The largest magnitude any partial sum of the case can reach: |alpha|*gemm_k*max|x|*max|w| + max|bias| +
// |beta|*max|residual| (from the data, not assumed).
double worst_magnitude(const Case& c) {
  auto maxabs = [](const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m = std::max(m, std::fabs(x));
    return m;
  };
  double b = 0;
  for (int64_t i = 0; i < c.problem.k && !c.bias.empty(); ++i)
    b = std::max(b, std::fabs(detail::load_as_double(c.bias.data(), c.config.dtype, i)));
  const double r = c.epi.residual ? maxabs(c.residual.memory_order()) : 0.0;
  return std::fabs(c.epi.alpha) * double(c.problem.gemm_k()) * maxabs(c.src.memory_order()) *
             maxabs(c.wei.memory_order()) +
         b + std::fabs(c.epi.beta) * r;
}

// Emulates a tensor-core kernel on the host: operands rounded to tf32 (tf32 config), products summed in
// fp32 in (c, r, s) order, the epilogue in fp32, one rounding to the output dtype.
HostTensor emulate_tensor_core(const Case& c) {
  const Conv2dProblem& pb = c.problem;
  const bool tf32 = c.config.math == MathMode::tf32;
  auto op = [&](double v) { return tf32 ? round_to_tf32(float(v)) : float(v); };
  HostTensor out(c.config.dtype, c.config.layout, output_dims(pb));
  const int64_t P = pb.p(), Q = pb.q(), Cg = pb.c_per_group(), Kg = pb.k_per_group();
  for (int64_t n = 0; n < pb.n; ++n)
    for (int64_t k = 0; k < pb.k; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          float acc = 0;
          const int64_t g = k / Kg;
          for (int64_t cc = 0; cc < Cg; ++cc)
            for (int64_t r = 0; r < pb.r; ++r)
              for (int64_t s = 0; s < pb.s; ++s) {
                const int64_t h = p * pb.stride_h + r * pb.dilation_h - pb.pad_h;
                const int64_t w = q * pb.stride_w + s * pb.dilation_w - pb.pad_w;
                if (h >= 0 && h < pb.h && w >= 0 && w < pb.w)
                  acc += op(c.src.at(n, g * Cg + cc, h, w)) * op(c.wei.at(k, cc, r, s));
              }
          const float bias = c.bias.empty() ? 0.0f : float(detail::load_as_double(c.bias.data(), c.config.dtype, k));
          const float res = c.epi.residual ? float(c.residual.at(n, k, p, q)) : 0.0f;
          const float y = detail::apply_epilogue<float>(c.epi.activation, c.epi.alpha, c.epi.beta, acc, !c.bias.empty(),
                                                        bias, c.epi.residual, res);
          out.set(n, k, p, q, double(y));
        }
  return out;
}

// A stand-in "algorithm" for the checker tests (only its name and is_peer() are used).
class Emulated final : public Algorithm {
 public:
  std::string name() const override { return "emulated_tensor_core"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override { return "host emulation of tensor-core arithmetic"; }
  Support can_implement(const Conv2dProblem&, const ConvConfig&) const override { return Support::yes(); }
  void run(const ConvCall&) const override {}
};
}  // namespace

TEST(TensorCoreOracle, CpuRefRoundsExactSumsOnceToNearestEven) {
  // 1x1 convolution, C=2, weights {1, 1}: outputs are x0 + x1. The sums sit between representable values
  // of each format, so the written values are the round-to-nearest-even ones, worked out by hand:
  //   bf16 (8 significant bits; spacing 2 in [256, 512)): 257 -> 256, 259 -> 260, 258 -> 258, -259 -> -260
  //   f16 (11 bits; spacing 2 in [2048, 4096)):          2049 -> 2048, 2051 -> 2052, 2050 -> 2050, -2051 -> -2052
  const Conv2dProblem p = Conv2dProblem::parse("n1c2h1w4k1r1s1");
  struct Want {
    DType dt;
    double base;
    std::vector<double> expect;
  };
  for (const Want& w : {Want{DType::bf16, 256, {256, 260, 258, -260}}, Want{DType::f16, 2048, {2048, 2052, 2050, -2052}}}) {
    for (Layout l : {Layout::nhwc, Layout::nchw}) {
      TcCase t = make_tc_case("hand rounding", p, ConvConfig{w.dt, l, Device::cpu, MathMode::strict}, EpilogueSpec{}, 1,
                              Data::ints);
      // x[c=0] = base (or -base), x[c=1] = 1, 3, 2, -3; both are exact in the format.
      t.c.src.fill_logical({w.base, w.base, w.base, -w.base, 1, 3, 2, -3});
      t.c.wei.fill_logical({1, 1});
      EXPECT_EQ(ckt::reference(t.c).logical(), w.expect) << to_string(w.dt) << " " << to_string(l);
      EXPECT_EQ(integer_rounded_reference(t), ckt::reference(t.c).memory_order()) << to_string(w.dt);
    }
  }
  EXPECT_EQ(round_integer(257, 8), 256);
  EXPECT_EQ(round_integer(259, 8), 260);
  EXPECT_EQ(round_integer(-2051, 11), -2052);
  EXPECT_EQ(round_integer(16777217, 24), 16777216);
  EXPECT_EQ(round_integer(1000, 8), 1000);  // 1000 = 125 * 8: 7 significant bits
}

TEST(TensorCoreOracle, CpuRefSmallIntegerOutputsMatchIntegerRounding) {
  // cpu_ref in f16, bf16 and f32 on integer cases (the quick shapes with their epilogue, and positive data
  // whose outputs really round), against the test's own double loop rounded in integer arithmetic.
  int rounded = 0;
  for (int ci = 0; ci < kNumConfigs; ++ci) {
    std::deque<TcCase>& set = cases(Set::quick_exact, ci);
    std::vector<TcCase*> all;
    for (TcCase& t : set) all.push_back(&t);
    TcCase pos = make_tc_case("positive ints", Conv2dProblem::parse("n1c256h3w3k8r3s3p1"), kConfigs[ci].cfg,
                              epi(true, false, false, Activation::none), 4242, Data::positive_ints);
    all.push_back(&pos);
    for (TcCase* t : all) {
      if (t->c.problem.flops() > 2e7) continue;  // the independent loop is single-threaded
      const std::vector<double> want = integer_rounded_reference(*t);
      const std::vector<double>& got = reference(*t);
      ASSERT_EQ(want.size(), got.size());
      int64_t bad = 0, first = -1;
      for (size_t i = 0; i < want.size(); ++i) {
        if (want[i] != got[i] && bad++ == 0) first = int64_t(i);
        const double exact = std::fabs(want[i]);
        rounded += exact > (t->c.config.dtype == DType::bf16 ? 256 : 2048) && t->c.config.dtype != DType::f32;
      }
      EXPECT_EQ(bad, 0) << t->describe() << ": first at " << first << " got " << got[size_t(std::max<int64_t>(first, 0))]
                        << " want " << want[size_t(std::max<int64_t>(first, 0))];
    }
  }
  EXPECT_GT(rounded, 100) << "the positive-integer cases should produce outputs that really round";
}

TEST(TensorCoreOracle, ExactCasesStayExactlyRepresentable) {
  // The premise of bit-equality: in every integer case (all sets, all three configurations) every partial
  // sum of every output is an integer below 2^24 (exact in fp32), and below 65504 in f16 (no overflow).
  // The bound is taken from the data: |alpha|*gemm_k*max|x|*max|w| + max|bias| + |beta|*max|residual|.
  int n = 0;
  for (int ci = 0; ci < kNumConfigs; ++ci)
    for (Set s : {Set::exact, Set::epilogue_exact, Set::quick_exact, Set::poison, Set::misaligned})
      for (const TcCase& t : cases(s, ci)) {
        ++n;
        const double worst = worst_magnitude(t.c);
        EXPECT_LT(worst, 16777216.0) << t.describe();
        if (t.c.config.dtype == DType::f16) {
          EXPECT_LE(worst, 65504.0) << t.describe();
        }
        for (double v : t.c.src.memory_order()) ASSERT_EQ(v, std::nearbyint(v)) << t.describe();
        for (double v : t.c.wei.memory_order()) ASSERT_EQ(v, std::nearbyint(v)) << t.describe();
        EXPECT_TRUE(t.c.epi.alpha == 1.0f || t.c.epi.alpha == 2.0f) << t.describe();
        EXPECT_EQ(t.c.epi.activation == Activation::silu || t.c.epi.activation == Activation::gelu, false) << t.describe();
      }
  EXPECT_GT(n, 150);
}

TEST(TensorCoreOracle, BoundsAcceptEmulatedTensorCoreArithmetic) {
  // The bounds must not be tighter than the arithmetic they allow: a host emulation (tf32 operands rounded
  // to nearest, fp32 sums in one long chain, the epilogue in fp32, one output rounding) passes rel L2 and
  // the per-element bound on deep reductions with every activation, in all three configurations.
  const Emulated em;
  const char* specs[] = {"n1c256h6w6k32r3s3p1", "n1c12h9w9k16r3s3p1", "n2c64h5w5k24r1s1"};
  int n = 0;
  for (int ci = 0; ci < kNumConfigs; ++ci)
    for (const char* spec : specs)
      for (const EpilogueSpec& e : {epi(true, true, false, Activation::gelu, 0.5f, -1.5f),
                                    epi(true, false, false, Activation::silu), epi(false, true, false, Activation::relu)}) {
        TcCase t = make_tc_case("emulation", Conv2dProblem::parse(spec), kConfigs[ci].cfg, e, 300u + uint32_t(n++),
                                Data::gaussian);
        const HostTensor out = emulate_tensor_core(t.c);
        const std::string m = verdict(em, t, "", out, false, true);
        EXPECT_TRUE(m.empty()) << m;
        // And the emulation is not the reference itself (the test would prove nothing).
        if (kConfigs[ci].cfg.math == MathMode::tf32) {
          const auto cmp = detail::compare(out.bytes.data(), out.dtype, reference(t));
          EXPECT_GT(cmp.rel_l2, 1e-5) << "the tf32 emulation should differ visibly from fp32";
          std::printf("  %s %s: emulated tf32 rel L2 %.2e (bound %.0e)\n", spec, e.to_string().c_str(), cmp.rel_l2,
                      rel_l2_bound(t.c.config));
        }
      }
}

TEST(TensorCoreOracle, CheckerCatchesBrokenOutputs) {
  // Each fault must fail the check it targets: an unwritten (NaN) element, an all-zero output, one ulp in
  // an exact case, and one element off by 3% in a Gaussian case of 65536 outputs (too little for rel L2,
  // not for the per-element bound).
  const Emulated em;
  auto strict_ref = [](const TcCase& t) {
    Case c = t.c;
    c.config.math = MathMode::strict;
    return ckt::run_case(ckt::cpu_ref(), c);
  };
  for (int ci = 0; ci < kNumConfigs; ++ci) {
    const DType dt = kConfigs[ci].cfg.dtype;
    TcCase ex = make_tc_case("checker", Conv2dProblem::parse("n1c32h24w24k16r3s3p1"), kConfigs[ci].cfg,
                             epi(true, false, false, Activation::none), 91, Data::ints);
    const HostTensor good = strict_ref(ex);
    EXPECT_EQ(verdict(em, ex, "", good, true, false), "");
    HostTensor nan = good;
    std::memset(nan.bytes.data() + 5 * dtype_size(dt), 0xFF, dtype_size(dt));
    EXPECT_NE(verdict(em, ex, "", nan, true, false).find("NaN"), std::string::npos) << kConfigs[ci].name;
    HostTensor zeros = good;
    std::fill(zeros.bytes.begin(), zeros.bytes.end(), 0);
    EXPECT_NE(verdict(em, ex, "", zeros, false, false).find("zeros"), std::string::npos) << kConfigs[ci].name;
    HostTensor ulp = good;
    const int64_t i = ulp.numel() / 2;
    const double v = detail::load_as_double(ulp.bytes.data(), dt, i);
    detail::store_from_double(ulp.bytes.data(), dt, i, v + std::max(1.0, std::fabs(v) * 4 * unit_roundoff(dt)));
    EXPECT_NE(verdict(em, ex, "", ulp, true, false).find("bit-equal"), std::string::npos) << kConfigs[ci].name;

    TcCase ga = make_tc_case("checker", Conv2dProblem::parse("n1c8h64w64k16r3s3p1"), kConfigs[ci].cfg,
                             epi(true, false, false, Activation::none), 92, Data::gaussian);
    HostTensor one = strict_ref(ga);
    EXPECT_EQ(verdict(em, ga, "", one, false, true), "");
    const auto& ref = reference(ga);
    int64_t big = 0;
    for (int64_t j = 0; j < int64_t(ref.size()); ++j)
      if (std::fabs(ref[size_t(j)]) > std::fabs(ref[size_t(big)])) big = j;
    detail::store_from_double(one.bytes.data(), dt, big, ref[size_t(big)] * 1.03);
    const auto cmp = detail::compare(one.bytes.data(), dt, ref);
    EXPECT_LT(cmp.rel_l2, rel_l2_bound(ga.c.config)) << "rel L2 alone would miss it";
    EXPECT_NE(verdict(em, ga, "", one, false, true).find("per-element"), std::string::npos) << kConfigs[ci].name;
  }
}

// ---- the harness itself, against an emulated tensor-core kernel on the CPU ------------------------

namespace {
// A CPU stand-in with a tensor-core kernel's contract: the same gate (NHWC; f16, bf16, or f32 with tf32),
// two variants ("k1", and "k3": the reduction split in three fp32 partial sums kept in the workspace),
// tf32 operands rounded to nearest, fp32 sums, the epilogue in fp32 reading the residual before the
// store, one rounding. Each Bug is a classic kernel mistake that the sweeps above must catch.
class EmulatedTc final : public Algorithm {
 public:
  enum Bug { none, skip_last, accumulate_into_dst, residual_after_write, truncate_tf32, round_partials, needs_alignment };
  explicit EmulatedTc(Bug b = none) : bug_(b) {}
  std::string name() const override { return "emulated_tc"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override { return "host emulation of a tensor-core implicit GEMM"; }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (cfg.layout != Layout::nhwc) return Support::no("it reads NHWC activations and KRSC weights only.");
    if (cfg.dtype == DType::f32 && cfg.math != MathMode::tf32) return Support::no("strict fp32 is not emulated.");
    if (!p.validate().ok()) return Support::no("the problem is invalid.");
    return Support::yes();
  }
  std::vector<std::string> variants(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!can_implement(p, cfg)) return {};
    return own(p) == "k3" ? std::vector<std::string>{"k3", "k1"} : std::vector<std::string>{"k1", "k3"};
  }
  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    return variant_workspace_bytes(p, cfg, own(p));
  }
  size_t variant_workspace_bytes(const Conv2dProblem& p, const ConvConfig&, const std::string& v) const override {
    return (v.empty() ? own(p) : v) == "k3" ? size_t(3 * p.output_elems()) * sizeof(float) : 0;
  }
  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok) throw Error(StatusCode::unsupported, ok.reason);
    const std::string v = call.variant.empty() ? own(pb) : call.variant;
    if (v != "k1" && v != "k3") throw Error(StatusCode::invalid_problem, "emulated_tc has no variant '" + v + "'.");
    const int splits = v == "k3" ? 3 : 1;
    const size_t ws_need = variant_workspace_bytes(pb, call.config, v);
    if (call.workspace_bytes < ws_need) throw Error(StatusCode::invalid_tensor, "workspace too small.");
    const DType dt = call.config.dtype;
    const bool tf32 = dt == DType::f32;
    auto operands = [&](const TensorView& t) {
      const void* base = t.data;
      if (bug_ == needs_alignment)  // as if a 16-byte vector load ignored the low address bits
        base = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(t.data) & ~uintptr_t(15));
      std::vector<float> f(size_t(t.numel()));
      for (int64_t i = 0; i < t.numel(); ++i) {
        const float x = float(detail::load_as_double(base, dt, i));
        f[size_t(i)] = !tf32 ? x : bug_ == truncate_tf32 ? detail::bits_to_float(detail::float_to_bits(x) & ~0x1FFFu)
                                                         : round_to_tf32(x);
      }
      return f;
    };
    const std::vector<float> x = operands(call.src), w = operands(call.wei);
    float* partial = static_cast<float*>(call.workspace);
    const Epilogue& e = call.epilogue;
    const int64_t P = pb.p(), Q = pb.q(), Cg = pb.c_per_group(), Kg = pb.k_per_group(), G = pb.gemm_k();
    const int64_t last = call.dst.numel() - 1;
    for (int64_t n = 0; n < pb.n; ++n)
      for (int64_t k = 0; k < pb.k; ++k)
        for (int64_t p = 0; p < P; ++p)
          for (int64_t q = 0; q < Q; ++q) {
            const int64_t o = call.dst.offset(n, k, p, q), g = k / Kg;
            float sum[3] = {0, 0, 0};
            // The GEMM's k = (r, s, c) (channels contiguous in NHWC and KRSC), split in `splits` ranges.
            for (int64_t r = 0; r < pb.r; ++r)
              for (int64_t s = 0; s < pb.s; ++s) {
                const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
                const int64_t ww = q * pb.stride_w - pb.pad_w + s * pb.dilation_w;
                if (h < 0 || h >= pb.h || ww < 0 || ww >= pb.w) continue;
                const float* xs = x.data() + call.src.offset(n, g * Cg, h, ww);
                const float* ws = w.data() + call.wei.offset(k, 0, r, s);
                const int64_t j0 = (r * pb.s + s) * Cg;
                for (int64_t c = 0; c < Cg; ++c) sum[(j0 + c) * splits / G] += xs[c] * ws[c];
              }
            float acc = 0;
            for (int i = 0; i < splits; ++i) {
              float part = sum[i];
              if (splits > 1) {
                partial[size_t(i * (last + 1) + o)] = part;  // through the workspace, as a split-K kernel does
                part = partial[size_t(i * (last + 1) + o)];
              }
              if (bug_ == round_partials && splits > 1) part = round_to(dt, part);  // partials kept in dtype
              acc += part;
            }
            if (bug_ == skip_last && o == last) continue;
            if (bug_ == residual_after_write) detail::store_from_double(call.dst.data, dt, o, acc);
            const float before = float(detail::load_as_double(call.dst.data, dt, o));
            const float bias = e.bias ? float(detail::load_as_double(e.bias, dt, k)) : 0.0f;
            const float res = e.residual ? float(detail::load_as_double(e.residual, dt, o)) : 0.0f;
            float y = detail::apply_epilogue<float>(e.activation, e.alpha, e.beta, acc, e.bias != nullptr, bias,
                                                    e.residual != nullptr, res);
            if (bug_ == accumulate_into_dst) y += before;
            detail::store_from_double(call.dst.data, dt, o, y);
          }
  }

 private:
  static std::string own(const Conv2dProblem& p) { return p.gemm_k() > 1000 ? "k3" : "k1"; }
  static float round_to(DType t, float v) {
    if (t == DType::f16) return detail::half_to_float(detail::float_to_half(v));
    if (t == DType::bf16) return detail::bf16_to_float(detail::float_to_bf16(v));
    return v;
  }
  Bug bug_;
};

// The sets an emulated run goes through, with the sweep options each needs.
struct HarnessSet {
  Set set;
  SweepOpts opts;
};

std::vector<HarnessSet> harness_sets() {
  SweepOpts exact;
  exact.exact = true;
  SweepOpts poison = exact;
  poison.poisons = {0xFF, 0x7F, 0xA5};
  SweepOpts misaligned = exact;
  misaligned.misalign = true;
  return {{Set::quick_exact, exact},       {Set::quick_gaussian, SweepOpts{}}, {Set::epilogue_exact, exact},
          {Set::epilogue_gaussian, SweepOpts{}}, {Set::poison, poison},          {Set::misaligned, misaligned},
          {Set::tf32_rounding, exact}};
}

// Failures of `a` over the given sets and configurations, collected quietly.
Tally harness_run(const Algorithm& a, const std::vector<HarnessSet>& sets, const std::vector<int>& configs) {
  Tally t;
  t.quiet = true;
  for (int ci : configs)
    for (const HarnessSet& hs : sets) sweep(a, cases(hs.set, ci), hs.opts, t);
  return t;
}
}  // namespace

TEST(TensorCoreHarness, SweepsPassAnEmulatedKernelInEveryVariant) {
  // The GPU sweeps' machinery (device buffers, variants and their workspaces, in-place residual, poison,
  // misaligned views, exact and bounded verdicts), run here on a CPU emulation of a correct tensor-core
  // kernel: nothing may fail, in any configuration or variant.
  const EmulatedTc good;
  const Tally t = harness_run(good, harness_sets(), {0, 1, 2});
  for (size_t i = 0; i < t.messages.size() && i < 5; ++i) ADD_FAILURE() << t.messages[i];
  EXPECT_EQ(t.failed, 0);
  EXPECT_GT(t.runs, 300);
  EXPECT_EQ(t.rejected, 0);
  std::printf("  emulated kernel: %d problems, %d runs, all passed\n", t.problems, t.runs);
}

TEST(TensorCoreHarness, SweepsCatchEveryEmulatedKernelBug) {
  // Each classic mistake, injected into the emulation, fails the sweep that targets it.
  struct Expect {
    EmulatedTc::Bug bug;
    const char* what;
    std::vector<HarnessSet> sets;
    std::vector<int> configs;
  };
  SweepOpts exact;
  exact.exact = true;
  SweepOpts poison = exact;
  poison.poisons = {0xFF, 0x7F, 0xA5};
  SweepOpts misaligned = exact;
  misaligned.misalign = true;
  const std::vector<Expect> expects = {
      {EmulatedTc::skip_last, "an unwritten last element", {{Set::poison, poison}}, {0, 1, 2}},
      {EmulatedTc::accumulate_into_dst, "accumulating into dst", {{Set::poison, poison}}, {1}},
      {EmulatedTc::residual_after_write, "reading an in-place residual after the store", {{Set::epilogue_exact, exact}}, {0}},
      {EmulatedTc::truncate_tf32, "truncating tf32 operands", {{Set::tf32_rounding, exact}}, {2}},
      {EmulatedTc::needs_alignment, "assuming 16-byte aligned tensors", {{Set::misaligned, misaligned}}, {0, 2}},
  };
  for (const Expect& x : expects) {
    const EmulatedTc bad(x.bug);
    const Tally t = harness_run(bad, x.sets, x.configs);
    EXPECT_GT(t.failed, 0) << "the sweep missed " << x.what;
    std::printf("  %s: %d of %d runs failed%s%s\n", x.what, t.failed, t.runs, t.messages.empty() ? "" : "; e.g. ",
                t.messages.empty() ? "" : t.messages[0].substr(0, 160).c_str());
  }
  // Split-K partials rounded to bf16 before they are added: only visible once the partials need more
  // than 8 significant bits (positive integers over a long reduction).
  const EmulatedTc bad(EmulatedTc::round_partials);
  std::deque<TcCase> set;
  set.push_back(make_tc_case("positive ints, split-K", Conv2dProblem::parse("n1c256h4w4k24r3s3p1"), kConfigs[1].cfg,
                             EpilogueSpec{}, 31, Data::positive_ints));
  Tally t;
  t.quiet = true;
  sweep(bad, set, exact, t);
  EXPECT_GT(t.failed, 0) << "the sweep missed split-K partials rounded to bf16";
  Tally ok;
  ok.quiet = true;
  sweep(EmulatedTc(), set, exact, ok);
  EXPECT_EQ(ok.failed, 0) << (ok.messages.empty() ? "" : ok.messages[0]);
}
