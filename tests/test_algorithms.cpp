// The correctness sweep, run for every registered algorithm and every peer (a new kernel is tested the
// moment it is registered):
//   a hand-checked case written out below; the DESIGN.md edge set x both layouts; a seeded random sweep
//   vs cpu_ref (rel L2 within the path's bound); a small-integer sweep where every element must be
//   bit-equal to cpu_ref; poisoned outputs; f16/bf16 through the reference and on a random sweep; tf32 where
//   accepted; a rejection reason for every "no"; and one GPU test past 2^31 elements.
// Every failure prints the problem string, the config, the epilogue, the seed and the algorithm.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "test_util.hpp"

namespace convkit {
// Test parameters print as the algorithm's name.
inline void PrintTo(const Algorithm* a, std::ostream* os) { *os << (a ? a->name() : "null"); }
}  // namespace convkit

using namespace convkit;
using ckt::Case;
using ckt::EpilogueSpec;
using ckt::Fill;
using ckt::HostTensor;

namespace {

// ---- case sets ----------------------------------------------------------------------------------

// Logical values (row-major over dims) placed at their memory offsets for `layout`.
std::vector<double> logical_to_memory(const std::vector<double>& logical, std::array<int64_t, 4> dims,
                                      Layout layout) {
  TensorView v{nullptr, DType::f32, layout, Device::cpu, dims};
  std::vector<double> mem(logical.size());
  size_t i = 0;
  for (int64_t a = 0; a < dims[0]; ++a)
    for (int64_t b = 0; b < dims[1]; ++b)
      for (int64_t c = 0; c < dims[2]; ++c)
        for (int64_t d = 0; d < dims[3]; ++d) mem[size_t(v.offset(a, b, c, d))] = logical[i++];
  return mem;
}

// The DESIGN.md edge set, lenient to rigorous. Each is a few hundred kFLOP to a few MFLOP.
const std::vector<std::pair<std::string, std::string>>& edge_set() {
  static const std::vector<std::pair<std::string, std::string>> v = {
      {"odd C, K, H, W", "n1c5h11w13k7r3s3p1"},
      {"C and K past a 64 tile", "n1c67h7w9k65r3s3p1"},
      {"C and K past a 32 tile, P*Q odd", "n2c33h5w7k35r3s3p1"},
      {"1x1", "n2c16h15w15k24r1s1"},
      {"1x1 stride 2", "n1c8h13w13k16r1s1u2"},
      {"7x7", "n1c4h17w17k8r7s7p3"},
      {"stride 2", "n2c8h16w16k8r3s3p1u2"},
      {"stride 2, odd input", "n1c6h15w13k10r3s3p1u2"},
      {"dilation 2", "n1c8h14w14k8r3s3p2d2"},
      {"padding larger than R/2", "n1c4h8w8k6r3s3p3"},
      {"input smaller than the filter, padded", "n1c2h2w3k3r5s5p2"},
      {"groups", "n2c8h10w10k12r3s3p1g4"},
      {"grouped, one channel per group, multiplier 2", "n1c8h9w9k16r3s3p1g8"},
      {"depthwise 3x3", "n2c16h12w12k16r3s3p1g16"},
      {"depthwise 5x5 stride 2", "n1c24h11w11k24r5s5p2u2g24"},
      {"batch 1, C=3 stem", "n1c3h32w32k16r7s7p3u2"},
      {"C=3, 3x3", "n2c3h17w17k8r3s3p1"},
      {"batch 4", "n4c8h6w6k8r3s3p1"},
      {"asymmetric pads and strides", "n1c6h11w9k4r3s5ph1pw2uh2uw1"},
      {"asymmetric dilation and stride", "n1c8h20w20k8r3s3p1uh2uw3dh2dw3"},
      {"1x7 and 7x1", "n1c8h12w12k8r1s7ph0pw3"},
      {"7x1", "n1c8h12w12k8r7s1ph3pw0"},
      {"dilation 2 stride 2", "n1c4h19w19k4r3s3p2u2d2"},
      {"single channel in and out", "n3c1h5w7k1r3s1"},
      {"1x1 output", "n2c8h3w3k4r3s3"},
      {"no padding, 2x2 filter", "n1c4h9w8k4r2s2"},
  };
  return v;
}

ConvConfig f32(Layout l) { return ConvConfig{DType::f32, l, Device::cpu, MathMode::strict}; }

// A random valid problem: strides 1-3, pads 0-3 (often > R/2), dilations 1-3, groups incl. depthwise,
// R,S in 1..7, at most `max_macs` multiply-adds.
Conv2dProblem random_problem(std::mt19937& rng, int64_t max_macs) {
  auto u = [&](int lo, int hi) { return int64_t(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  for (;;) {
    Conv2dProblem p;
    const int64_t kind = u(0, 9);
    if (kind <= 5) {  // dense; some wide in C and K to cross the GPU kernels' channel tiles
      p.groups = 1;
      const bool wide = u(0, 4) == 0;
      p.c = wide ? u(33, 96) : u(1, 3) == 1 ? u(1, 4) : u(1, 40);
      p.k = wide ? u(33, 96) : u(1, 3) == 1 ? u(1, 4) : u(1, 40);
    } else if (kind <= 7) {  // grouped
      p.groups = u(2, 4);
      p.c = p.groups * u(1, 6);
      p.k = p.groups * u(1, 6);
    } else {  // depthwise (sometimes with a channel multiplier)
      p.groups = u(2, 24);
      p.c = p.groups;
      p.k = p.groups * (u(0, 3) == 0 ? 2 : 1);
    }
    const int64_t shape = u(0, 9);
    if (shape <= 2) p.r = p.s = 3;
    else if (shape == 3) p.r = p.s = 1;
    else {
      p.r = u(1, 7);
      p.s = u(1, 7);
    }
    p.stride_h = u(0, 2) == 0 ? u(1, 3) : 1;
    p.stride_w = u(0, 3) == 0 ? u(1, 3) : p.stride_h;
    p.dilation_h = u(0, 3) == 0 ? u(1, 3) : 1;
    p.dilation_w = u(0, 3) == 0 ? u(1, 3) : p.dilation_h;
    p.pad_h = u(0, 3);
    p.pad_w = u(0, 3) == 0 ? u(0, 3) : p.pad_h;
    const int64_t eff_r = p.dilation_h * (p.r - 1) + 1, eff_s = p.dilation_w * (p.s - 1) + 1;
    const int64_t min_h = std::max<int64_t>(1, eff_r - 2 * p.pad_h), min_w = std::max<int64_t>(1, eff_s - 2 * p.pad_w);
    p.h = min_h + u(0, 16);
    p.w = min_w + u(0, 16);
    p.n = u(1, 3);
    if (!p.validate().ok()) continue;
    const double macs = p.flops() / 2;
    if (macs <= double(max_macs) && macs >= 1) return p;
  }
}

EpilogueSpec random_epilogue(std::mt19937& rng, bool exact) {
  auto u = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  EpilogueSpec e;
  e.bias = u(0, 1) == 1;
  e.residual = u(0, 99) < 35;
  e.residual_aliases_dst = e.residual && u(0, 1) == 1;
  if (exact) {
    const Activation exact_acts[] = {Activation::none, Activation::relu, Activation::relu6};
    e.activation = exact_acts[u(0, 2)];
    if (u(0, 5) == 0) {  // still exact: powers of two and small integers
      e.alpha = 2.0f;
      e.beta = -1.0f;
    }
  } else {
    e.activation = static_cast<Activation>(u(0, 7));  // every activation, the gates (sigmoid, hardsigmoid) included
    if (u(0, 3) == 0) {
      const float alphas[] = {0.5f, -1.25f, 2.0f, 0.0f};
      const float betas[] = {0.5f, 0.0f, -2.0f, 1.5f};
      e.alpha = alphas[u(0, 3)];
      e.beta = betas[u(0, 3)];
    }
  }
  return e;
}

constexpr int kRandomCases = 240;
constexpr int kExactCases = 160;
constexpr int64_t kMaxMacs = 1000000;  // 2 MFLOP: cpu_ref stays fast, also under AddressSanitizer

const std::vector<Case>& random_cases() {
  static const std::vector<Case> v = [] {
    std::vector<Case> out;
    for (int i = 0; i < kRandomCases; ++i) {
      const uint32_t seed = 1000u + uint32_t(i);
      std::mt19937 rng(seed);
      const Conv2dProblem p = random_problem(rng, kMaxMacs);
      const Layout l = (i % 2) ? Layout::nhwc : Layout::nchw;
      out.push_back(ckt::make_case(p, f32(l), random_epilogue(rng, false), seed, Fill::gaussian));
    }
    return out;
  }();
  return v;
}

const std::vector<Case>& exact_cases() {
  static const std::vector<Case> v = [] {
    std::vector<Case> out;
    for (int i = 0; i < kExactCases; ++i) {
      const uint32_t seed = 5000u + uint32_t(i);
      std::mt19937 rng(seed);
      const Conv2dProblem p = random_problem(rng, kMaxMacs);
      const Layout l = (i % 2) ? Layout::nhwc : Layout::nchw;
      out.push_back(ckt::make_case(p, f32(l), random_epilogue(rng, true), seed, Fill::small_ints));
    }
    return out;
  }();
  return v;
}

const std::vector<Case>& edge_cases() {
  static const std::vector<Case> v = [] {
    std::vector<Case> out;
    uint32_t seed = 9000;
    for (const auto& [what, spec] : edge_set())
      for (Layout l : {Layout::nchw, Layout::nhwc}) {
        const Conv2dProblem p = Conv2dProblem::parse(spec);
        EpilogueSpec bias;
        bias.bias = true;
        out.push_back(ckt::make_case(p, f32(l), bias, seed++, Fill::gaussian));
        out.push_back(ckt::make_case(p, f32(l), {}, seed++, Fill::small_ints));
      }
    return out;
  }();
  return v;
}

// cpu_ref's output for a case (memory order), computed once per process and case.
const std::vector<double>& cached_reference(const Case& c) {
  static std::mutex mu;
  static std::map<const Case*, std::vector<double>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(&c);
  if (it == cache.end()) it = cache.emplace(&c, ckt::reference(c).memory_order()).first;
  return it->second;
}

// The independent test-side oracle for a case, in memory order.
std::vector<double> independent_reference(const Case& c) {
  return logical_to_memory(ckt::independent_reference_logical(c), output_dims(c.problem), c.config.layout);
}

// ---- running a set of cases ---------------------------------------------------------------------

struct Tally {
  int run = 0, rejected = 0, failed = 0;
  std::string first_reason;
};

// Checks a "no" from can_implement: a non-empty one-line sentence.
void expect_good_reason(const Algorithm& a, const Support& s, const std::string& what) {
  EXPECT_FALSE(s.reason.empty()) << a.name() << " rejected " << what << " without a reason";
  EXPECT_EQ(s.reason.find('\n'), std::string::npos) << a.name() << " on " << what << ": one line: " << s.reason;
  if (!s.reason.empty()) {
    EXPECT_EQ(s.reason.back(), '.') << a.name() << " on " << what << ": one sentence ending in '.': " << s.reason;
  }
}

// Runs one case; reports through gtest. `exact` asks for bit-equality with the reference.
void run_one(const Algorithm& a, const Case& c, bool exact, Tally* t, bool prepare = false) {
  ConvConfig cfg = c.config;
  cfg.device = a.device();
  const Support s = a.can_implement(c.problem, cfg);
  if (!s) {
    expect_good_reason(a, s, c.describe());
    if (t->first_reason.empty()) t->first_reason = c.problem.to_string() + " " + cfg.to_string() + ": " + s.reason;
    ++t->rejected;
    return;
  }
  ++t->run;
  // CONVKIT_TEST_VERBOSE=1 names each case before it runs (to find the one that crashes).
  static const bool verbose = ckt::env_str("CONVKIT_TEST_VERBOSE") == "1";
  if (verbose) std::fprintf(stderr, "  running %s on %s\n", a.name().c_str(), c.describe().c_str());
  HostTensor out;
  try {
    ckt::RunOpts o;
    o.prepare = prepare;
    out = ckt::run_case(a, c, o);
  } catch (const std::exception& e) {
    ++t->failed;
    ADD_FAILURE() << a.name() << " threw on " << c.describe() << ": " << e.what();
    return;
  }
  const bool self = a.name() == "cpu_ref";
  const std::vector<double> ref = self ? independent_reference(c) : cached_reference(c);
  const auto v = ckt::check_output(a, c, out, ref, ckt::rel_l2_bound(a, cfg), exact);
  if (!v.ok) {
    ++t->failed;
    ADD_FAILURE() << v.message;
  }
}

void report(const Algorithm& a, const char* what, const Tally& t) {
  std::printf("  %s %s: %d cases run, %d rejected, %d failed%s%s\n", a.name().c_str(), what, t.run, t.rejected,
              t.failed, t.first_reason.empty() ? "" : "; e.g. ", t.first_reason.c_str());
}

class AlgoTest : public ::testing::TestWithParam<const Algorithm*> {
 protected:
  const Algorithm& algo() const { return *GetParam(); }
};

std::string param_name(const ::testing::TestParamInfo<const Algorithm*>& info) { return info.param->name(); }

}  // namespace

INSTANTIATE_TEST_SUITE_P(Registry, AlgoTest, ::testing::ValuesIn(ckt::algorithms_and_peers()), param_name);

// ---- a) the hand-checked case -------------------------------------------------------------------
//
// N=1, C=2, 4x4 input, 3x3 filters, pad 1, stride 1 (cross-correlation, as every DL framework):
//   x channel 0 = 1..16 row by row          x channel 1 = checkerboard +1/-1, +1 at (0,0)
//   filter 0: channel 0 = Laplacian [0 1 0; 1 -4 1; 0 1 0], channel 1 = 1 at (0,0) and 2 at (2,2)
//   filter 1: channel 0 = all ones (3x3 box sum),           channel 1 = -1 at the centre
// Worked out by hand (the Laplacian of a linear ramp is 0 inside, so only the border rows/columns are
// non-zero; the channel-1 taps of filter 0 pick (p-1,q-1) and (p+1,q+1), which share the parity of (p,q)).

namespace {
const std::vector<double> kHandX = {
    1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,   // channel 0
    1,  -1, 1,  -1, -1, 1,  -1, 1,  1,  -1, 1,  -1, -1, 1,  -1, 1};  // channel 1
const std::vector<double> kHandW = {
    0, 1, 0, 1, -4, 1, 0, 1, 0,   1, 0, 0, 0, 0, 0, 0, 0, 2,    // filter 0: channel 0, channel 1
    1, 1, 1, 1, 1, 1, 1, 1, 1,    0, 0, 0, 0, -1, 0, 0, 0, 0};  // filter 1: channel 0, channel 1
// Filter 0 = Laplacian part + diagonal part:
//    3   2   1  -5      2 -2  2  0       5   0   3  -5
//   -4   0   0  -9  +  -2  3 -3  1  =   -6   3  -3  -8
//   -8   0   0 -13      2 -3  3 -1      -6  -3   3 -14
//  -29 -18 -19 -37      0  1 -1  1     -29 -17 -20 -36
const std::vector<double> kHandY0 = {5, 0, 3, -5, -6, 3, -3, -8, -6, -3, 3, -14, -29, -17, -20, -36};
// Filter 1 = box sums of the ramp (9x the centre inside) minus the checkerboard:
//   14 24 30 22      13 25 29 23
//   33 54 63 45  ->  34 53 64 44
//   57 90 99 69      56 91 98 70
//   46 72 78 54      47 71 79 53
const std::vector<double> kHandY1 = {13, 25, 29, 23, 34, 53, 64, 44, 56, 91, 98, 70, 47, 71, 79, 53};
// With bias {10, -30} and relu:
const std::vector<double> kHandY0BiasRelu = {15, 10, 13, 5, 4, 13, 7, 2, 4, 7, 13, 0, 0, 0, 0, 0};
const std::vector<double> kHandY1BiasRelu = {0, 0, 0, 0, 4, 23, 34, 14, 26, 61, 68, 40, 17, 41, 49, 23};
// Stride 2 (pad 1) keeps the outputs centred on input rows/cols 0 and 2 of filter 0:
const std::vector<double> kHandY0Stride2 = {5, 3, -6, 3};

Case hand_case(int k, Layout l, bool bias_relu, int stride = 1) {
  Conv2dProblem p = Conv2dProblem::parse("n1c2h4w4k1r3s3p1");
  p.k = k;
  p.stride_h = p.stride_w = stride;
  EpilogueSpec e;
  if (bias_relu) {
    e.bias = true;
    e.activation = Activation::relu;
  }
  Case c = ckt::make_case(p, f32(l), e, 0, Fill::small_ints);
  c.src.fill_logical(kHandX);
  c.wei.fill_logical(std::vector<double>(kHandW.begin(), kHandW.begin() + 18 * k));
  if (bias_relu) {
    const double b[2] = {10, -30};
    for (int i = 0; i < k; ++i) detail::store_from_double(c.bias.data(), DType::f32, i, b[i]);
  }
  return c;
}

void check_hand(const Algorithm& a, const Case& c, const std::vector<double>& want_logical) {
  ConvConfig cfg = c.config;
  cfg.device = a.device();
  const Support s = a.can_implement(c.problem, cfg);
  if (!s) {
    expect_good_reason(a, s, c.describe());
    std::printf("  %s rejects the hand case %s: %s\n", a.name().c_str(), c.describe().c_str(), s.reason.c_str());
    return;
  }
  const HostTensor out = ckt::run_case(a, c);
  const std::vector<double> got = out.logical();
  ASSERT_EQ(got.size(), want_logical.size());
  if (ckt::held_to_exactness(a)) {
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], want_logical[i]) << a.name() << " on " << c.describe() << " at logical index " << i;
  } else {
    const auto v = ckt::check_output(a, c, out, logical_to_memory(want_logical, output_dims(c.problem), c.config.layout),
                                     ckt::rel_l2_bound(a, cfg), false);
    EXPECT_TRUE(v.ok) << v.message;
  }
}

std::vector<double> concat(std::vector<double> a, const std::vector<double>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
}  // namespace

TEST(HandChecked, ReferenceAndIndependentLoopAgreeWithTheWrittenValues) {
  for (Layout l : {Layout::nchw, Layout::nhwc}) {
    const Case c1 = hand_case(1, l, false), c2 = hand_case(2, l, false), c3 = hand_case(2, l, true),
               c4 = hand_case(1, l, false, 2);
    EXPECT_EQ(ckt::independent_reference_logical(c1), kHandY0);
    EXPECT_EQ(ckt::independent_reference_logical(c2), concat(kHandY0, kHandY1));
    EXPECT_EQ(ckt::independent_reference_logical(c3), concat(kHandY0BiasRelu, kHandY1BiasRelu));
    EXPECT_EQ(ckt::independent_reference_logical(c4), kHandY0Stride2);
    EXPECT_EQ(ckt::reference(c1).logical(), kHandY0) << to_string(l);
    EXPECT_EQ(ckt::reference(c2).logical(), concat(kHandY0, kHandY1)) << to_string(l);
    EXPECT_EQ(ckt::reference(c3).logical(), concat(kHandY0BiasRelu, kHandY1BiasRelu)) << to_string(l);
    EXPECT_EQ(ckt::reference(c4).logical(), kHandY0Stride2) << to_string(l);
  }
}

TEST_P(AlgoTest, HandCheckedK1) {
  CKT_REQUIRE_USABLE(algo());
  for (Layout l : {Layout::nchw, Layout::nhwc}) check_hand(algo(), hand_case(1, l, false), kHandY0);
}

TEST_P(AlgoTest, HandCheckedK2) {
  CKT_REQUIRE_USABLE(algo());
  for (Layout l : {Layout::nchw, Layout::nhwc}) check_hand(algo(), hand_case(2, l, false), concat(kHandY0, kHandY1));
}

TEST_P(AlgoTest, HandCheckedK2BiasRelu) {
  CKT_REQUIRE_USABLE(algo());
  for (Layout l : {Layout::nchw, Layout::nhwc})
    check_hand(algo(), hand_case(2, l, true), concat(kHandY0BiasRelu, kHandY1BiasRelu));
}

TEST_P(AlgoTest, HandCheckedStride2) {
  CKT_REQUIRE_USABLE(algo());
  for (Layout l : {Layout::nchw, Layout::nhwc}) check_hand(algo(), hand_case(1, l, false, 2), kHandY0Stride2);
}

// ---- b) the edge set ----------------------------------------------------------------------------

TEST_P(AlgoTest, EdgeSetBothLayouts) {
  CKT_REQUIRE_USABLE(algo());
  Tally t;
  for (const Case& c : edge_cases()) run_one(algo(), c, c.fill == Fill::small_ints && ckt::held_to_exactness(algo()), &t);
  report(algo(), "edge set", t);
  if (t.run == 0) GTEST_SKIP() << algo().name() << " accepts none of the edge set; e.g. " << t.first_reason;
}

// ---- c) the randomized sweep --------------------------------------------------------------------

TEST_P(AlgoTest, RandomSweepWithinF32Bound) {
  CKT_REQUIRE_USABLE(algo());
  Tally t;
  int i = 0;
  for (const Case& c : random_cases()) run_one(algo(), c, false, &t, (i++ % 2) == 1);
  report(algo(), "random sweep", t);
  if (t.run == 0) GTEST_SKIP() << algo().name() << " accepts none of the random sweep; e.g. " << t.first_reason;
}

// ---- d) exactness on small integers -------------------------------------------------------------

TEST_P(AlgoTest, SmallIntegersBitEqualToReference) {
  CKT_REQUIRE_USABLE(algo());
  const bool exact = ckt::held_to_exactness(algo());
  std::printf("  %s is %sheld to bit-exactness\n", algo().name().c_str(), exact ? "" : "NOT ");
  Tally t;
  for (const Case& c : exact_cases()) run_one(algo(), c, exact, &t);
  report(algo(), "small-integer sweep", t);
  if (t.run == 0) GTEST_SKIP() << algo().name() << " accepts none of the small-integer sweep; e.g. " << t.first_reason;
}

// ---- e) poison ----------------------------------------------------------------------------------

TEST_P(AlgoTest, EveryOutputWrittenWhateverItHeldBefore) {
  // The output starts as NaN (0xFF), as a huge finite value (0x7F7F7F7F = 3.4e38) and as zeros: a kernel
  // that skips elements or accumulates into dst instead of overwriting it fails one of them.
  CKT_REQUIRE_USABLE(algo());
  int run = 0;
  for (size_t i = 0; i < edge_cases().size(); i += 6) {
    const Case& c = edge_cases()[i];
    ConvConfig cfg = c.config;
    cfg.device = algo().device();
    if (!algo().can_implement(c.problem, cfg)) continue;
    ++run;
    for (unsigned char poison : {0xFF, 0x7F, 0x00}) {
      ckt::RunOpts o;
      o.poison = poison;
      const HostTensor out = ckt::run_case(algo(), c, o);
      const auto v = ckt::check_output(algo(), c, out, cached_reference(c), ckt::rel_l2_bound(algo(), cfg), false);
      EXPECT_TRUE(v.ok) << "poison 0x" << std::hex << int(poison) << std::dec << ": " << v.message;
    }
  }
  if (run == 0) GTEST_SKIP() << "accepts none of the cases";
}

TEST(Poison, TheCheckCatchesUnwrittenAndMostlyZeroOutputs) {
  // The checker itself: a copy of the reference with one NaN, and an output of zeros, must both fail.
  const Case& c = edge_cases()[0];
  const auto& ref = cached_reference(c);
  HostTensor out = ckt::reference(c);
  EXPECT_TRUE(ckt::check_output(ckt::cpu_ref(), c, out, ref, 1e-5, true).ok);
  float nan;
  std::memset(&nan, 0xFF, 4);
  std::memcpy(out.bytes.data() + 4 * 7, &nan, 4);
  const auto v = ckt::check_output(ckt::cpu_ref(), c, out, ref, 1e-5, false);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.message.find("NaN"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find(c.problem.to_string()), std::string::npos) << v.message;
  std::fill(out.bytes.begin(), out.bytes.end(), 0);
  const auto z = ckt::check_output(ckt::cpu_ref(), c, out, ref, 1.5, false);
  EXPECT_FALSE(z.ok);
  EXPECT_NE(z.message.find("zeros"), std::string::npos) << z.message;
}

// ---- f) f16 and bf16 ----------------------------------------------------------------------------

namespace {
const char* kHalfProblems[] = {"n1c2h6w5k3r3s3p1", "n2c2h5w7k2r3s2ph1pw0uh2", "n1c4h5w5k4r3s3p1g2",
                               "n1c3h6w6k3r3s3p1g3", "n2c2h4w4k2r1s1"};
}

TEST_P(AlgoTest, HalfAndBfloat16SmallIntegers) {
  // Small integers whose every partial sum fits the 11/8-bit significands: the reference must be exact
  // against the test's own double loop; other algorithms either run within the f16/bf16 bound or say why not.
  CKT_REQUIRE_USABLE(algo());
  Tally t;
  uint32_t seed = 7000;
  for (DType dt : {DType::f16, DType::bf16})
    for (Layout l : {Layout::nchw, Layout::nhwc})
      for (const char* spec : kHalfProblems)
        for (int epi = 0; epi < 2; ++epi) {
          EpilogueSpec e;
          if (epi) {
            e.bias = true;
            e.activation = Activation::relu;
          }
          const Case c = ckt::make_case(Conv2dProblem::parse(spec), ConvConfig{dt, l, Device::cpu, MathMode::strict}, e,
                                        seed++, Fill::small_ints);
          ConvConfig cfg = c.config;
          cfg.device = algo().device();
          const Support s = algo().can_implement(c.problem, cfg);
          if (!s) {
            expect_good_reason(algo(), s, c.describe());
            if (t.first_reason.empty()) t.first_reason = std::string(to_string(dt)) + ": " + s.reason;
            ++t.rejected;
            continue;
          }
          ++t.run;
          const HostTensor out = ckt::run_case(algo(), c);
          const std::vector<double> want = independent_reference(c);
          const bool exact = algo().name() == "cpu_ref" || algo().name() == "cuda_ref";
          const auto v = ckt::check_output(algo(), c, out, want, ckt::rel_l2_bound(algo(), cfg), exact);
          EXPECT_TRUE(v.ok) << v.message;
        }
  report(algo(), "f16/bf16", t);
  if (algo().name() == "cpu_ref") {
    EXPECT_EQ(t.rejected, 0) << "the reference handles every dtype";
  }
  if (t.run == 0) GTEST_SKIP() << algo().name() << " supports neither f16 nor bf16; e.g. " << t.first_reason;
}

TEST_P(AlgoTest, HalfAndBfloat16RandomSweep) {
  // Every fourth case of the random sweep (any shape, stride, dilation, groups; every epilogue, the in-place
  // residual included) in f16 and bf16 with Gaussian data: within the 16-bit bound of the independent reference.
  // (convkit's own algorithms; the peers are measured against, and their engines' 16-bit math is theirs.)
  CKT_REQUIRE_USABLE(algo());
  if (algo().is_peer()) GTEST_SKIP() << algo().name() << " is a peer";
  Tally t;
  for (size_t i = 0; i < random_cases().size(); i += 4)
    for (DType dt : {DType::f16, DType::bf16}) {
      const Case& rc = random_cases()[i];
      const Case c = ckt::make_case(rc.problem, ConvConfig{dt, rc.config.layout, Device::cpu, MathMode::strict}, rc.epi,
                                    uint32_t(9000 + i), Fill::gaussian);
      ConvConfig cfg = c.config;
      cfg.device = algo().device();
      if (!algo().can_implement(c.problem, cfg)) {
        ++t.rejected;
        continue;
      }
      ++t.run;
      const HostTensor out = ckt::run_case(algo(), c);
      const auto v = ckt::check_output(algo(), c, out, independent_reference(c), ckt::rel_l2_bound(algo(), cfg), false);
      EXPECT_TRUE(v.ok) << v.message;
    }
  report(algo(), "f16/bf16 random", t);
  if (t.run == 0) GTEST_SKIP() << algo().name() << " runs no f16/bf16 case of the sweep";
}

// ---- tf32 (an explicit mode, never the default) -------------------------------------------------

TEST_P(AlgoTest, Tf32WithinItsBoundWhereAccepted) {
  CKT_REQUIRE_USABLE(algo());
  Tally t;
  for (size_t i = 0; i < edge_cases().size(); i += 2) {  // the Gaussian half of the edge set
    Case c = edge_cases()[i];
    c.config.math = MathMode::tf32;
    ConvConfig cfg = c.config;
    cfg.device = algo().device();
    const Support s = algo().can_implement(c.problem, cfg);
    if (!s) {
      expect_good_reason(algo(), s, c.describe());
      if (t.first_reason.empty()) t.first_reason = s.reason;
      ++t.rejected;
      continue;
    }
    ++t.run;
    const HostTensor out = ckt::run_case(algo(), c);
    const auto v = ckt::check_output(algo(), c, out, cached_reference(edge_cases()[i]), ckt::rel_l2_bound(algo(), cfg),
                                     false);
    EXPECT_TRUE(v.ok) << v.message;
  }
  report(algo(), "tf32", t);
  if (t.run == 0) GTEST_SKIP() << algo().name() << " has no tf32 mode: " << t.first_reason;
}

// ---- g) every rejection has a reason ------------------------------------------------------------

TEST_P(AlgoTest, EveryRejectionGivesOneSentence) {
  CKT_REQUIRE_USABLE(algo());
  int yes = 0, no = 0;
  for (const auto& [what, spec] : edge_set())
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (Layout l : {Layout::nchw, Layout::nhwc})
        for (MathMode m : {MathMode::strict, MathMode::tf32}) {
          if (m == MathMode::tf32 && dt != DType::f32) continue;
          const Conv2dProblem p = Conv2dProblem::parse(spec);
          const ConvConfig cfg{dt, l, algo().device(), m};
          const Support s = algo().can_implement(p, cfg);
          if (s) {
            ++yes;
            continue;
          }
          ++no;
          expect_good_reason(algo(), s, p.to_string() + " " + cfg.to_string() + " (" + what + ")");
        }
  std::printf("  %s: accepts %d, rejects %d (problem, config) pairs of the edge set\n", algo().name().c_str(), yes, no);
}

// ---- the harness catches broken algorithms ------------------------------------------------------

namespace {
// cpu_ref with one deliberate bug, to prove the checks above would notice it.
class Broken final : public Algorithm {
 public:
  enum Bug { skip_last, zeros, one_ulp, accumulate_into_dst, residual_read_after_write };
  explicit Broken(Bug b) : bug_(b) {}
  std::string name() const override { return "broken"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override { return "cpu_ref with a bug"; }
  Support can_implement(const Conv2dProblem&, const ConvConfig&) const override { return Support::yes(); }
  void run(const ConvCall& call) const override {
    const size_t n = size_t(call.dst.numel());
    std::vector<float> tmp(n);
    ConvCall c = call;
    c.dst.data = tmp.data();
    if (bug_ == residual_read_after_write && call.epilogue.residual == call.dst.data) c.epilogue.residual = nullptr;
    ckt::cpu_ref().run(c);
    float* y = static_cast<float*>(call.dst.data);
    switch (bug_) {
      case skip_last: std::copy(tmp.begin(), tmp.end() - 1, y); break;
      case zeros: std::fill(y, y + n, 0.0f); break;
      case one_ulp: std::copy(tmp.begin(), tmp.end(), y); y[n / 2] = std::nextafter(y[n / 2], INFINITY); break;
      case accumulate_into_dst: for (size_t i = 0; i < n; ++i) y[i] += tmp[i]; break;
      case residual_read_after_write: std::copy(tmp.begin(), tmp.end(), y); break;
    }
  }

 private:
  Bug bug_;
};

bool caught(const Broken& a, const Case& c, unsigned char poison, bool exact) {
  ckt::RunOpts o;
  o.poison = poison;
  const HostTensor out = ckt::run_case(a, c, o);
  return !ckt::check_output(a, c, out, cached_reference(c), 1e-5, exact).ok;
}
}  // namespace

TEST(Harness, CatchesBrokenAlgorithms) {
  const Case& c = edge_cases()[0];  // Gaussian, bias
  EXPECT_TRUE(caught(Broken(Broken::skip_last), c, 0xFF, false)) << "an unwritten element must be caught";
  EXPECT_TRUE(caught(Broken(Broken::zeros), c, 0xFF, false)) << "an all-zero output must be caught";
  EXPECT_FALSE(caught(Broken(Broken::one_ulp), c, 0xFF, false)) << "one ulp is within the f32 bound ...";
  EXPECT_TRUE(caught(Broken(Broken::one_ulp), exact_cases()[0], 0xFF, true)) << "... but not bit-exact";
  EXPECT_FALSE(caught(Broken(Broken::accumulate_into_dst), c, 0x00, false)) << "zeros hide accumulation ...";
  EXPECT_TRUE(caught(Broken(Broken::accumulate_into_dst), c, 0x7F, false)) << "... a huge poison does not";
  EXPECT_TRUE(caught(Broken(Broken::accumulate_into_dst), c, 0xFF, false)) << "... nor does NaN";
  // The in-place residual: forgetting it must be caught on some aliasing case of the random sweep (under an
  // activation that does not clamp: relu6 or hardsigmoid can give the same output with or without it).
  const auto unclamped = [](Activation a) {
    return a == Activation::none || a == Activation::silu || a == Activation::gelu || a == Activation::sigmoid;
  };
  int aliasing = 0, found = 0;
  for (const Case& rc : random_cases())
    if (rc.epi.residual_aliases_dst && rc.epi.beta != 0.0f && unclamped(rc.epi.activation) && aliasing++ < 5)
      found += caught(Broken(Broken::residual_read_after_write), rc, 0xFF, false);
  EXPECT_GT(aliasing, 0);
  EXPECT_EQ(found, std::min(aliasing, 5));
}

// ---- the oracle itself --------------------------------------------------------------------------

TEST(Oracle, CpuRefMatchesTheIndependentLoopOnTheSweeps) {
  // cpu_ref is what everything else is compared with: check it against the test's own loop, exactly on
  // small integers and to double rounding on Gaussian data (both accumulate in double).
  int n = 0;
  for (size_t i = 0; i < random_cases().size(); i += 4, ++n) {
    const Case& c = random_cases()[i];
    const auto v = ckt::check_output(ckt::cpu_ref(), c, ckt::reference(c), independent_reference(c), 1e-6, false);
    EXPECT_TRUE(v.ok) << v.message;
  }
  for (size_t i = 0; i < exact_cases().size(); i += 4, ++n) {
    const Case& c = exact_cases()[i];
    const auto v = ckt::check_output(ckt::cpu_ref(), c, ckt::reference(c), independent_reference(c), 0, true);
    EXPECT_TRUE(v.ok) << v.message;
  }
  EXPECT_GT(n, 90);
}

TEST(Oracle, SweepCoversWhatItClaims) {
  // The random sweep really contains the features the brief lists (guards against a generator bug).
  int strides3 = 0, pad_gt_half = 0, dil3 = 0, dw = 0, grouped = 0, r7 = 0, bias = 0, res = 0, alias = 0,
      ab = 0, nhwc = 0;
  constexpr int kActivations = int(Activation::hardsigmoid) + 1;  // the enum's last value (checked below)
  int acts[kActivations] = {};
  for (const Case& c : random_cases()) {
    const auto& p = c.problem;
    strides3 += p.stride_h == 3 || p.stride_w == 3;
    pad_gt_half += 2 * p.pad_h > p.r || 2 * p.pad_w > p.s;
    dil3 += p.dilation_h == 3 || p.dilation_w == 3;
    dw += p.is_depthwise();
    grouped += p.groups > 1 && !p.is_depthwise();
    r7 += p.r == 7 || p.s == 7;
    bias += c.epi.bias;
    res += c.epi.residual;
    alias += c.epi.residual_aliases_dst;
    ab += c.epi.alpha != 1.0f || c.epi.beta != 1.0f;
    nhwc += c.config.layout == Layout::nhwc;
    ASSERT_LT(int(c.epi.activation), kActivations) << "an Activation after hardsigmoid: count it here";
    acts[int(c.epi.activation)]++;
  }
  EXPECT_GE(random_cases().size(), 200u);
  for (int v : {strides3, pad_gt_half, dil3, dw, grouped, r7, bias, res, alias, ab, nhwc})
    EXPECT_GE(v, 5);
  for (int a = 0; a < kActivations; ++a) EXPECT_GE(acts[a], 5) << "activation " << to_string(Activation(a));
  double macs = 0;
  for (const Case& c : random_cases()) macs += c.problem.flops() / 2;
  std::printf("  %zu random cases, %.1f M multiply-adds in all\n", random_cases().size(), macs / 1e6);
}

// ---- h) past 2^31 elements on the GPU -----------------------------------------------------------

namespace {
// A cheap deterministic small-integer pattern by linear index (so the host never needs a second copy).
inline float pattern(uint64_t i, uint64_t salt) {
  const uint64_t h = (i + salt) * 0x9E3779B97F4A7C15ull;
  return float(int((h >> 40) % 7) - 3);
}

template <typename F>
void parallel_for(int64_t n, F&& fn) {
  const int threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
      fn(lo, hi);
    });
  for (auto& th : pool) th.join();
}
}  // namespace

