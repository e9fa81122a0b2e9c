// cpu_depthwise beyond the shared sweeps (test_algorithms.cpp runs it on the edge set, the random sweep and the
// exact small-integer sweep): larger images, 5x5 and 7x7 filters, stride 2, dilation 2, padding past R/2, every
// epilogue with the residual aliasing the output, both layouts, bit-equal to cpu_ref on small integers; and the
// heuristic choosing it for depthwise layers only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <omp.h>

#include "convkit/convkit.hpp"
#include "depthwise_specs.hpp"
#include "test_util.hpp"

using namespace convkit;

namespace {

std::vector<float> small_ints(size_t n, std::mt19937& rng) {
  const std::vector<double> d = ckt::small_ints(n, rng);
  return std::vector<float>(d.begin(), d.end());
}

// cpu_depthwise and cpu_ref on small integers (bias, the residual in place, `act`), cpu_depthwise with `threads`
// OpenMP threads (0: as set): whether the outputs are bit-equal.
bool depthwise_bit_equal_to_ref(const Conv2dProblem& p, Layout l, Activation act, std::mt19937& rng, int threads = 0) {
  const int before = omp_get_max_threads();
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
    omp_set_num_threads(y == &got && threads > 0 ? threads : before);
    conv2d(p, ckt::cpu_f32_view(x, l, input_dims(p)), ckt::cpu_f32_view(w, l, weight_dims(p)),
           ckt::cpu_f32_view(*y, l, output_dims(p)), e, o);
  }
  omp_set_num_threads(before);
  return std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
}

TEST(Depthwise, BitEqualToReferenceOnLargerShapes) {
  // (the NCHW blocks on the padded plane: small images, row remainders, R != S, stride along H only, stride
  // 2 and 3 along W on short rows, the row pass on long ones)
  const char* specs[] = {"n2c48h37w29k48r3s3p1g48",  "n1c40h23w31k40r5s5p2u2g40",       "n2c19h17w16k19r3s3p3d2g19",
                         "n1c16h15w15k16r7s7p3g16",  "n3c70h9w11k70r3s3p1u2g70",        "n2c5h37w41k5r3s3p1g5",
                         "n1c3h45w70k3r5s5p4d2g3",   "n1c4h30w52k4r7s3ph3pw1uh2uw1g4", "n1c2h64w40k2r3s3p0g2",
                         "n1c3h21w33k3r3s3p2g3",     "n1c3h20w120k3r3s3p1u2g3",         "n1c5h16w40k5r5s5p2u3g5",
                         "n2c6h7w7k6r3s3p1g6",       "n1c4h5w8k4r5s5p2g4",              "n1c3h13w9k3r7s7p3g3"};
  std::mt19937 rng(5);
  for (const char* spec : specs)
    for (Layout l : {Layout::nchw, Layout::nhwc})
      for (Activation act : {Activation::none, Activation::relu})
        ASSERT_TRUE(depthwise_bit_equal_to_ref(Conv2dProblem::parse(spec), l, act, rng))
            << spec << " " << to_string(l) << " act " << int(act);
}

// 16-bit tensors through float32 copies a pass of images at a time (8 MB of copies a pass): three 160x160
// images take three passes, five 128x130 ones at stride 2 two passes of three and two; each pass's residual
// and output are its own images; both layouts, every epilogue, within the 16-bit bound of the reference.
TEST(Depthwise, SixteenBitInPassesOfImages) {
  const Algorithm* a = find_algorithm("cpu_depthwise");
  ASSERT_NE(a, nullptr);
  uint32_t seed = 70;
  int act = 0;
  for (const char* spec : {"n3c16h160w160k16r3s3p1g16", "n5c24h128w130k24r5s5p2u2g24"})
    for (Layout l : {Layout::nchw, Layout::nhwc})
      for (DType dt : {DType::f16, DType::bf16})
        for (int rep = 0; rep < 2; ++rep) {
          const Conv2dProblem p = Conv2dProblem::parse(spec);
          const ConvConfig cfg{dt, l, Device::cpu, MathMode::strict};
          ASSERT_TRUE(a->can_implement(p, cfg)) << spec;
          const ckt::EpilogueSpec es = ckt::varied_epilogue(seed, act++, false);
          const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, ckt::Fill::gaussian);
          const ckt::Verdict v = ckt::check_against_reference(*a, c, 1e-2, false);
          EXPECT_TRUE(v.ok) << spec << " " << to_string(l) << " " << to_string(dt) << ": " << v.message;
        }
}

