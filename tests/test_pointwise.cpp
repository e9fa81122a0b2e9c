// cuda_pointwise_mma beyond the shared tensor-core sweeps (whose shapes have few 1x1 layers it takes): every
// variant on 1x1 layers with C from 8 to 512 (C % 16 == 8: a zero half k step; 512: the largest reduction it
// stages), K from 8 to 1536 (a partial last channel tile, channel splits on small M), pixel counts off the
// tile (M % 64 != 0), batch 1, 1x1 and 1xW images, an empty batch; bit-equal to cpu_ref on small integers in
// f16 and bf16 with every exact epilogue (the residual in place on some), within the 16-bit bound on Gaussian
// data with every activation and alpha/beta != 1; misaligned pointers and what it does not compute refused
// with the reason. (Past 2^31 output elements: TensorCoreHuge.F16Nhwc1x1WideningPast2e31Outputs.)
#include <gtest/gtest.h>

#include <string>

#include "convkit/convkit.hpp"
#include "test_util.hpp"

using namespace convkit;

namespace {

const char* kSpecs[] = {
    "n2c16h15w15k96r1s1",   "n1c24h9w11k144r1s1",   "n1c8h7w7k8r1s1",      "n3c40h5w7k200r1s1",
    "n1c96h14w14k384r1s1",  "n1c192h7w9k768r1s1",   "n1c256h3w5k1024r1s1", "n1c512h2w3k64r1s1",
    "n2c32h1w1k192r1s1",    "n1c64h1w37k136r1s1",   "n1c320h7w7k1280r1s1", "n4c96h8w8k24r1s1",
    "n1c384h2w2k1536r1s1",  "n1c16h64w64k96r1s1"};

const Algorithm* pointwise() { return find_algorithm("cuda_pointwise_mma"); }

const ConvConfig kBf16{DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict};

TEST(CudaPointwiseMma, BitEqualToReferenceOnSmallIntegersEveryVariant) {
  const Algorithm* a = pointwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_pointwise_mma is not in this build";
  CKT_REQUIRE_USABLE(*a);
  for (DType dt : {DType::f16, DType::bf16})
    EXPECT_GE(ckt::check_nhwc_sweep(*a, kSpecs, dt, ckt::Fill::small_ints, 1e-5, 100,
                                    /*every_variant=*/true), 30);
}

TEST(CudaPointwiseMma, GaussianWithinBoundEveryActivationEveryVariant) {
  const Algorithm* a = pointwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_pointwise_mma is not in this build";
  CKT_REQUIRE_USABLE(*a);
  for (DType dt : {DType::f16, DType::bf16})
    EXPECT_GE(ckt::check_nhwc_sweep(*a, kSpecs, dt, ckt::Fill::gaussian, 1e-2, 500,
                                    /*every_variant=*/true), 30);
}

TEST(CudaPointwiseMma, EmptyBatchWritesNothing) {
  const Algorithm* a = pointwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_pointwise_mma is not in this build";
  CKT_REQUIRE_USABLE(*a);
  const Conv2dProblem p = Conv2dProblem::parse("n0c16h8w8k96r1s1");
  ASSERT_TRUE(a->can_implement(p, kBf16));
  const ckt::Case c = ckt::make_case(p, kBf16, {}, 7, ckt::Fill::small_ints);
  EXPECT_EQ(ckt::run_case(*a, c).numel(), 0);
}

TEST(CudaPointwiseMma, RejectsWhatItCannotDoWithAReason) {
  const Algorithm* a = pointwise();
  if (a == nullptr) GTEST_SKIP() << "cuda_pointwise_mma is not in this build";
  const std::pair<const char*, const char*> no[] = {{"n1c16h8w8k96r3s3p1", "1x1"},
                                                    {"n1c16h8w8k96r1s1u2", "stride 1"},
                                                    {"n1c16h8w8k96r1s1p1", "no padding"},
                                                    {"n1c16h8w8k96r1s1g2", "ungrouped"},
                                                    {"n1c12h8w8k96r1s1", "C % 8"},
                                                    {"n1c16h8w8k100r1s1", "K % 8"},
                                                    {"n1c520h8w8k96r1s1", "C <= 512"}};
  for (const auto& [spec, word] : no) {
    const Support s = a->can_implement(Conv2dProblem::parse(spec), kBf16);
    EXPECT_FALSE(s) << spec;
    EXPECT_NE(s.reason.find(word), std::string::npos) << spec << ": " << s.reason;
  }
  const Conv2dProblem ok = Conv2dProblem::parse("n1c16h8w8k96r1s1");
  EXPECT_TRUE(a->can_implement(ok, kBf16));
  EXPECT_FALSE(a->can_implement(ok, ConvConfig{DType::bf16, Layout::nchw, Device::cuda, MathMode::strict}));
  EXPECT_FALSE(a->can_implement(ok, ConvConfig{DType::f32, Layout::nhwc, Device::cuda, MathMode::tf32}));
  Operands ops;
  ops.src_align = 2;
  EXPECT_FALSE(a->accepts(ok, kBf16, ops));
  ops.src_align = 256;
  ops.has_residual = true;
  ops.residual_align = 2;
  const Support r = a->accepts(ok, kBf16, ops);
  EXPECT_FALSE(r);
  EXPECT_NE(r.reason.find("4-byte"), std::string::npos) << r.reason;
  ops.per_sample = true;
  ops.residual_align = 256;
  EXPECT_FALSE(a->accepts(ok, kBf16, ops));
}

}  // namespace
