// cuda_grouped beyond the shared sweeps: 2 to 64 channels a group (in and out, equal and not), multiples of 4
// output channels a group and not, groups that do not fill the last block, 1x1 to 7x7 filters, stride 2 on odd
// sizes, dilation 2, padding past R/2, batch 1 and 1xW images; bit-equal to cpu_ref on small integers in f32
// with every epilogue (the residual in place), within the 16-bit bound in f16/bf16; its refusals. And
// cuda_grouped_mma (tensor cores, K = C): bit-equal on small integers in f16 and bf16, within the bound on
// Gaussian data, on the same list and shapes of its own; its refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "convkit/convkit.hpp"
#include "convkit/system.hpp"
#include "test_util.hpp"

using namespace convkit;

namespace {

const char* kGroupedSpecs[] = {
    "n2c128h13w15k128r3s3p1g32",     "n1c256h14w14k256r3s3p1u2g32",  "n2c64h9w11k64r3s3p1g2",
    "n1c24h10w10k48r3s3p1g6",        "n1c96h9w9k48r3s3p1g3",         "n2c12h7w9k18r5s5p2g3",
    "n1c8h11w11k8r7s7p3g4",          "n1c40h12w12k40r3s3p4d2g5",     "n3c32h5w5k32r1s1g8",
    "n1c36h1w19k36r1s3ph0pw1g9",     "n1c512h7w7k512r3s3p1g16",      "n1c20h9w7k12r3s3p1u2g4",
    "n1c1024h7w7k1024r3s3p1g32"};

// Tensor-core shapes (K = C): 2 to 64 channels a group, a partial last 64-channel block, Q past 128 (column
// tiles), stride 2 and 3, dilation 2, padding past R/2, a 1x1 image; several whole images a block (outputs of
// at most 64 pixels), with N not a multiple of the images a block.
const char* kGroupedMmaSpecs[] = {
    "n2c128h9w9k128r3s3p1g2",        "n1c64h5w150k64r3s3p1g16",      "n2c48h7w7k48r3s3p1u2g6",
    "n1c32h12w12k32r5s5p2d2g4",      "n1c16h6w6k16r3s3p1u3g4",       "n1c64h1w1k64r3s3p1g8",
    "n1c32h5w5k32r3s3p3g4",          "n2c256h8w8k256r1s1g64",        "n5c64h7w7k64r3s3p1g8",
    "n20c32h2w3k32r3s3p1u2g4",       "n3c1024h7w7k1024r3s3p1g32"};

// Shapes with more tiles than the persistent kernel's blocks (it walks several a block): a short last tile
// row; two whole images a tile.
const char* kGroupedPipeSpecs[] = {"n32c64h34w33k64r3s3p1g8", "n600c64h7w7k64r3s3p1g8"};

// Tiles of several staged rows that reach past the image's top and bottom (the staging's row bounds): stride
// 2 with an odd image height, 16 channels a group; stride 1 at 32 channels a group, 40 columns.
const char* kGroupedRowSpecs[] = {"n2c128h27w28k128r3s3p1u2g8", "n1c128h40w40k128r3s3p1g4"};

const Algorithm* grouped() { return find_algorithm("cuda_grouped"); }
const Algorithm* grouped_mma() { return find_algorithm("cuda_grouped_mma"); }

// Every spec of `specs` the algorithm takes in `dt`, with every epilogue in turn (the residual in place on
// every other one); returns how many ran. Small integers: bit-equal (fp32 sums of them are exact, and the
// output is rounded once, as the reference rounds); Gaussian: within `bound`.
template <size_t N>
int check_specs(const Algorithm& a, DType dt, const char* const (&specs)[N], ckt::Fill fill, double bound,
                uint32_t seed) {
  int ran = 0, act = 0;
  for (const char* spec : specs) {
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    const ConvConfig cfg{dt, Layout::nhwc, Device::cuda, MathMode::strict};
    if (!a.can_implement(p, cfg)) continue;
    const ckt::EpilogueSpec es = ckt::varied_epilogue(seed, act++, fill == ckt::Fill::small_ints);
    const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, fill);
    const ckt::Verdict v = ckt::check_against_reference(a, c, bound, fill == ckt::Fill::small_ints);
    EXPECT_TRUE(v.ok) << v.message;
    ++ran;
  }
  return ran;
}