// NHWC at several thread counts: the threads split the output rows, or blocks of 16 channels where those divide
// more evenly (few rows of many channels); each thread then transposes and reads its own filters. Shapes with 7
// rows and 9, 48 or 10 blocks (the last with channels past the last 16), stride 2, 5x5 and 7x7, a batch of 2.
TEST(Depthwise, NhwcBitEqualAtEveryThreadCount) {
  const char* specs[] = {"n1c144h14w14k144r3s3p1u2g144", "n1c768h7w7k768r7s7p3g768", "n1c150h7w7k150r5s5p2g150",
                         "n2c96h9w5k96r3s3p1g96", "n1c32h3w40k32r3s3p1g32"};
  std::mt19937 rng(17);
  for (const char* spec : specs)
    for (int threads : {1, 2, 3, 5})
      ASSERT_TRUE(depthwise_bit_equal_to_ref(Conv2dProblem::parse(spec), Layout::nhwc, Activation::relu6, rng, threads))
          << spec << " threads " << threads;
}

// NHWC's column blocks (3-, 5- and 7-wide filters at stride 1 and 2, dilation 1: each input column read once
// a filter row, columns outside the image skipped): every row width from 1 to past two blocks, paddings from 0
// to past the filter, a channel count with and without a tail past the last 16.
TEST(Depthwise, NhwcColumnBlocksBitEqualAtEveryWidthAndPadding) {
  std::mt19937 rng(23);
  int checked = 0;
  for (int s : {3, 5, 7})
    for (int u : {1, 2})
      for (int pad : {0, s / 2, s - 1, s + 1})
        for (int w : {1, 2, 5, 7, 8, 9, 15, 16, 17, 23})
          for (int c : {16, 37}) {
            if (w + 2 * pad < s) continue;  // (no output column)
            const Conv2dProblem p = Conv2dProblem::parse("n1c" + std::to_string(c) + "h4w" + std::to_string(w) + "k" +
                                                         std::to_string(c) + "r3s" + std::to_string(s) + "ph1pw" +
                                                         std::to_string(pad) + "uh1uw" + std::to_string(u) + "g" +
                                                         std::to_string(c));
            ASSERT_TRUE(depthwise_bit_equal_to_ref(p, Layout::nhwc, Activation::relu, rng)) << p.to_string();
            ++checked;
          }
  EXPECT_GT(checked, 400);
}

// An infinite filter value: where its tap falls outside the image the sum skips it, as cpu_ref does (the NCHW
// kernel's zero-padded plane would make 0 * inf = NaN there, so such a plane takes the row pass).
TEST(Depthwise, AnInfiniteWeightGivesTheReferencesNaNsAndInfinities) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c3h9w21k3r3s3p1g3");
  std::mt19937 rng(11);
  auto x = small_ints(size_t(p.input_elems()), rng), w = small_ints(size_t(p.weight_elems()), rng);
  w[0] = std::numeric_limits<float>::infinity();  // channel 0, tap (0, 0): outside the image on row 0, column 0
  for (Layout l : {Layout::nchw, Layout::nhwc}) {
    std::vector<float> want(size_t(p.output_elems())), got(want.size());
    for (auto* y : {&want, &got}) {
      RunOptions o;
      o.algo = y == &want ? "cpu_ref" : "cpu_depthwise";
      conv2d(p, ckt::cpu_f32_view(x, l, input_dims(p)), ckt::cpu_f32_view(w, l, weight_dims(p)),
             ckt::cpu_f32_view(*y, l, output_dims(p)), Epilogue{}, o);
    }
    int finite = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << to_string(l) << " element " << i;
      } else {
        EXPECT_EQ(got[i], want[i]) << to_string(l) << " element " << i;
        finite += std::isfinite(want[i]);
      }
    }
    EXPECT_GT(finite, 0);
  }
}

