// cpu_im2col_gemm beyond the shared sweeps: the shapes that take its other paths. Deep layers of few pixels
// and many output channels (float32: the threads split the output channels, the column matrix built by all of
// them; bfloat16: the columns packed and the weight read as it is, odd reductions included, several images a
// GEMM); bfloat16 NHWC on
// the dot product (the input itself as the column matrix for 1x1 layers with an even
// channel count a group, 16-bit columns padded to an even reduction otherwise, output channel counts off its
// 32-column blocks, groups); float32 NHWC batches in GEMMs of several images (3 images of 40x40x128 in two
// GEMMs). Bit-equal to cpu_ref on small integers with every exact epilogue (the residual
// in place on every other one); every activation within the bound on Gaussian data.
#include <gtest/gtest.h>

#include <iterator>

#include "convkit/convkit.hpp"
#include "test_util.hpp"

using namespace convkit;

namespace {

const char* kSpecs[] = {
    "n1c64h5w5k128r3s3p1",        "n1c512h5w5k256r1s1",          "n2c256h4w3k192r1s1",
    "n1c32h9w7k96r3s3p1u2",       "n1c64h6w6k128r3s3p1g2",       "n1c96h3w5k160r3s3p2d2",
    "n1c3h11w11k40r3s3p1",        "n1c7h6w6k33r1s1",             "n2c16h9w9k72r3s3p1",
    "n1c24h8w8k48r1s1g2",         "n1c130h4w4k70r3s1ph1pw0",     "n1c256h2w2k512r3s3p1",
    "n1c33h5w5k64r3s3p1",         "n3c64h4w4k96r1s1",            "n3c128h40w40k16r3s3p1",
    // bfloat16's turned path over several images a GEMM: two 32-row blocks, chunks of 8 rows across images,
    // folds of a deep reduction with a last one of fewer images, stride 2, an odd reduction, one image a fold
    // (36 pixels), 1x1 in place; and past 64 rows with a short reduction, the packed weight instead
    "n5c64h3w3k128r3s3p1",        "n9c32h4w5k64r3s3p1u2",        "n5c256h5w5k64r3s3p1",
    "n3c33h3w3k64r3s3p1",         "n3c256h6w6k64r3s3p1",         "n7c64h2w3k64r1s1",
    "n3c48h6w6k64r3s3p1"};

int check(DType dt, Layout l, ckt::Fill fill, double bound, uint32_t seed) {
  const Algorithm* a = find_algorithm("cpu_im2col_gemm");
  int ran = 0, act = 0;
  for (const char* spec : kSpecs) {
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    const ConvConfig cfg{dt, l, Device::cpu, MathMode::strict};
    if (!a->can_implement(p, cfg)) continue;
    for (int rep = 0; rep < 2; ++rep) {
      const ckt::EpilogueSpec es = ckt::varied_epilogue(seed, act++, fill == ckt::Fill::small_ints);
      const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, fill);
      const ckt::Verdict v = ckt::check_against_reference(*a, c, bound, fill == ckt::Fill::small_ints);
      EXPECT_TRUE(v.ok) << spec << " " << to_string(l) << " " << to_string(dt) << ": " << v.message;
      ++ran;
    }
  }
  return ran;
}

TEST(Im2colGemm, OtherPathsBitEqualOnSmallIntegers) {
  const Algorithm* a = find_algorithm("cpu_im2col_gemm");
  ASSERT_NE(a, nullptr);
  CKT_REQUIRE_USABLE(*a);
  const int all = 2 * int(std::size(kSpecs));
  for (Layout l : {Layout::nchw, Layout::nhwc})
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) EXPECT_EQ(check(dt, l, ckt::Fill::small_ints, 1e-5, 10), all);
}

TEST(Im2colGemm, OtherPathsWithinBoundEveryActivation) {
  const Algorithm* a = find_algorithm("cpu_im2col_gemm");
  ASSERT_NE(a, nullptr);
  CKT_REQUIRE_USABLE(*a);
  const int all = 2 * int(std::size(kSpecs));
  for (Layout l : {Layout::nchw, Layout::nhwc}) {
    EXPECT_EQ(check(DType::f32, l, ckt::Fill::gaussian, 1e-5, 50), all);
    for (DType dt : {DType::f16, DType::bf16}) EXPECT_EQ(check(dt, l, ckt::Fill::gaussian, 1e-2, 90), all);
  }
}

// The heuristic leaves float32 stems (up to 4 input channels, 3x3 or larger) to cpu_direct, and keeps the rest.
TEST(Im2colGemm, LeavesFloat32StemsToCpuDirect) {
  if (find_algorithm("cpu_im2col_gemm") == nullptr || !find_algorithm("cpu_im2col_gemm")->available())
    GTEST_SKIP() << "cpu_im2col_gemm is not in this build";
  for (Layout l : {Layout::nchw, Layout::nhwc}) {
    const ConvConfig f32{DType::f32, l, Device::cpu, MathMode::strict}, bf16{DType::bf16, l, Device::cpu, MathMode::strict};
    for (const char* stem : {"n1c3h224w224k64r7s7p3u2", "n2c3h160w160k32r3s3p1u2", "n1c4h33w33k16r5s5p2"})
      EXPECT_EQ(select(Conv2dProblem::parse(stem), f32).name(), "cpu_direct") << stem << " " << to_string(l);
    EXPECT_EQ(select(Conv2dProblem::parse("n1c3h224w224k64r7s7p3u2"), bf16).name(), "cpu_im2col_gemm") << to_string(l);
    EXPECT_EQ(select(Conv2dProblem::parse("n1c8h32w32k16r3s3p1"), f32).name(), "cpu_im2col_gemm") << to_string(l);
    EXPECT_EQ(select(Conv2dProblem::parse("n1c3h32w32k16r1s1"), f32).name(), "cpu_im2col_gemm") << to_string(l);
  }
}

}  // namespace