TEST(CudaGrouped, BitEqualToReferenceOnSmallIntegersF32) {
  const Algorithm* a = grouped();
  if (a == nullptr) GTEST_SKIP() << "cuda_grouped is not in this build";
  CKT_REQUIRE_USABLE(*a);
  uint32_t seed = 300;
  for (const char* spec : kGroupedSpecs)
    for (int e = 0; e < 3; ++e) {
      const Conv2dProblem p = Conv2dProblem::parse(spec);
      const ConvConfig cfg{DType::f32, Layout::nhwc, Device::cuda, MathMode::strict};
      ASSERT_TRUE(a->can_implement(p, cfg)) << spec << ": " << a->can_implement(p, cfg).reason;
      const ckt::EpilogueSpec es = ckt::exact_epilogue(e, seed);
      const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, ckt::Fill::small_ints);
      const ckt::Verdict v = ckt::check_against_reference(*a, c, 1e-5, /*exact=*/true);
      EXPECT_TRUE(v.ok) << v.message;
    }
}

TEST(CudaGrouped, SixteenBitWithinBoundEveryActivation) {
  const Algorithm* a = grouped();
  if (a == nullptr) GTEST_SKIP() << "cuda_grouped is not in this build";
  CKT_REQUIRE_USABLE(*a);
  // C/groups % 8 == 0 go to the tensor-core kernels in f16/bf16: the rest of the list runs here.
  for (DType dt : {DType::f16, DType::bf16}) EXPECT_GE(check_specs(*a, dt, kGroupedSpecs, ckt::Fill::gaussian, 1e-2, 700), 6);
}

TEST(CudaGroupedMma, BitEqualToReferenceOnSmallIntegers) {
  const Algorithm* a = grouped_mma();
  if (a == nullptr) GTEST_SKIP() << "cuda_grouped_mma is not in this build";
  CKT_REQUIRE_USABLE(*a);
  for (DType dt : {DType::f16, DType::bf16}) {
    EXPECT_GE(check_specs(*a, dt, kGroupedSpecs, ckt::Fill::small_ints, 1e-5, 900), 8);
    EXPECT_EQ(check_specs(*a, dt, kGroupedMmaSpecs, ckt::Fill::small_ints, 1e-5, 950), int(std::size(kGroupedMmaSpecs)));
  }
}

TEST(CudaGroupedMma, GaussianWithinBoundEveryActivation) {
  const Algorithm* a = grouped_mma();
  if (a == nullptr) GTEST_SKIP() << "cuda_grouped_mma is not in this build";
  CKT_REQUIRE_USABLE(*a);
  for (DType dt : {DType::f16, DType::bf16}) {
    EXPECT_GE(check_specs(*a, dt, kGroupedSpecs, ckt::Fill::gaussian, 1e-2, 1100), 8);
    EXPECT_EQ(check_specs(*a, dt, kGroupedMmaSpecs, ckt::Fill::gaussian, 1e-2, 1200), int(std::size(kGroupedMmaSpecs)));
  }
}