// NHWC f16/bf16 read and written in their own dtype: bit-equal to the float32 run on the same (widened) values
// with its output rounded once, on Gaussian data, every epilogue (bias and residual in the 16-bit dtype, the
// residual in place on every other case): the column blocks (3-, 5- and 7-wide filters at stride 1 and 2), the
// per-pixel blocks (4-wide, dilation 2, 1x1), channels past the last 16, at one and two threads.
TEST(Depthwise, NhwcSixteenBitIsTheFloat32RunRounded) {
  const Algorithm* a = find_algorithm("cpu_depthwise");
  ASSERT_NE(a, nullptr);
  const char* specs[] = {"n2c16h9w17k16r3s3p1g16",          "n1c37h8w16k37r3s3p1u2g37", "n1c21h11w7k21r5s5p2g21",
                         "n1c48h10w23k48r7s7p3u2g48",       "n1c150h7w7k150r5s5p2g150", "n1c19h6w13k19r3s4p2g19",
                         "n1c32h12w12k32r3s3p2d2g32",       "n2c40h5w9k40r1s1g40",      "n1c17h4w3k17r3s3p4g17",
                         "n3c24h14w14k24r3s3ph1pw0uh2uw1g24", "n1c96h7w7k96r7s7p3g96"};
  const int before = omp_get_max_threads();
  uint32_t seed = 90;
  int act = 0;
  for (const char* spec : specs)
    for (DType dt : {DType::bf16, DType::f16})
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        const Conv2dProblem p = Conv2dProblem::parse(spec);
        const ConvConfig cfg{dt, Layout::nhwc, Device::cpu, MathMode::strict};
        ckt::EpilogueSpec es = ckt::varied_epilogue(seed, act++, false);
        es.residual_aliases_dst = es.residual && act % 2 == 0;
        const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, ckt::Fill::gaussian);
        ckt::Case c32 = c;  // the same values, widened
        c32.config.dtype = DType::f32;
        for (auto [from, to] : {std::pair{&c.src, &c32.src}, std::pair{&c.wei, &c32.wei},
                                std::pair{&c.residual, &c32.residual}}) {
          if (from->bytes.empty()) continue;
          *to = ckt::HostTensor(DType::f32, from->layout, from->dims);
          to->fill_logical(from->logical());
        }
        if (!c.bias.empty()) {
          c32.bias.assign(size_t(p.k) * sizeof(float), 0);
          for (int64_t i = 0; i < p.k; ++i)
            detail::store_from_double(c32.bias.data(), DType::f32, i, detail::load_as_double(c.bias.data(), dt, i));
        }
        const ckt::HostTensor got = ckt::run_case(*a, c), f32 = ckt::run_case(*a, c32);
        ckt::HostTensor want(dt, Layout::nhwc, f32.dims);
        for (int64_t i = 0; i < f32.numel(); ++i)
          detail::store_from_double(want.bytes.data(), dt, i, detail::load_as_double(f32.bytes.data(), DType::f32, i));
        EXPECT_EQ(std::memcmp(got.bytes.data(), want.bytes.data(), got.bytes.size()), 0)
            << spec << " " << to_string(dt) << " threads " << threads << " " << es.to_string();
      }
  omp_set_num_threads(before);
}

TEST(Depthwise, TheHeuristicChoosesItForDepthwiseLayersOnly) {
  const ConvConfig cfg{DType::f32, Layout::nhwc, Device::cpu, MathMode::strict};
  EXPECT_EQ(select(Conv2dProblem::parse("n1c32h56w56k32r3s3p1g32"), cfg).name(), "cpu_depthwise");
  EXPECT_NE(select(Conv2dProblem::parse("n1c32h56w56k64r3s3p1g32"), cfg).name(), "cpu_depthwise");  // multiplier 2
  EXPECT_NE(select(Conv2dProblem::parse("n1c32h56w56k32r3s3p1"), cfg).name(), "cpu_depthwise");
}

}  // namespace

