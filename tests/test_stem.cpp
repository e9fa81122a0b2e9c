// cuda_stem_mma: layers of 1 to 4 input channels on every filter shape image models use and the awkward ones:
// 1x1, 3x3 stride 2 (MobileNetV2, EfficientNet), 7x7 stride 2 pad 3 (ResNet), 4x4 stride 4 (ConvNeXt), even
// and odd S (the one-pixel units of an odd S), 2x5 and 5x2 filters, stride 3, dilation 2 (taps dil_w apart in
// a unit), padding beyond R/2, odd image sizes, 1x1 and 1xW images, batch 1 and 3, K of 8 to 130 (32-channel
// blocks, a partial 64-channel block, odd K: no paired stores); bit-equal to cpu_ref on small integers in f16
// and bf16 with every exact epilogue (the residual in place on some), within the 16-bit bound on Gaussian data
// with every activation; an infinity in the input reaches only the outputs whose window holds it; an empty
// batch; what it does not compute refused with the reason. (Past 2^31 output elements:
// TensorCoreHuge.F16NhwcStemPast2e31Outputs.)
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <string>

#include "convkit/convkit.hpp"
#include "test_util.hpp"

using namespace convkit;

namespace {

const char* kSpecs[] = {
    "n2c3h33w35k64r7s7p3u2",  "n1c3h32w32k32r3s3p1u2",   "n2c3h16w16k96r4s4u4",     "n1c3h9w11k24r1s1",
    "n3c1h13w17k16r3s3p1",    "n1c2h15w9k40r5s5p4d2",    "n1c4h12w14k64r2s5p1u3",   "n1c3h11w10k13r5s2p2u2",
    "n1c3h1w1k32r1s1",        "n1c3h1w41k48r1s3p1",      "n2c3h23w19k130r3s3p3u1",  "n1c1h7w7k8r7s7p3",
    "n1c4h40w36k72r6s6p2u2d1", "n1c3h20w24k64r3s3p1u1d3"};

const Algorithm* stem() { return find_algorithm("cuda_stem_mma"); }

const ConvConfig kBf16{DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict};

TEST(CudaStemMma, BitEqualToReferenceOnSmallIntegers) {
  const Algorithm* a = stem();
  if (a == nullptr) GTEST_SKIP() << "cuda_stem_mma is not in this build";
  CKT_REQUIRE_USABLE(*a);
  for (DType dt : {DType::f16, DType::bf16})
    EXPECT_EQ(ckt::check_nhwc_sweep(*a, kSpecs, dt, ckt::Fill::small_ints, 1e-5, 100, /*every_variant=*/false),
              int(std::size(kSpecs)));
}

TEST(CudaStemMma, GaussianWithinBoundEveryActivation) {
  const Algorithm* a = stem();
  if (a == nullptr) GTEST_SKIP() << "cuda_stem_mma is not in this build";
  CKT_REQUIRE_USABLE(*a);
  for (DType dt : {DType::f16, DType::bf16})
    EXPECT_EQ(ckt::check_nhwc_sweep(*a, kSpecs, dt, ckt::Fill::gaussian, 1e-2, 500, /*every_variant=*/false),
              int(std::size(kSpecs)));
}

// A unit holds two taps; with odd S the last tap of a row reads a one-pixel unit, so a pixel just right of a
// window never meets even a zero weight. One input pixel set to +inf: exactly the outputs whose window
// holds it are non-finite.
TEST(CudaStemMma, AnInfinityReachesOnlyTheOutputsThatSeeIt) {
  const Algorithm* a = stem();
  if (a == nullptr) GTEST_SKIP() << "cuda_stem_mma is not in this build";
  CKT_REQUIRE_USABLE(*a);
  for (const char* spec : {"n1c3h12w12k16r3s3p1u2", "n1c3h15w15k16r7s7p3u2", "n1c3h9w9k16r3s3p1u1"}) {
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    ckt::Case c = ckt::make_case(p, kBf16, {}, 3, ckt::Fill::small_ints);
    const int64_t ih = 5, iw = 6;  // the pixel set to +inf: channel 1 of pixel (0, ih, iw)
    c.src.set(0, 1, ih, iw, std::numeric_limits<double>::infinity());
    const ckt::HostTensor y = ckt::run_case(*a, c);
    for (int64_t oh = 0; oh < p.p(); ++oh)
      for (int64_t ow = 0; ow < p.q(); ++ow) {
        const int64_t dh = ih - (oh * p.stride_h - p.pad_h), dw = iw - (ow * p.stride_w - p.pad_w);
        const bool sees = dh >= 0 && dh < p.r && dw >= 0 && dw < p.s;
        for (int64_t k = 0; k < p.k; ++k) {
          const double v = y.at(0, k, oh, ow);
          if (!sees) {
            ASSERT_TRUE(std::isfinite(v)) << spec << " output (" << oh << ", " << ow << ", " << k << ")";
          }
        }
      }
  }
}

TEST(CudaStemMma, EmptyBatchWritesNothing) {
  const Algorithm* a = stem();
  if (a == nullptr) GTEST_SKIP() << "cuda_stem_mma is not in this build";
  CKT_REQUIRE_USABLE(*a);
  const Conv2dProblem p = Conv2dProblem::parse("n0c3h16w16k32r3s3p1u2");
  ASSERT_TRUE(a->can_implement(p, kBf16));
  const ckt::Case c = ckt::make_case(p, kBf16, {}, 7, ckt::Fill::small_ints);
  EXPECT_EQ(ckt::run_case(*a, c).numel(), 0);
}

TEST(CudaStemMma, RejectsWhatItCannotDoWithAReason) {
  const Algorithm* a = stem();
  if (a == nullptr) GTEST_SKIP() << "cuda_stem_mma is not in this build";
  const std::pair<const char*, const char*> no[] = {{"n1c5h8w8k32r3s3p1", "at most 4 input channels"},
                                                    {"n1c4h8w8k32r3s3p1g2", "ungrouped"},
                                                    {"n1c3h400w400k32r3s121p60d3", "shared memory"}};
  for (const auto& [spec, word] : no) {
    const Support s = a->can_implement(Conv2dProblem::parse(spec), kBf16);
    EXPECT_FALSE(s) << spec;
    EXPECT_NE(s.reason.find(word), std::string::npos) << spec << ": " << s.reason;
  }
  const Conv2dProblem ok = Conv2dProblem::parse("n1c3h16w16k32r3s3p1u2");
  EXPECT_TRUE(a->can_implement(ok, kBf16));
  EXPECT_FALSE(a->can_implement(ok, ConvConfig{DType::bf16, Layout::nchw, Device::cuda, MathMode::strict}));
  EXPECT_FALSE(a->can_implement(ok, ConvConfig{DType::f32, Layout::nhwc, Device::cuda, MathMode::strict}));
  Operands ops;
  ops.per_sample = true;
  EXPECT_FALSE(a->accepts(ok, kBf16, ops));
}

}  // namespace