// Every variant ("tile", "pipe") on every shape of the four lists it takes: bit-equal on small integers with
// every exact epilogue (the residual in place on every other one), within the bound on Gaussian data with
// every activation.
TEST(CudaGroupedMma, EveryVariantOnEveryShape) {
  const Algorithm* a = grouped_mma();
  if (a == nullptr) GTEST_SKIP() << "cuda_grouped_mma is not in this build";
  CKT_REQUIRE_USABLE(*a);
  std::vector<const char*> specs(std::begin(kGroupedMmaSpecs), std::end(kGroupedMmaSpecs));
  specs.insert(specs.end(), std::begin(kGroupedSpecs), std::end(kGroupedSpecs));
  specs.insert(specs.end(), std::begin(kGroupedPipeSpecs), std::end(kGroupedPipeSpecs));
  specs.insert(specs.end(), std::begin(kGroupedRowSpecs), std::end(kGroupedRowSpecs));
  uint32_t seed = 1500;
  int ran = 0, pipes = 0, act = 0;
  for (DType dt : {DType::bf16, DType::f16})
    for (const char* spec : specs)
      for (ckt::Fill fill : {ckt::Fill::small_ints, ckt::Fill::gaussian}) {
        const Conv2dProblem p = Conv2dProblem::parse(spec);
        const ConvConfig cfg{dt, Layout::nhwc, Device::cuda, MathMode::strict};
        if (!a->can_implement(p, cfg)) continue;
        const bool exact = fill == ckt::Fill::small_ints;
        ckt::EpilogueSpec es;
        es.bias = (seed % 3) != 0;
        es.residual = (seed % 2) == 0;
        es.residual_aliases_dst = es.residual && (seed % 4 == 0);
        // small integers: the exact activations only (none, relu, relu6)
        const Activation exact_acts[] = {Activation::none, Activation::relu, Activation::relu6};
        es.activation = exact ? exact_acts[act % 3] : static_cast<Activation>(act % 8);
        ++act;
        const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, fill);
        const std::vector<double> want = ckt::reference(c).memory_order();
        for (const std::string& v : a->variants(p, cfg)) {
          const ckt::Verdict verdict = ckt::check_variant(*a, c, v, want, exact ? 1e-5 : 1e-2, exact);
          EXPECT_TRUE(verdict.ok) << spec << " " << to_string(dt) << " variant " << v << ": " << verdict.message;
          ++ran;
          pipes += v == "pipe";
        }
      }
  EXPECT_GT(pipes, 40);
  EXPECT_GT(ran, 2 * pipes - 8);
}

// The persistent kernel's unaligned paths: x, w and y each one element off a 16-byte boundary (element
// loads for the staging, element stores for the output).
TEST(CudaGroupedMma, PipeVariantOnMisalignedOperands) {
  const Algorithm* a = grouped_mma();
  if (a == nullptr) GTEST_SKIP() << "cuda_grouped_mma is not in this build";
  CKT_REQUIRE_USABLE(*a);
  const Conv2dProblem p = Conv2dProblem::parse("n32c64h34w33k64r3s3p1g8");
  const ConvConfig cfg{DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict};
  ckt::EpilogueSpec spec;
  spec.bias = true;
  spec.activation = Activation::relu;
  const ckt::Case c = ckt::make_case(p, cfg, spec, 77, ckt::Fill::small_ints);
  const size_t off = 2;
  Buffer xs(Device::cuda, c.src.bytes.size() + off), ws(Device::cuda, c.wei.bytes.size() + off),
      bs(Device::cuda, c.bias.size() + off),
      ys(Device::cuda, size_t(p.output_elems()) * dtype_size(cfg.dtype) + off);
  auto up = [&](Buffer& b, const std::vector<unsigned char>& bytes) {
    std::vector<unsigned char> h(off, 0);
    h.insert(h.end(), bytes.begin(), bytes.end());
    b.copy_from_host(h.data(), h.size());
  };
  up(xs, c.src.bytes);
  up(ws, c.wei.bytes);
  up(bs, c.bias);
  ys.fill_bytes(0xFF);
  auto at = [&](const Buffer& b) { return static_cast<unsigned char*>(b.data()) + off; };
  const TensorView x{at(xs), cfg.dtype, cfg.layout, cfg.device, input_dims(p)};
  const TensorView w{at(ws), cfg.dtype, cfg.layout, cfg.device, weight_dims(p)};
  const TensorView y{at(ys), cfg.dtype, cfg.layout, cfg.device, output_dims(p)};
  Epilogue epi;
  epi.bias = at(bs);
  epi.activation = Activation::relu;
  RunOptions named;
  named.algo = "cuda_grouped_mma";
  named.variant = "pipe";
  conv2d(p, x, w, y, epi, named);
  device_synchronize(Device::cuda);
  ckt::HostTensor out(cfg.dtype, cfg.layout, output_dims(p));
  std::vector<unsigned char> back(out.bytes.size() + off);
  ys.copy_to_host(back.data(), back.size());
  std::copy(back.begin() + off, back.end(), out.bytes.begin());
  const ckt::Verdict v = ckt::check_output(*a, c, out, ckt::reference(c).memory_order(), 1e-5, true);
  EXPECT_TRUE(v.ok) << v.message;
}