// ---- cuda_depthwise -------------------------------------------------------------------------------
// Filters 1x1 to 31x31, multipliers 1, 2, 4 and 3, stride 2 on odd sizes, dilation 2, padding past R/2,
// channel counts off the vector width (3, 17, 145), batch 1, 1x1 and 1xW images: bit-equal to cpu_ref on
// small integers in f32 (both layouts, every epilogue, the residual in place), within the 16-bit bound in
// f16/bf16 on Gaussian data.
namespace {

const Algorithm* gpu_depthwise() { return find_algorithm("cuda_depthwise"); }

TEST(CudaDepthwise, BitEqualToReferenceOnSmallIntegersF32) {
  const Algorithm* a = gpu_depthwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_depthwise is not in this build";
  CKT_REQUIRE_USABLE(*a);
  uint32_t seed = 100;
  for (const char* spec : ckt::kDepthwiseSpecs)
    for (Layout l : {Layout::nchw, Layout::nhwc})
      for (int e = 0; e < 3; ++e) {
        const Conv2dProblem p = Conv2dProblem::parse(spec);
        const ConvConfig cfg{DType::f32, l, Device::cuda, MathMode::strict};
        ASSERT_TRUE(a->can_implement(p, cfg)) << spec << ": " << a->can_implement(p, cfg).reason;
        const ckt::EpilogueSpec es = ckt::exact_epilogue(e, seed);
        const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, ckt::Fill::small_ints);
        const ckt::Verdict v = ckt::check_against_reference(*a, c, 1e-5, /*exact=*/true);
        EXPECT_TRUE(v.ok) << v.message;
      }
}

TEST(CudaDepthwise, SixteenBitWithinBoundEveryActivation) {
  const Algorithm* a = gpu_depthwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_depthwise is not in this build";
  CKT_REQUIRE_USABLE(*a);
  uint32_t seed = 500;
  int act = 0;
  for (DType dt : {DType::f16, DType::bf16})
    for (const char* spec : ckt::kDepthwiseSpecs)
      for (Layout l : {Layout::nchw, Layout::nhwc}) {
        const Conv2dProblem p = Conv2dProblem::parse(spec);
        const ConvConfig cfg{dt, l, Device::cuda, MathMode::strict};
        ckt::EpilogueSpec es;
        es.bias = true;
        es.residual = (seed % 3) == 0;
        es.residual_aliases_dst = es.residual && (seed % 2 == 0);
        es.activation = static_cast<Activation>(act++ % 6);
        const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, ckt::Fill::gaussian);
        const ckt::Verdict v = ckt::check_against_reference(*a, c, 1e-2, /*exact=*/false);
        EXPECT_TRUE(v.ok) << v.message;
      }
}

// Every kernel (variant) that takes a problem, not only the heuristic's: the rows, tensor-core, column, window
// and general kernels must agree on the shapes where more than one applies.
TEST(CudaDepthwise, EveryVariantBitEqualF32AndWithinBound16Bit) {
  const Algorithm* a = gpu_depthwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_depthwise is not in this build";
  CKT_REQUIRE_USABLE(*a);
  uint32_t seed = 900;
  int act = 0, multi = 0;
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const char* spec : ckt::kDepthwiseSpecs)
      for (Layout l : {Layout::nchw, Layout::nhwc}) {
        const Conv2dProblem p = Conv2dProblem::parse(spec);
        const ConvConfig cfg{dt, l, Device::cuda, MathMode::strict};
        const std::vector<std::string> vs = a->variants(p, cfg);
        ASSERT_FALSE(vs.empty()) << spec;
        EXPECT_EQ(vs.back(), "general") << spec;
        multi += vs.size() > 1;
        ckt::EpilogueSpec es;
        es.bias = true;
        es.residual = (seed % 2) == 0;
        es.residual_aliases_dst = es.residual && (seed % 4 == 0);
        const bool exact = dt == DType::f32;
        // (exact: the activations that keep small integers exact)
        es.activation = exact ? (act++ % 2 ? Activation::relu6 : Activation::relu) : static_cast<Activation>(act++ % 6);
        const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, exact ? ckt::Fill::small_ints : ckt::Fill::gaussian);
        const std::vector<double> want = ckt::reference(c).memory_order();
        for (const std::string& v : vs) {
          const ckt::Verdict verdict = ckt::check_variant(*a, c, v, want, exact ? 1e-5 : 1e-2, exact);
          EXPECT_TRUE(verdict.ok) << "variant " << v << ": " << verdict.message;
        }
      }
  EXPECT_GT(multi, 20);  // most shapes have more than one kernel
  // A variant that does not take the problem is refused with the list of those that do.
  const Conv2dProblem p = Conv2dProblem::parse("n1c17h9w9k17r3s3p1g17");  // C off the vector width
  const ConvConfig cfg{DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict};
  ckt::RunOpts o;
  o.variant = "rows/256/d1";
  const ckt::Case c = ckt::make_case(p, cfg, {}, 1, ckt::Fill::gaussian);
  try {
    ckt::run_case(*a, c, o);
    ADD_FAILURE() << "the rows kernel took C = 17";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("it takes: general"), std::string::npos) << e.what();
  }
}