TEST(LargeTensor, CudaAlgorithmsPast2e31Elements) {
  // N*C*H*W = 2*2*23171*23171 = 2,147,580,964 > 2^31, and the output (K=2) as well: 8.6 GB per tensor in
  // f32. Inputs and weights are small integers, so every output is exact; checked at sampled points
  // against a double sum on the host, and the whole output for leftover poison.
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device (this test never fails for that)";
  std::vector<const Algorithm*> cuda;
  for (const Algorithm* a : algorithms())
    if (a->device() == Device::cuda && a->available() && ckt::plain(*a)) cuda.push_back(a);
  if (cuda.empty()) GTEST_SKIP() << "no available CUDA algorithm";
  const Conv2dProblem p = Conv2dProblem::parse("n2c2h23171w23171k2r3s3p1");
  ASSERT_GT(p.input_elems(), int64_t(1) << 31);
  ASSERT_GT(p.output_elems(), int64_t(1) << 31);
  const auto t0 = std::chrono::steady_clock::now();

  Buffer src, dst, wei, bias;
  try {
    src = Buffer(Device::cuda, size_t(p.input_elems()) * 4);
    dst = Buffer(Device::cuda, size_t(p.output_elems()) * 4);
  } catch (const Error& e) {
    GTEST_SKIP() << "not enough free device memory for two 8.6 GB tensors: " << e.what();
  }
  std::vector<float> host(size_t(std::max(p.input_elems(), p.output_elems())));
  parallel_for(p.input_elems(), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) host[size_t(i)] = pattern(uint64_t(i), 1);
  });
  src.copy_from_host(host.data(), size_t(p.input_elems()) * 4);
  std::vector<float> w(size_t(p.weight_elems())), b = {3.0f, -2.0f};
  for (size_t i = 0; i < w.size(); ++i) w[i] = pattern(i, 2);
  wei = Buffer(Device::cuda, w.size() * 4);
  wei.copy_from_host(w.data(), w.size() * 4);
  bias = Buffer(Device::cuda, 8);
  bias.copy_from_host(b.data(), 8);

  // Sample points: the corners of every (n, k) plane, the very last elements, and random ones.
  std::vector<std::array<int64_t, 4>> points;
  const int64_t P = p.p(), Q = p.q();
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t k = 0; k < p.k; ++k)
      for (int64_t pp : {int64_t(0), P / 2, P - 1})
        for (int64_t qq : {int64_t(0), Q / 2, Q - 1}) points.push_back({n, k, pp, qq});
  std::mt19937_64 rng(42);
  for (int i = 0; i < 2000; ++i)
    points.push_back({int64_t(rng() % uint64_t(p.n)), int64_t(rng() % uint64_t(p.k)), int64_t(rng() % uint64_t(P)),
                      int64_t(rng() % uint64_t(Q))});

  int ran = 0;
  for (Layout l : {Layout::nchw, Layout::nhwc}) {
    const ConvConfig cfg{DType::f32, l, Device::cuda, MathMode::strict};
    const TensorView xv{src.data(), DType::f32, l, Device::cuda, input_dims(p)};
    const TensorView wv{wei.data(), DType::f32, l, Device::cuda, weight_dims(p)};
    const TensorView yv{dst.data(), DType::f32, l, Device::cuda, output_dims(p)};
    // Host reference at each point, by the same offsets (the device input holds pattern(offset)).
    std::vector<double> want(points.size());
    for (size_t i = 0; i < points.size(); ++i) {
      const auto [n, k, pp, qq] = points[i];
      double acc = 0;
      for (int64_t c = 0; c < p.c; ++c)
        for (int64_t r = 0; r < p.r; ++r)
          for (int64_t s = 0; s < p.s; ++s) {
            const int64_t h = pp - p.pad_h + r, ww = qq - p.pad_w + s;
            if (h < 0 || h >= p.h || ww < 0 || ww >= p.w) continue;
            acc += double(pattern(uint64_t(xv.offset(n, c, h, ww)), 1)) * double(w[size_t(wv.offset(k, c, r, s))]);
          }
      want[i] = acc + b[size_t(k)];
    }
    for (const Algorithm* a : cuda) {
      const Support s = a->can_implement(p, cfg);
      if (!s) {
        std::printf("  %s rejects %s %s: %s\n", a->name().c_str(), p.to_string().c_str(), cfg.to_string().c_str(),
                    s.reason.c_str());
        continue;
      }
      Buffer ws;
      const size_t ws_bytes = a->workspace_bytes(p, cfg);
      try {
        ws = Buffer(Device::cuda, ws_bytes);
      } catch (const Error& e) {
        std::printf("  %s: workspace of %.1f GB does not fit next to the tensors, skipped: %s\n", a->name().c_str(),
                    double(ws_bytes) / 1e9, e.what());
        continue;
      }
      dst.fill_bytes(0xFF);
      ConvCall call{p, cfg, xv, wv, yv, Epilogue{}, ws.data(), ws_bytes, nullptr, std::string()};
      call.epilogue.bias = bias.data();
      try {
        a->run(call);
        device_synchronize(Device::cuda);
      } catch (const std::exception& e) {
        ADD_FAILURE() << a->name() << " threw on " << p.to_string() << " " << cfg.to_string() << ": " << e.what();
        continue;
      }
      ++ran;
      dst.copy_to_host(host.data(), size_t(p.output_elems()) * 4);
      std::atomic<int64_t> nans{0};
      parallel_for(p.output_elems(), [&](int64_t lo, int64_t hi) {
        int64_t local = 0;
        for (int64_t i = lo; i < hi; ++i) local += std::isnan(host[size_t(i)]);
        nans += local;
      });
      EXPECT_EQ(nans.load(), 0) << a->name() << " " << p.to_string() << " " << cfg.to_string()
                                << ": outputs left unwritten (NaN poison)";
      int bad = 0;
      for (size_t i = 0; i < points.size(); ++i) {
        const auto [n, k, pp, qq] = points[i];
        const double got = host[size_t(yv.offset(n, k, pp, qq))];
        if (got != want[i] && bad++ < 5)
          ADD_FAILURE() << a->name() << " " << p.to_string() << " " << cfg.to_string() << " at (n=" << n << ",k=" << k
                        << ",p=" << pp << ",q=" << qq << ") offset " << yv.offset(n, k, pp, qq) << ": got " << got
                        << ", want " << want[i];
      }
      std::printf("  %s %s: %d of %zu sampled points wrong, %lld NaN\n", a->name().c_str(), cfg.to_string().c_str(), bad,
                  points.size(), static_cast<long long>(nans.load()));
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  large-tensor test: %d runs in %.1f s\n", ran, secs);
  if (ran == 0) GTEST_SKIP() << "no CUDA algorithm accepted (or had memory for) the problem";
}