TEST(CudaGroupedMma, RejectsWhatItCannotDoWithAReason) {
  const Algorithm* a = grouped_mma();
  if (a == nullptr) GTEST_SKIP() << "cuda_grouped_mma is not in this build";
  const ConvConfig bf16{DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict};
  const std::pair<const char*, const char*> no[] = {{"n1c32h8w8k32r3s3p1", "grouped"},
                                                    {"n1c32h8w8k32r3s3p1g32", "depthwise"},
                                                    {"n1c24h8w8k48r3s3p1g6", "K = C"},
                                                    {"n1c36h8w8k36r3s3p1g12", "2, 4 or a multiple of 8"},
                                                    {"n1c36h8w8k36r3s3p1g9", "C % 8"},
                                                    {"n1c256h8w8k256r3s3p1g2", "multiple of 8 up to 64"}};
  for (const auto& [spec, word] : no) {
    const Support s = a->can_implement(Conv2dProblem::parse(spec), bf16);
    EXPECT_FALSE(s) << spec;
    EXPECT_NE(s.reason.find(word), std::string::npos) << spec << ": " << s.reason;
  }
  const Conv2dProblem ok = Conv2dProblem::parse("n1c128h8w8k128r3s3p1g32");
  EXPECT_TRUE(a->can_implement(ok, bf16));
  EXPECT_FALSE(a->can_implement(ok, ConvConfig{DType::bf16, Layout::nchw, Device::cuda, MathMode::strict}));
  EXPECT_FALSE(a->can_implement(ok, ConvConfig{DType::f32, Layout::nhwc, Device::cuda, MathMode::strict}));
}

TEST(CudaGrouped, RejectsWhatItCannotDoWithAReason) {
  const Algorithm* a = grouped();
  if (a == nullptr) GTEST_SKIP() << "cuda_grouped is not in this build";
  const ConvConfig nhwc{DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict};
  const ConvConfig nchw{DType::bf16, Layout::nchw, Device::cuda, MathMode::strict};
  const std::pair<const char*, const char*> no[] = {{"n1c32h8w8k32r3s3p1", "grouped"},
                                                    {"n1c32h8w8k32r3s3p1g32", "depthwise"},
                                                    {"n1c256h8w8k256r3s3p1g2", "64"}};
  for (const auto& [spec, word] : no) {
    const Support s = a->can_implement(Conv2dProblem::parse(spec), nhwc);
    EXPECT_FALSE(s) << spec;
    EXPECT_NE(s.reason.find(word), std::string::npos) << spec << ": " << s.reason;
  }
  EXPECT_FALSE(a->can_implement(Conv2dProblem::parse("n1c128h8w8k128r3s3p1g32"), nchw));
  EXPECT_TRUE(a->can_implement(Conv2dProblem::parse("n1c128h8w8k128r3s3p1g32"), nhwc));
}

}  // namespace