// The TMA kernel alone (so that compute-sanitizer can run it over every shape quickly): every stage count
// and block size on every shape it takes, f32 bit-exact on small integers, bf16 within its bound, each with
// bias, residual (in place on some) and an activation.
TEST(CudaDepthwise, TmaKernelEveryVariant) {
  const Algorithm* a = gpu_depthwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_depthwise is not in this build";
  CKT_REQUIRE_USABLE(*a);
  uint32_t seed = 4100;
  int ran = 0, act = 0;
  std::vector<std::string> specs(std::begin(ckt::kDepthwiseSpecs), std::end(ckt::kDepthwiseSpecs));
  // 7x7 stride 1 for the one-channel-a-lane whole pixels (/px/c1, 4 x 4 outputs a thread): odd sizes, C in parts
  // (384 = 2 x 192), padding past the filter
  for (const char* s : {"n2c24h13w11k24r7s7p3g24", "n1c384h9w9k384r7s7p3g384", "n2c8h20w17k8r7s7p5g8"}) specs.push_back(s);
  // 16-bit 3x3 whole pixels in parts of C past 256 channels (the heuristic's /px there): stride 1 and 2, odd sizes
  for (const char* s : {"n2c384h9w7k384r3s3p1g384", "n1c576h11w9k576r3s3p1u2g576"}) specs.push_back(s);
  for (DType dt : {DType::f32, DType::bf16})
    for (const std::string& spec : specs) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      const ConvConfig cfg{dt, Layout::nhwc, Device::cuda, MathMode::strict};
      std::vector<std::string> tma;
      for (const std::string& v : a->variants(p, cfg))
        if (v.rfind("tma/", 0) == 0) tma.push_back(v);
      if (tma.empty()) continue;
      ckt::EpilogueSpec es;
      es.bias = true;
      es.residual = (seed % 2) == 0;
      es.residual_aliases_dst = es.residual && (seed % 4 == 0);
      const bool exact = dt == DType::f32;
      es.activation = exact ? (act++ % 2 ? Activation::relu6 : Activation::relu) : static_cast<Activation>(act++ % 8);
      const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, exact ? ckt::Fill::small_ints : ckt::Fill::gaussian);
      const std::vector<double> want = ckt::reference(c).memory_order();
      for (const std::string& v : tma) {
        const ckt::Verdict verdict = ckt::check_variant(*a, c, v, want, exact ? 1e-5 : 1e-2, exact);
        EXPECT_TRUE(verdict.ok) << spec << " " << to_string(dt) << " variant " << v << ": " << verdict.message;
        ++ran;
      }
    }
  EXPECT_GT(ran, 60);  // about 14 shapes x 2 types x 5 variants
}

// The NCHW TMA kernel alone (fp32 NCHW; compute-sanitizer runs it the same way): every variant on every shape
// it takes, bit-exact on small integers, with bias, residual (in place on some) and an activation. Beyond the
// shared shapes: tiles across a row wider than one box (Q = 260), stride 2 on odd heights with 5x5 and 7x7,
// channel chunks of which the last is partly past C, padding past the filter, and whole planes (rows not 16-byte
// aligned) of one, two and four planes a box row, with 3x3, 5x5 and 7x7 at both strides.
TEST(CudaDepthwise, NchwTmaKernelEveryVariant) {
  const Algorithm* a = gpu_depthwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_depthwise is not in this build";
  CKT_REQUIRE_USABLE(*a);
  std::vector<std::string> specs(std::begin(ckt::kDepthwiseSpecs), std::end(ckt::kDepthwiseSpecs));
  for (const char* s : {"n1c6h9w260k6r3s3p1g6", "n2c5h11w264k5r3s3p1u2g5", "n2c20h33w36k20r5s5p2u2g20",
                        "n1c12h19w20k12r7s7p3g12", "n2c10h10w12k10r7s7p7u2g10", "n1c8h12w16k8r3s3p5g8", "n3c40h16w16k40r3s3p1g40",
                        "n3c12h7w7k12r7s7p3g12", "n2c20h14w14k20r5s5p2u2g20", "n2c36h14w14k36r3s3p1g36",
                        "n2c64h7w7k64r3s3p1u2g64", "n1c8h5w10k8r5s5p2g8", "n4c24h7w7k24r5s5p2g24",
                        // whole-plane tiles of rows off 16 bytes: outputs staged at 3x3 and up to 8 columns (14
                        // and 6 columns; 10 x 7, a run off 16 bytes: scalar stores; a partial last chunk), not at
                        // 5x5 and 7x7 on 14 columns; rows split over tiles
                        "n2c20h28w28k20r3s3p1u2g20", "n2c12h28w28k12r5s5p2u2g12", "n2c6h13w20k6r3s3p1u2g6",
                        "n3c10h28w28k10r3s3p1u2g10", "n2c12h12w12k12r5s5p2u2g12", "n1c2h600w28k2r3s3p1u2g2",
                        "n2c12h14w14k12r7s7p3g12"})
    specs.push_back(s);
  uint32_t seed = 5100;
  int ran = 0, act = 0;
  for (const std::string& spec : specs) {
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    const ConvConfig cfg{DType::f32, Layout::nchw, Device::cuda, MathMode::strict};
    std::vector<std::string> tma;
    for (const std::string& v : a->variants(p, cfg))
      if (v.rfind("tma/", 0) == 0) tma.push_back(v);
    if (tma.empty()) continue;
    ckt::EpilogueSpec es;
    es.bias = true;
    es.residual = (seed % 2) == 0;
    es.residual_aliases_dst = es.residual && (seed % 4 == 0);
    es.activation = act++ % 2 ? Activation::relu6 : Activation::relu;
    const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, ckt::Fill::small_ints);
    const std::vector<double> want = ckt::reference(c).memory_order();
    for (const std::string& v : tma) {
      const ckt::Verdict verdict = ckt::check_variant(*a, c, v, want, 1e-5, true);
      EXPECT_TRUE(verdict.ok) << spec << " variant " << v << ": " << verdict.message;
      ++ran;
    }
  }
  EXPECT_GT(ran, 40);  // about 18 shapes x 3 variants
  // What it does not take: 16-bit NCHW, dilation, rows not 16-byte aligned in images past 256 pixels.
  for (const auto& [spec, dt] : {std::pair{"n2c32h17w19k32r3s3p1g32", DType::f32}, std::pair{"n2c32h16w16k32r3s3p1g32", DType::bf16},
                                 std::pair{"n2c16h12w12k16r3s3p4d2g16", DType::f32}}) {
    const std::vector<std::string> vs = a->variants(Conv2dProblem::parse(spec), {dt, Layout::nchw, Device::cuda, MathMode::strict});
    for (const std::string& v : vs) EXPECT_NE(v.rfind("tma/", 0), 0u) << spec << " " << v;
  }
}