// ---- cpu_grouped ----------------------------------------------------------------------------------
// 2 to 64 channels a group (K = C): several groups a 16-lane vector (2, 4, 8) and groups of one or more
// vectors (16, 32, 48, 64); odd sizes, stride 2 and 3, dilation 2, padding past R/2, R != S, 1x1 to 7x7, a 1x1
// image and 1xW rows, batch 1 to 3, pixel counts off its 8-pixel blocks, C off its 16-channel slices (18, 24,
// 40, 104); both layouts; bit-equal to cpu_ref on
// small integers in f32 with every exact epilogue (the residual in place on every other one), every
// activation within the f32 bound on Gaussian data, f16/bf16 within the 16-bit bound; its refusals and the
// heuristic choosing it.
namespace {

const char* kCpuGroupedSpecs[] = {
    "n2c32h13w15k32r3s3p1g16",     "n1c64h14w14k64r3s3p1u2g16",   "n2c64h9w11k64r3s3p1g8",
    "n1c128h10w10k128r3s3p1g32",   "n1c96h9w9k96r3s3p1g2",        "n2c32h7w9k32r5s5p2g4",
    "n1c16h11w11k16r7s7p3g2",      "n1c64h12w12k64r3s3p4d2g4",    "n3c32h5w5k32r1s1g2",
    "n1c48h1w19k48r1s3ph0pw1g3",   "n1c256h7w7k256r3s3p1g8",      "n1c96h9w7k96r3s3p1u3g2",
    "n1c64h1w1k64r3s3p1g4",        "n1c128h6w17k128r3s3p1g2",     "n2c192h5w5k192r3s1ph1pw0g4",
    // whole 16 x 16 transposes (W and a unit's pixels multiples of 16) and their remainders, tall images in
    // units of several rows whose input bands overlap, stride 2 with dilation and padding past R/2
    "n2c32h33w32k32r3s3p1g8",      "n1c64h40w20k64r3s3p3d2u2g16", "n3c48h21w48k48r5s5p2g3",
    // C off the 16-channel slices: the last slice partly past C (RegNet's 104 channels, 8 a group)
    "n1c24h9w11k24r3s3p1g3",       "n2c40h7w17k40r3s3p1u2g10",     "n1c104h10w10k104r3s3p1g13",
    "n1c18h8w8k18r3s3p1g9",
    // 16-64 channels a group at 3 taps a row, stride 1 along W: rows in blocks of 1-8 pixels, one row or two
    // at a time (odd row counts), one slice or two of a group, padding 0 to past R/2, stride 2 and dilation 2
    // down the rows only, R of 1 and 5
    "n2c64h9w13k64r3s3p1g4",       "n1c64h7w7k64r3s3p1g2",         "n1c96h6w22k96r3s3p0g2",
    "n2c128h5w17k128r3s3p2g2",     "n1c32h11w9k32r3s3p1uh2dh2g2",  "n1c64h4w1k64r3s3p1g4",
    "n1c32h3w10k32r5s3ph2pw1g2",   "n1c32h6w9k32r1s3ph0pw1g2"};

const Algorithm* cpu_grouped() { return find_algorithm("cpu_grouped"); }

int check_cpu_grouped(DType dt, Layout l, ckt::Fill fill, double bound, uint32_t seed) {
  int ran = 0, act = 0;
  for (const char* spec : kCpuGroupedSpecs) {
    const Conv2dProblem p = Conv2dProblem::parse(spec);
    const ConvConfig cfg{dt, l, Device::cpu, MathMode::strict};
    if (!cpu_grouped()->can_implement(p, cfg)) continue;
    for (int rep = 0; rep < 2; ++rep) {
      const ckt::EpilogueSpec es = ckt::varied_epilogue(seed, act++, fill == ckt::Fill::small_ints);
      const ckt::Case c = ckt::make_case(p, cfg, es, ++seed, fill);
      const ckt::Verdict v = ckt::check_against_reference(*cpu_grouped(), c, bound, fill == ckt::Fill::small_ints);
      EXPECT_TRUE(v.ok) << spec << " " << to_string(l) << " " << to_string(dt) << ": " << v.message;
      ++ran;
    }
  }
  return ran;
}

TEST(CpuGrouped, BitEqualToReferenceOnSmallIntegersF32) {
  ASSERT_NE(cpu_grouped(), nullptr);
  for (Layout l : {Layout::nhwc, Layout::nchw})
    EXPECT_EQ(check_cpu_grouped(DType::f32, l, ckt::Fill::small_ints, 1e-5, 100), 2 * int(std::size(kCpuGroupedSpecs)));
}

TEST(CpuGrouped, GaussianWithinBoundEveryActivationEveryDtype) {
  ASSERT_NE(cpu_grouped(), nullptr);
  for (Layout l : {Layout::nhwc, Layout::nchw}) {
    EXPECT_GE(check_cpu_grouped(DType::f32, l, ckt::Fill::gaussian, 1e-5, 200), 20);
    for (DType dt : {DType::f16, DType::bf16}) {
      EXPECT_GE(check_cpu_grouped(dt, l, ckt::Fill::gaussian, 1e-2, 300), 20);
      EXPECT_GE(check_cpu_grouped(dt, l, ckt::Fill::small_ints, 1e-5, 400), 20);
    }
  }
}

TEST(CpuGrouped, RefusesWhatItHasNoKernelFor) {
  ASSERT_NE(cpu_grouped(), nullptr);
  const ConvConfig cfg{DType::f32, Layout::nhwc, Device::cpu, MathMode::strict};
  for (const char* spec : {"n1c32h8w8k32r3s3p1",            // not grouped
                           "n1c32h8w8k32r3s3p1g32",         // depthwise
                           "n1c32h8w8k64r3s3p1g8",          // K != C
                           "n1c36h8w8k36r3s3p1g12",         // 3 channels a group
                           "n1c40h8w8k40r3s3p1g2"}) {       // 20 channels a group
    const Support s = cpu_grouped()->can_implement(Conv2dProblem::parse(spec), cfg);
    EXPECT_FALSE(s) << spec;
    EXPECT_FALSE(s.reason.empty()) << spec;
  }
  ConvConfig tf = cfg;
  tf.math = MathMode::tf32;
  EXPECT_FALSE(cpu_grouped()->can_implement(Conv2dProblem::parse("n1c32h8w8k32r3s3p1g4"), tf));
}

TEST(CpuGrouped, TheHeuristicChoosesItForGroupedLayersWithKEqualToC) {
  for (Layout l : {Layout::nhwc, Layout::nchw})
    for (DType dt : {DType::f32, DType::bf16}) {
      const ConvConfig cfg{dt, l, Device::cpu, MathMode::strict};
      for (const char* spec : {"n1c128h56w56k128r3s3p1g32", "n1c256h28w28k256r3s3p1u2g32", "n1c256h28w28k256r3s3p1g32",
                               "n1c512h14w14k512r3s3p1g32", "n1c1024h7w7k1024r3s3p1g32"})
        EXPECT_EQ(select(Conv2dProblem::parse(spec), cfg).name(), "cpu_grouped") << spec << " " << to_string(l);
      // 64 channels a group: the GEMM a group for bfloat16 NHWC on a CPU with the bfloat16 dot product
      const bool gemm = l == Layout::nhwc && dt == DType::bf16 && cpu_bf16_native();
      EXPECT_EQ(select(Conv2dProblem::parse("n1c256h14w14k256r3s3p1g4"), cfg).name() == "cpu_grouped", !gemm)
          << to_string(l) << " " << to_string(dt);
      // K != C, and 12 channels a group: the GEMM a group
      EXPECT_NE(select(Conv2dProblem::parse("n1c64h14w14k128r3s3p1g16"), cfg).name(), "cpu_grouped") << to_string(l);
      EXPECT_NE(select(Conv2dProblem::parse("n1c96h14w14k96r3s3p1g8"), cfg).name(), "cpu_grouped") << to_string(l);
    }
}

}  // namespace