// The heuristic's kernel for the common NHWC layers (the rule at heuristic_kernel in depthwise.cu): on a device with
// the copy engine (compute capability 9.0) the TMA kernel's whole pixels up to 256 channels (16-bit 3x3 at any C, in
// parts past 256; at 7x7 stride 1 from 14 columns at any C, with one channel a lane and 4 x 4 outputs a thread:
// /px/c1), and past them its chunks at 3x3 stride 1, 3x3 stride 2 on outputs of 14 columns or fewer, 16-bit 5x5 and
// 7x7 from 28 columns; elsewhere, and on other machines, the rows kernel at stride 2 and on images of 28 columns or
// more, the window kernel on smaller ones, the column kernel at f32 3x3 stride 2 and where neither applies, the
// tensor-core kernel where only the general one would (16-bit, stride 3), the general kernel where none does.
TEST(CudaDepthwise, TheHeuristicsKernelForCommonNhwcLayers) {
  const Algorithm* a = gpu_depthwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_depthwise is not in this build";
  const ConvConfig cfg{DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict};
  const std::vector<std::string> probe = a->variants(Conv2dProblem::parse("n32c144h56w56k144r3s3p1g144"), cfg);
  const bool tma = std::find(probe.begin(), probe.end(), "tma/256/s2") != probe.end();  // this machine runs it
  const char* px_or_rows = tma ? "tma/256/s2/px" : "rows/256/d1";  // (whole pixels up to 256 channels)
  const std::pair<const char*, const char*> want[] = {
      {"n32c144h56w56k144r3s3p1g144", px_or_rows},
      {"n32c96h112w112k96r3s3p1u2g96", tma ? "tma/256/s2/px" : "rows/128/d1"},
      {"n32c672h14w14k672r5s5p2g672", tma ? "tma/256/s2" : "window"},
      {"n32c1152h7w7k1152r5s5p2g1152", tma ? "tma/128/s3" : "window"},
      {"n32c32h112w112k32r3s3p1g32", px_or_rows},
      {"n32c240h28w28k240r5s5p2g240", px_or_rows},
      {"n32c96h56w56k96r7s7p3g96", tma ? "tma/256/s2/px/c1" : "rows/256/d1"},
      {"n32c576h14w14k576r3s3p1u2g576", tma ? "tma/256/s2/px" : "rows/128/d1"},
      {"n32c960h7w7k960r3s3p1g960", tma ? "tma/256/s2/px" : "window"},
      {"n32c384h14w14k384r7s7p3g384", tma ? "tma/256/s2/px/c1" : "window"},
      {"n32c768h7w7k768r7s7p3g768", "window"},        {"n32c144h56w56k144r3s3p1u3g144", "mma/128/s4"},
      {"n32c17h56w56k17r3s3p1g17", "general"},        {"n32c20h56w56k20r3s3p1g20", "cols"}};
  for (const auto& [spec, kernel] : want) {
    const std::vector<std::string> vs = a->variants(Conv2dProblem::parse(spec), cfg);
    EXPECT_EQ(vs.front(), kernel) << spec;
    EXPECT_EQ(std::set<std::string>(vs.begin(), vs.end()).size(), vs.size()) << spec << ": a variant twice";
  }
  const ConvConfig f32{DType::f32, Layout::nhwc, Device::cuda, MathMode::strict};
  const std::pair<const char*, const char*> want_f32[] = {
      {"n32c144h56w56k144r3s3p1u2g144", tma ? "tma/256/s2/px" : "cols"},
      {"n32c144h56w56k144r3s3p1g144", px_or_rows},
      {"n32c240h56w56k240r5s5p2u2g240", tma ? "tma/256/s2/px" : "rows/128/d1"},
      {"n32c384h14w14k384r3s3p1g384", tma ? "tma/256/s2" : "window"},  // (past 256 channels: chunks)
      {"n32c96h56w56k96r7s7p3g96", tma ? "tma/256/s2/px/c1" : "rows/256/d1"},
      {"n32c384h14w14k384r7s7p3g384", tma ? "tma/256/s2/px/c1" : "window"}};  // (but whole pixels at 7x7)
  for (const auto& [spec, kernel] : want_f32) {
    const std::vector<std::string> vs = a->variants(Conv2dProblem::parse(spec), f32);
    EXPECT_EQ(vs.front(), kernel) << spec << " f32";
    EXPECT_EQ(std::set<std::string>(vs.begin(), vs.end()).size(), vs.size()) << spec << ": a variant twice";
  }
}

// The heuristic's kernel for fp32 NCHW layers: the NCHW TMA kernel where the device runs it (256/s2 on wide
// outputs, 64/s4 on whole planes at stride 1, 128/s3 on whole planes at stride 2 and outputs of 16 columns or
// fewer), else the window and general kernels; 16-bit NCHW never takes it.
TEST(CudaDepthwise, TheHeuristicsKernelForCommonNchwLayers) {
  const Algorithm* a = gpu_depthwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_depthwise is not in this build";
  const ConvConfig f32{DType::f32, Layout::nchw, Device::cuda, MathMode::strict};
  const std::vector<std::string> probe = a->variants(Conv2dProblem::parse("n32c144h56w56k144r3s3p1g144"), f32);
  const bool tma = std::find(probe.begin(), probe.end(), "tma/256/s2/nchw") != probe.end();
  const std::pair<const char*, const char*> want[] = {
      {"n32c144h56w56k144r3s3p1g144", tma ? "tma/256/s2/nchw" : "window"},
      {"n32c96h112w112k96r3s3p1u2g96", tma ? "tma/256/s2/nchw" : "general"},
      {"n32c192h28w28k192r3s3p1u2g192", tma ? "tma/128/s3/nchw" : "general"},
      {"n32c960h7w7k960r3s3p1g960", tma ? "tma/64/s4/nchw" : "window"},
      {"n32c672h14w14k672r5s5p2g672", tma ? "tma/64/s4/nchw" : "window"},
      {"n32c576h14w14k576r3s3p1u2g576", tma ? "tma/128/s3/nchw" : "general"},
      {"n32c96h56w56k96r7s7p3g96", tma ? "tma/256/s2/nchw" : "window"}};
  for (const auto& [spec, kernel] : want) {
    const std::vector<std::string> vs = a->variants(Conv2dProblem::parse(spec), f32);
    EXPECT_EQ(vs.front(), kernel) << spec;
    EXPECT_EQ(std::set<std::string>(vs.begin(), vs.end()).size(), vs.size()) << spec << ": a variant twice";
  }
  const ConvConfig bf16{DType::bf16, Layout::nchw, Device::cuda, MathMode::strict};
  for (const std::string& v : a->variants(Conv2dProblem::parse("n32c144h56w56k144r3s3p1g144"), bf16))
    EXPECT_EQ(v.find("nchw"), std::string::npos) << v;
}

TEST(CudaDepthwise, RejectsWhatItCannotDoWithAReason) {
  const Algorithm* a = gpu_depthwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_depthwise is not in this build";
  const ConvConfig cfg{DType::f32, Layout::nhwc, Device::cuda, MathMode::strict};
  const Support dense = a->can_implement(Conv2dProblem::parse("n1c32h8w8k32r3s3p1"), cfg);
  EXPECT_FALSE(dense);
  EXPECT_NE(dense.reason.find("depthwise"), std::string::npos) << dense.reason;
  const Support huge = a->can_implement(Conv2dProblem::parse("n1c8h400w400k8r31s31p60d4g8"), cfg);
  EXPECT_FALSE(huge);
  EXPECT_NE(huge.reason.find("shared memory"), std::string::npos) << huge.reason;
  EXPECT_TRUE(a->can_implement(Conv2dProblem::parse("n1c8h400w400k8r31s31p15g8"), cfg));
}

TEST(CudaDepthwise, TheHeuristicChoosesItForDepthwiseLayers) {
  const Algorithm* a = gpu_depthwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_depthwise is not in this build";
  CKT_REQUIRE_USABLE(*a);
  for (DType dt : {DType::f32, DType::bf16})
    for (Layout l : {Layout::nchw, Layout::nhwc}) {
      const ConvConfig cfg{dt, l, Device::cuda, MathMode::strict};
      EXPECT_EQ(select(Conv2dProblem::parse("n32c144h56w56k144r3s3p1g144"), cfg).name(), "cuda_depthwise");
    }
}

}  // namespace
