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
//   TensorCoreOracle.*      (CPU only) cpu_ref's rounding, the exactness of the integer cases, and the
//                           checker's bounds against emulated tensor-core arithmetic and injected faults
//   TensorCoreHarness.*     (CPU only) the sweeps above, run on a host emulation of a tensor-core kernel:
//                           the correct one passes everything, each injected classic bug is caught
//   TensorCoreDiscovery.*   which algorithm accepts which configuration; CONVKIT_REQUIRE_ALGOS is enforced
//   TensorCoreRejections.*  NCHW and strict fp32 are refused with a reason, and run() throws convkit::Error
//   TensorCoreHuge.*        an f16 NHWC problem past 2^31 elements (input and output), sampled exactly
//
// Environment: CONVKIT_REQUIRE_GPU=1 turns "no GPU" into a failure; CONVKIT_REQUIRE_ALGOS=a,b makes a named
// algorithm that is missing, unavailable, or (for a tensor-core algorithm) rejects a whole configuration a
// failure; CONVKIT_TEST_VERBOSE=1 names every run before it starts (to find a crashing one).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "common/activation.hpp"
#include "cpu/ref_conv.hpp"
#include "test_util.hpp"

using namespace convkit;
using ckt::Case;
using ckt::EpilogueSpec;
using ckt::Fill;
using ckt::HostTensor;

namespace {

// ---- the three configurations -------------------------------------------------------------------

struct TcConfig {
  const char* name;
  ConvConfig cfg;  // device is filled in per algorithm
};

const TcConfig kConfigs[] = {
    {"f16", {DType::f16, Layout::nhwc, Device::cuda, MathMode::strict}},
    {"bf16", {DType::bf16, Layout::nhwc, Device::cuda, MathMode::strict}},
    {"tf32", {DType::f32, Layout::nhwc, Device::cuda, MathMode::tf32}},
};
constexpr int kNumConfigs = 3;

ConvConfig on_device(ConvConfig c, Device d) {
  c.device = d;
  return c;
}

// ---- bounds, each with its reason ---------------------------------------------------------------

// rel L2 = ||out - ref|| / ||ref|| (DESIGN.md "Correctness policy").
double rel_l2_bound(const ConvConfig& cfg) {
  // f16/bf16: the inputs are already f16/bf16 (the reference reads the same values), products of two
  // 16-bit values are exact in fp32 and the sum is fp32, so the error is the single rounding of the
  // output: 2^-11 relative for f16 (about 1.4e-4 RMS) and 2^-8 for bf16 (about 1.1e-3 RMS, 3.9e-3 at
  // worst). 1e-2 is the documented bound and leaves room above bf16's worst case.
  if (cfg.dtype == DType::f16 || cfg.dtype == DType::bf16) return 1e-2;
  // tf32: each operand keeps a 10-bit mantissa, at most 2^-11 relative when rounded to nearest, so a
  // product is off by at most ~2^-10 and about 4e-4 RMS, and the errors of the sum scale like the sum
  // itself: rel L2 ~ 3e-4 (the host emulation in TensorCoreOracle measures 2.7e-4 to 3.1e-4), 1e-3 leaves
  // 3x. Truncated operands measure ~7.7e-4, inside this bound: Tf32OperandsRoundedToNearest catches them.
  return 1e-3;
}

// Unit roundoff of the output dtype (half an ulp, relative).
double unit_roundoff(DType t) {
  switch (t) {
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::f32: return std::ldexp(1.0, -24);
  }
  return 1;
}

// The per-element bound, a sanity net under rel L2 (which dilutes one wrong element in a large output):
//   |out_i - ref_i| <= 2 * (u_out*|ref_i| + (e_op + e_acc)*A_i + e_act*A_i) + floor
// A_i = |alpha|*sum|x||w| + |bias| + |beta||residual| is the same sum over absolute values (computed by
// cpu_ref on |data|), which bounds every intermediate of the element;
//   u_out:  the one rounding of the output;
//   e_op:   tf32 operands, each within 2^-10 of its fp32 value even if truncated: 2*2^-10 per product
//           (0 for f16/bf16, whose products are exact in fp32);
//   e_acc:  fp32 summation, at most gemm_k*2^-24 in any order (Higham's gamma_n), plus the epilogue's
//           few fp32 operations;
//   e_act:  silu/gelu evaluated in fp32 (their slope is at most 1.13, covered by the factor 2; 2^-18
//           covers exp/erf's own error and the cancellation in 1+erf for very negative inputs);
//   floor:  the f16 subnormal spacing (2^-24) and a hair of the output's scale.
// A peer (cuDNN) may round the convolution before a separate epilogue kernel: twice u_out on A_i, x4.
struct ElementBound {
  double u_out, e_op, e_acc, e_act, factor;
  bool peer;
  double tol(double ref, double a, double abs_floor) const {
    if (peer) return factor * (2 * u_out + e_op + e_acc + e_act) * a + abs_floor;
    return factor * (u_out * std::fabs(ref) + (e_op + e_acc + e_act) * a) + abs_floor;
  }
};

ElementBound element_bound(const Algorithm& a, const Case& c) {
  ElementBound b;
  b.peer = a.is_peer();
  b.u_out = unit_roundoff(c.config.dtype);
  b.e_op = c.config.math == MathMode::tf32 ? 2 * std::ldexp(1.0, -10) : 0.0;
  b.e_acc = double(c.problem.gemm_k() + 4) * std::ldexp(1.0, -24);
  b.e_act = (c.epi.activation == Activation::silu || c.epi.activation == Activation::gelu) ? std::ldexp(1.0, -18) : 0;
  b.factor = b.peer ? 4 : 2;
  return b;
}

// ---- cases --------------------------------------------------------------------------------------

enum class Data { gaussian, ints, positive_ints };

// The case with its reference (memory order) and, for bounded checks, the absolute-value reference A.
struct TcCase {
  std::string what;  // why this problem is in the set
  Data data = Data::gaussian;
  Case c;
  // The tf32 rounding cases: the reference is computed from src and wei rounded to tf32 (to nearest), the
  // kernel gets the unrounded values.
  bool reference_from_tf32_operands = false;
  bool have_ref = false, have_abs = false;
  std::vector<double> ref, abs;

  std::string describe(const std::string& variant = {}) const {
    std::ostringstream o;
    o << c.problem.to_string() << " (" << what << ") " << c.config.to_string() << " " << c.epi.to_string()
      << " seed=" << c.seed
      << (data == Data::gaussian ? " gaussian" : data == Data::ints ? " small-ints" : " positive-small-ints")
      << " variant='" << variant << "'  [repro: convkit bench --problem " << c.problem.to_string()
      << " --layout nhwc --dtype " << to_string(c.config.dtype)
      << (c.config.math == MathMode::tf32 ? " --math tf32" : "") << "]";
    return o.str();
  }
};

// Logical values for a tensor of `n` elements.
std::vector<double> values(Data d, size_t n, std::mt19937& rng, int int_max) {
  switch (d) {
    case Data::gaussian: return ckt::gaussian(n, rng);
    case Data::ints: return ckt::small_ints(n, rng, -int_max, int_max);
    case Data::positive_ints: return ckt::small_ints(n, rng, 0, 3);
  }
  return {};
}

// Integers in [-3, 3] while the filter is short, [-2, 2] for long reductions (keeps every f16 output
// finite: |sum| <= gemm_k * 4 <= 18432 for the deepest problem here, far below 65504). Positive data is
// always [0, 3] (its problems are chosen with gemm_k * 9 well below 65504/2).
int int_max_for(const Conv2dProblem& p) { return p.gemm_k() <= 600 ? 3 : 2; }

TcCase make_tc_case(const std::string& what, const Conv2dProblem& p, const ConvConfig& cfg, const EpilogueSpec& epi,
                    uint32_t seed, Data data) {
  TcCase t;
  t.what = what;
  t.data = data;
  Case& c = t.c;
  c.problem = p;
  c.config = cfg;
  c.config.device = Device::cpu;
  c.epi = epi;
  c.seed = seed;
  c.fill = data == Data::gaussian ? Fill::gaussian : Fill::small_ints;
  std::mt19937 rng(seed);
  const int im = int_max_for(p);
  c.src = HostTensor(cfg.dtype, cfg.layout, input_dims(p));
  c.src.fill_logical(values(data, size_t(c.src.numel()), rng, im));
  c.wei = HostTensor(cfg.dtype, cfg.layout, weight_dims(p));
  c.wei.fill_logical(values(data, size_t(c.wei.numel()), rng, im));
  // Bias and residual: small integers for the integer cases, Gaussian otherwise (always signed).
  const Data side = data == Data::gaussian ? Data::gaussian : Data::ints;
  if (epi.bias) {
    const auto b = values(side, size_t(p.k), rng, 3);
    c.bias.assign(size_t(p.k) * dtype_size(cfg.dtype), 0);
    for (int64_t i = 0; i < p.k; ++i) detail::store_from_double(c.bias.data(), cfg.dtype, i, b[size_t(i)]);
  }
  if (epi.residual) {
    c.residual = HostTensor(cfg.dtype, cfg.layout, output_dims(p));
    c.residual.fill_logical(values(side, size_t(c.residual.numel()), rng, 3));
  }
  return t;
}

// cpu_ref's output for the case (memory order). cpu_ref has no tf32 mode: it computes the tf32 cases from
// the same fp32 values in double (the exact answer tf32 approximates).
// An fp32 value rounded to tf32 (10 mantissa bits), to nearest, ties to even.
float round_to_tf32(float f) {
  uint32_t u = detail::float_to_bits(f);
  u += 0xFFFu + ((u >> 13) & 1u);
  return detail::bits_to_float(u & ~0x1FFFu);
}

void round_tensor_to_tf32(HostTensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    float* f = reinterpret_cast<float*>(t.bytes.data()) + i;
    *f = round_to_tf32(*f);
  }
}

const std::vector<double>& reference(TcCase& t) {
  if (!t.have_ref) {
    Case c = t.c;
    c.config.math = MathMode::strict;
    if (t.reference_from_tf32_operands) {
      round_tensor_to_tf32(c.src);
      round_tensor_to_tf32(c.wei);
    }
    t.ref = ckt::run_case(ckt::cpu_ref(), c).memory_order();
    t.have_ref = true;
  }
  return t.ref;
}

// Clears the sign bit of every element: |x| exactly, in any float dtype.
void abs_in_place(std::vector<unsigned char>& bytes, DType t) {
  if (t == DType::f32) {
    for (size_t i = 3; i < bytes.size(); i += 4) bytes[i] &= 0x7F;
  } else {
    for (size_t i = 1; i < bytes.size(); i += 2) bytes[i] &= 0x7F;
  }
}

// A_i (see ElementBound): cpu_ref on |x|, |w|, |bias|, |residual| with |alpha|, |beta| and no activation.
const std::vector<double>& abs_reference(TcCase& t) {
  if (!t.have_abs) {
    Case c = t.c;
    c.config.math = MathMode::strict;
    abs_in_place(c.src.bytes, c.src.dtype);
    abs_in_place(c.wei.bytes, c.wei.dtype);
    abs_in_place(c.bias, c.config.dtype);
    abs_in_place(c.residual.bytes, c.config.dtype);
    c.epi.activation = Activation::none;
    c.epi.alpha = std::fabs(c.epi.alpha);
    c.epi.beta = std::fabs(c.epi.beta);
    c.epi.residual_aliases_dst = false;
    t.abs = ckt::run_case(ckt::cpu_ref(), c).memory_order();
    t.have_abs = true;
  }
  return t.abs;
}

// ---- problem sets -------------------------------------------------------------------------------

struct Shape {
  const char* what;
  const char* spec;
};

// The main set: every shape the brief lists, plus a few that cross tile edges. About 360 M multiply-adds
// in all (cpu_ref needs about 0.3 s per configuration and data set on 16 cores).
const std::vector<Shape>& main_shapes() {
  static const std::vector<Shape> v = {
      {"C=3, odd spatial", "n2c3h17w17k8r3s3p1"},
      {"C=5, K=7, odd H and W", "n1c5h11w13k7r3s3p1"},
      {"C=12: a multiple of 4, not of 8", "n1c12h9w10k16r3s3p1"},
      {"C=20, K=24: C %4 not %8, past 16", "n2c20h7w7k24r3s3p1"},
      {"stride 2, odd input", "n1c16h15w13k24r3s3p1u2"},
      {"dilation 2", "n1c16h14w14k16r3s3p2d2"},
      {"dilation 2 and stride 2", "n1c8h19w19k16r3s3p2u2d2"},
      {"1x1", "n2c32h15w15k48r1s1"},
      {"1x1 stride 2", "n1c64h13w13k32r1s1u2"},
      {"7x7 stride 2 stem, C=3", "n2c3h37w37k64r7s7p3u2"},
      {"batch 1, padding larger than R/2", "n1c8h8w8k16r3s3p3"},
      {"input smaller than the filter, padded", "n1c8h2w3k8r5s5p2"},
      {"K=65: one past a 64 tile", "n1c32h9w9k65r3s3p1"},
      {"K=7 with C=64", "n1c64h8w8k7r3s3p1"},
      {"groups 2, C/g=16", "n1c32h10w10k32r3s3p1g2"},
      {"groups 2, C/g=12, K/g=18 (not %8)", "n1c24h9w9k36r3s3p1g2"},
      {"groups 4, C/g=K/g=8", "n2c32h8w8k32r3s3p1g4"},
      {"groups 3, C/g=4", "n1c12h8w8k12r3s3p1g3"},
      {"depthwise", "n1c32h12w12k32r3s3p1g32"},
      {"asymmetric 3x5, pads and strides", "n1c16h11w9k24r3s5ph1pw2uh2uw1"},
      {"1x7", "n1c16h12w12k16r1s7ph0pw3"},
      {"M=9: less than one tile", "n1c16h3w3k16r3s3p1"},
      {"M=16, gemm_k=2304: split-K", "n1c256h4w4k32r3s3p1"},
      {"late ResNet 3x3, wants split-K", "n2c512h7w7k512r3s3p1"},
      {"late ResNet 1x1, small N", "n1c1024h14w14k256r1s1"},
      {"deep k: C=256, 3x3", "n1c256h14w14k64r3s3p1"},
      {"M=363, K=200: neither a multiple of 128", "n3c40h11w11k200r3s3p1"},
      {"M=225, K=96", "n1c64h15w15k96r3s3p1"},
      {"M=784: several 128 tiles", "n1c64h28w28k64r3s3p1"},
      {"batch 4", "n4c16h6w6k32r3s3p1"},
      // C/groups a multiple of 64: cuda_igemm_wgmma loads these by the TMA's im2col mode (tiles cross
      // images; the pixel box's corners come from padding, stride and the output size).
      {"C=64, dilation 2 and stride 2", "n2c64h13w11k32r3s3p2u2d2"},
      {"C=64, asymmetric 3x5, pads and strides", "n1c64h11w9k24r3s5ph1pw2uh2uw1"},
      {"C=64, padding larger than R/2, batch 3", "n3c64h6w7k16r3s3p3"},
      {"C=64, input smaller than the filter", "n2c64h2w3k8r5s5p2"},
      {"C=128, groups 2 (C/g=64)", "n2c128h7w9k64r3s3p1g2"},
      {"C=64, 7x7 stride 2", "n1c64h19w17k32r7s7p3u2"},
      {"C=64, 1x7", "n1c64h6w12k16r1s7ph0pw3"},
      {"C=64, 1x1 with padding", "n2c64h5w5k16r1s1p1"},
      {"C=64, stride 3, more images than a tile holds", "n9c64h5w6k24r3s3p1u3"},
      {"C=64, one output pixel per image (a one-point pixel box)", "n3c64h3w3k16r3s3"},
      {"C=64, a 1x1 image padded to 3x3", "n2c64h1w1k8r3s3p1"},
      // Stride 1, C % 64: cuda_conv_wgmma_halo takes these too (one halo of input rows per 128 output
      // pixels; units of 64 pixels that stop at each image's end; the filter bank resident).
      {"C=64, 56-wide rows, an image's last unit partial", "n2c64h9w56k64r3s3p1"},
      {"C=64, K=72 (two channel blocks), odd 13x11, 3 images", "n3c64h13w11k72r3s3p1"},
      {"C=128, 3x3: two channel slices per halo", "n1c128h9w9k16r3s3p1"},
      {"C=64, W=120: one halo stage fits, not two", "n1c64h5w120k16r3s3p1"},
      {"C=64, 3x3 unpadded", "n2c64h9w10k24r3s3"},
      {"C=640, 1x1: ten channel slices", "n1c640h7w7k32r1s1"},
      {"C=64, 7x7 images: one partial unit per image", "n5c64h7w7k64r3s3p1"},
      {"C=128, 1x1, K=136: three channel blocks", "n2c128h12w9k136r1s1"},
  };
  return v;
}

// Positive integers make most outputs large: bf16 outputs past 256 and f16 outputs past 2048 then
// really round (ties included), and the kernels must round exactly like cpu_ref.
const std::vector<Shape>& rounding_shapes() {
  static const std::vector<Shape> v = {
      {"positive ints: bf16 outputs > 256 round", "n1c64h10w10k32r3s3p1"},
      {"positive ints, 1x1 C=1024: f16 outputs > 2048 round", "n1c1024h3w5k40r1s1"},
      {"positive ints, split-K: f16 outputs > 2048 round", "n1c256h4w4k24r3s3p1"},
  };
  return v;
}

// A few tiny shapes for compute-sanitizer (and for the poison and alignment tests).
const std::vector<Shape>& quick_shapes() {
  static const std::vector<Shape> v = {
      {"C=3", "n1c3h9w9k8r3s3p1"},
      {"C=12, stride 2", "n1c12h7w7k16r3s3p1u2"},
      {"C=5, K=7, 1x1", "n1c5h5w7k7r1s1"},
      {"groups 2, C/g=8", "n1c16h8w8k24r3s3p1g2"},
      {"split-K", "n1c256h4w4k32r3s3p1"},
      {"dilation 2 stride 2", "n1c8h19w19k16r3s3p2u2d2"},
      {"K=65", "n2c16h5w5k65r3s3p1"},
      {"C=64, stride 2, padded (im2col TMA)", "n2c64h7w6k16r3s3p2u2"},
      {"C=64, stride 1, K=72 (the halo kernel)", "n2c64h9w10k72r3s3p1"},
      {"C=128, 1x1, K=136, M=320: 6-9 tiles (a persistent block walks them)", "n1c128h16w20k136r1s1"},
  };
  return v;
}

// Shapes whose channels allow 16-byte vector paths when aligned (used with misaligned pointers).
const std::vector<Shape>& aligned_channel_shapes() {
  static const std::vector<Shape> v = {
      {"C=K=16", "n1c16h9w9k16r3s3p1"},
      {"C=64, K=32, 1x1", "n1c64h7w7k32r1s1"},
      {"split-K", "n1c256h4w4k32r3s3p1"},
  };
  return v;
}

// ---- epilogues ----------------------------------------------------------------------------------

EpilogueSpec epi(bool bias, bool residual, bool in_place, Activation act, float alpha = 1.0f, float beta = 1.0f) {
  EpilogueSpec e;
  e.bias = bias;
  e.residual = residual;
  e.residual_aliases_dst = residual && in_place;
  e.activation = act;
  e.alpha = alpha;
  e.beta = beta;
  return e;
}

// Exact with integer data: integer bias and residual, relu, and alpha/beta powers of two or small integers.
const std::vector<EpilogueSpec>& exact_epilogues() {
  static const std::vector<EpilogueSpec> v = {
      epi(false, false, false, Activation::none),
      epi(true, false, false, Activation::none),
      epi(true, false, false, Activation::relu),
      epi(false, true, false, Activation::none),
      epi(true, true, true, Activation::relu),
      epi(false, true, false, Activation::none, 2.0f, -1.0f),
      epi(false, true, true, Activation::none),
      epi(true, true, false, Activation::relu, 1.0f, 2.0f),
  };
  return v;
}

// Every epilogue, for Gaussian data (silu and gelu are never exact).
const std::vector<EpilogueSpec>& all_epilogues() {
  static const std::vector<EpilogueSpec> v = {
      epi(true, false, false, Activation::none),
      epi(false, false, false, Activation::relu),
      epi(true, false, false, Activation::relu),
      epi(true, false, false, Activation::silu),
      epi(true, false, false, Activation::gelu),
      epi(false, false, false, Activation::gelu),
      epi(false, true, false, Activation::none),
      epi(false, true, true, Activation::none),
      epi(true, true, true, Activation::relu, 0.5f, -1.5f),
      epi(false, false, false, Activation::none, 1.75f),
      epi(true, true, false, Activation::gelu, -0.5f, 2.5f),
      epi(false, true, true, Activation::silu, 1.0f, 0.25f),
      epi(true, true, false, Activation::none, 1.0f, 0.0f),
      epi(true, true, true, Activation::silu, -1.25f, 0.75f),
  };
  return v;
}

const std::vector<Shape>& epilogue_shapes() {
  static const std::vector<Shape> v = {
      {"C=12", "n1c12h9w9k16r3s3p1"},
      {"K=72: not a multiple of 64", "n2c64h7w7k72r3s3p1"},
      {"split-K with an epilogue", "n1c256h4w4k32r3s3p1"},
  };
  return v;
}

// ---- the case sets, built once per process and configuration ------------------------------------

enum class Set {
  exact, gaussian, epilogue_exact, epilogue_gaussian, quick_exact, quick_gaussian, poison, misaligned, tf32_rounding
};

// Values just off the tf32 grid: s * 2^e * (1 + a*2^-10 + f*2^-12), f in {1, 3}: a quarter of a tf32 ulp
// above a tf32 value (to nearest: down) or three quarters (to nearest: up; truncation: down). Never a tie,
// so ties-to-even and ties-away agree.
std::vector<double> off_tf32_grid(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> sign(0, 1), e(-1, 1), a(0, 1023), f(0, 1);
  std::vector<double> v(n);
  for (auto& x : v)
    x = (sign(rng) ? -1.0 : 1.0) * std::ldexp(1.0 + a(rng) * std::ldexp(1.0, -10) + (f(rng) ? 3 : 1) * std::ldexp(1.0, -12), e(rng));
  return v;
}

// One operand off the tf32 grid (|x| < 4), the other small integers (|w| <= 3), 144 or 108 terms: every
// product of the rounded operands is a multiple of 2^-11 below 12 and every sum below 2^11, so the fp32
// sums of the rounded operands are exact, and the result differs if an operand is truncated or not rounded.
void add_tf32_rounding_cases(std::deque<TcCase>& out, uint32_t& seed) {
  const ConvConfig cfg = kConfigs[2].cfg;
  for (int which = 0; which < 2; ++which) {
    const char* spec = which == 0 ? "n1c16h6w6k8r3s3p1" : "n1c12h7w7k16r3s3p1";
    TcCase t = make_tc_case(which == 0 ? "activations off the tf32 grid" : "weights off the tf32 grid",
                            Conv2dProblem::parse(spec), cfg, epi(true, false, false, Activation::none), seed, Data::ints);
    std::mt19937 rng(seed++);
    HostTensor& off = which == 0 ? t.c.src : t.c.wei;
    off.fill_logical(off_tf32_grid(size_t(off.numel()), rng));
    t.reference_from_tf32_operands = true;
    out.push_back(std::move(t));
  }
}

std::deque<TcCase> build_set(Set s, int ci) {
  const ConvConfig cfg = kConfigs[ci].cfg;
  std::deque<TcCase> out;
  uint32_t seed = 20000u + uint32_t(ci) * 1000u + uint32_t(s) * 100000u;
  auto add = [&](const Shape& sh, const EpilogueSpec& e, Data d) {
    out.push_back(make_tc_case(sh.what, Conv2dProblem::parse(sh.spec), cfg, e, seed++, d));
  };
  const auto& ex = exact_epilogues();
  const auto& all = all_epilogues();
  switch (s) {
    case Set::exact:
      for (size_t i = 0; i < main_shapes().size(); ++i)
        add(main_shapes()[i], ex[(i + 3 * size_t(ci)) % ex.size()], Data::ints);
      for (size_t i = 0; i < rounding_shapes().size(); ++i)
        add(rounding_shapes()[i], ex[(2 * i + size_t(ci)) % ex.size()], Data::positive_ints);
      break;
    case Set::gaussian: {
      const EpilogueSpec rot[] = {epi(true, false, false, Activation::none), epi(false, false, false, Activation::none),
                                  epi(true, false, false, Activation::relu), epi(false, true, true, Activation::none),
                                  epi(true, false, false, Activation::silu),
                                  epi(false, true, false, Activation::gelu, 0.5f, -1.5f)};
      for (size_t i = 0; i < main_shapes().size(); ++i) add(main_shapes()[i], rot[(i + size_t(ci)) % 6], Data::gaussian);
      break;
    }
    case Set::epilogue_exact:
      for (const Shape& sh : epilogue_shapes())
        for (const EpilogueSpec& e : ex) add(sh, e, Data::ints);
      break;
    case Set::epilogue_gaussian:
      for (const Shape& sh : epilogue_shapes())
        for (const EpilogueSpec& e : all) add(sh, e, Data::gaussian);
      break;
    case Set::quick_exact:
      for (const Shape& sh : quick_shapes()) add(sh, epi(true, true, true, Activation::relu), Data::ints);
      // and the short epilogue (cuda_igemm_wgmma's persistent tiles store it by TMA)
      add(quick_shapes().back(), epi(true, false, false, Activation::relu), Data::ints);
      break;
    case Set::quick_gaussian:
      for (const Shape& sh : quick_shapes()) add(sh, epi(true, true, false, Activation::silu, 1.0f, 0.5f), Data::gaussian);
      break;
    case Set::poison:  // no in-place residual: the output must start as the poison
      for (const Shape& sh : quick_shapes()) add(sh, epi(true, true, false, Activation::relu), Data::ints);
      break;
    case Set::misaligned:
      for (const Shape& sh : aligned_channel_shapes()) add(sh, epi(true, true, false, Activation::relu), Data::ints);
      for (const Shape& sh : aligned_channel_shapes()) add(sh, epi(true, true, true, Activation::none), Data::ints);
      break;
    case Set::tf32_rounding:
      if (cfg.math == MathMode::tf32) add_tf32_rounding_cases(out, seed);
      break;
  }
  return out;
}

std::deque<TcCase>& cases(Set s, int ci) {
  static std::map<std::pair<int, int>, std::deque<TcCase>> all;
  const auto key = std::make_pair(int(s), ci);
  auto it = all.find(key);
  if (it == all.end()) it = all.emplace(key, build_set(s, ci)).first;
  return it->second;
}

// ---- running one algorithm on one case, every variant -------------------------------------------

// The operands of one case on the algorithm's device, uploaded once; run() makes a fresh output (poisoned,
// or holding the residual when it aliases dst) and a poisoned workspace of exactly the variant's size.
// With `misalign`, every tensor starts one element past its allocation (off any 16-byte boundary) and
// ends at the allocation's end, so an out-of-bounds access still shows under compute-sanitizer.
class DeviceCase {
 public:
  DeviceCase(Device dev, const Case& c, bool misalign = false) : dev_(dev), c_(c) {
    off_ = misalign ? dtype_size(c.config.dtype) : 0;
    src_ = upload(c.src.bytes.data(), c.src.bytes.size());
    wei_ = upload(c.wei.bytes.data(), c.wei.bytes.size());
    if (!c.bias.empty()) bias_ = upload(c.bias.data(), c.bias.size());
    if (c.epi.residual && !c.epi.residual_aliases_dst) res_ = upload(c.residual.bytes.data(), c.residual.bytes.size());
  }

  // ws_variant: whose workspace size to allocate (default: `variant`'s own).
  HostTensor run(const Algorithm& a, const std::string& variant, unsigned char poison, bool prepare = false,
                 const std::string* ws_variant = nullptr) const {
    const Conv2dProblem& p = c_.problem;
    ConvConfig cfg = c_.config;
    cfg.device = dev_;
    HostTensor out(cfg.dtype, cfg.layout, output_dims(p));
    Buffer dst(dev_, out.bytes.size() + off_);
    if (c_.epi.residual && c_.epi.residual_aliases_dst) {
      std::vector<unsigned char> init(off_, 0);
      init.insert(init.end(), c_.residual.bytes.begin(), c_.residual.bytes.end());
      dst.copy_from_host(init.data(), init.size());
    } else {
      dst.fill_bytes(poison);
    }
    const std::string& wv = ws_variant ? *ws_variant : variant;
    const size_t ws_bytes = wv.empty() ? a.workspace_bytes(p, cfg) : a.variant_workspace_bytes(p, cfg, wv);
    Buffer ws(dev_, ws_bytes);
    ws.fill_bytes(0xFF);

    ConvCall call;
    call.problem = p;
    call.config = cfg;
    call.src = TensorView{at(src_), cfg.dtype, cfg.layout, dev_, input_dims(p)};
    call.wei = TensorView{at(wei_), cfg.dtype, cfg.layout, dev_, weight_dims(p)};
    call.dst = TensorView{at(dst), cfg.dtype, cfg.layout, dev_, output_dims(p)};
    call.epilogue.bias = c_.bias.empty() ? nullptr : at(bias_);
    call.epilogue.residual =
        !c_.epi.residual ? nullptr : (c_.epi.residual_aliases_dst ? at(dst) : static_cast<const void*>(at(res_)));
    call.epilogue.activation = c_.epi.activation;
    call.epilogue.alpha = c_.epi.alpha;
    call.epilogue.beta = c_.epi.beta;
    call.workspace = ws.data();
    call.workspace_bytes = ws_bytes;
    call.variant = variant;
    if (prepare) a.prepare(call);
    a.run(call);
    device_synchronize(dev_);
    std::vector<unsigned char> back(out.bytes.size() + off_);
    dst.copy_to_host(back.data(), back.size());
    std::copy(back.begin() + std::ptrdiff_t(off_), back.end(), out.bytes.begin());
    return out;
  }

 private:
  Buffer upload(const void* host, size_t bytes) const {
    Buffer b(dev_, bytes + off_);
    std::vector<unsigned char> tmp(off_, 0);
    tmp.insert(tmp.end(), static_cast<const unsigned char*>(host), static_cast<const unsigned char*>(host) + bytes);
    b.copy_from_host(tmp.data(), tmp.size());
    return b;
  }
  void* at(const Buffer& b) const { return b.data() ? static_cast<unsigned char*>(b.data()) + off_ : nullptr; }

  Device dev_;
  const Case& c_;
  size_t off_ = 0;
  Buffer src_, wei_, bias_, res_;
};

// ---- checking -----------------------------------------------------------------------------------

struct Tally {
  int problems = 0, runs = 0, rejected = 0, failed = 0;
  std::string first_reason;
  bool quiet = false;  // collect the messages instead of failing the test (the harness self-test)
  std::vector<std::string> messages;
  void fail(const std::string& msg) {
    if (quiet) messages.push_back(msg);
    else if (failed < 12) ADD_FAILURE() << msg;
    ++failed;
  }
};

// A "no" from can_implement: a non-empty one-line sentence ending in '.'.
void expect_good_reason(const Algorithm& a, const Support& s, const std::string& what) {
  EXPECT_FALSE(s.reason.empty()) << a.name() << " rejected " << what << " without a reason";
  EXPECT_EQ(s.reason.find('\n'), std::string::npos) << a.name() << " on " << what << ": one line: " << s.reason;
  if (!s.reason.empty()) {
    EXPECT_EQ(s.reason.back(), '.') << a.name() << " on " << what << ": one sentence ending in '.': " << s.reason;
  }
}

// The element-wise bound (ElementBound); empty when every element is within it.
std::string check_elements(const Algorithm& a, const TcCase& t, const HostTensor& out, const std::vector<double>& ref,
                           const std::vector<double>& abs) {
  const ElementBound b = element_bound(a, t.c);
  double ref2 = 0;
  for (double r : ref) ref2 += r * r;
  const double abs_floor = std::ldexp(1.0, -24) + 1e-7 * std::sqrt(ref2 / double(std::max<size_t>(1, ref.size())));
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double got = detail::load_as_double(out.bytes.data(), out.dtype, i);
    const double tol = b.tol(ref[size_t(i)], abs[size_t(i)], abs_floor);
    const double err = std::fabs(got - ref[size_t(i)]);
    const double ratio = std::isfinite(err) ? err / tol : INFINITY;
    if (ratio > 1) ++bad;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (bad == 0) return {};
  std::ostringstream m;
  m << bad << " of " << out.numel() << " elements outside the per-element bound; worst " << ckt::output_coords(t.c, worst)
    << ": got " << detail::load_as_double(out.bytes.data(), out.dtype, worst) << ", want " << ref[size_t(worst)]
    << ", |error| " << worst_ratio << "x the bound " << b.tol(ref[size_t(worst)], abs[size_t(worst)], abs_floor)
    << " (A=" << abs[size_t(worst)] << ")";
  return m.str();
}

// Empty when `out` passes; otherwise the whole story (algorithm, case, variant, first bad element).
// exact: bit-equal to cpu_ref in the output dtype. Otherwise rel L2 and, when `abs` is given, per element.
std::string verdict(const Algorithm& a, TcCase& t, const std::string& variant, const HostTensor& out, bool exact,
                    bool per_element) {
  const std::vector<double>& ref = reference(t);
  const auto v = ckt::check_output(a, t.c, out, ref, rel_l2_bound(t.c.config), exact);
  std::string msg = v.ok ? std::string() : v.message;
  if (msg.empty() && per_element) {
    const std::string e = check_elements(a, t, out, ref, abs_reference(t));
    if (!e.empty()) msg = a.name() + ": " + e;
  }
  if (!msg.empty()) msg += "\n    case: " + t.describe(variant);
  return msg;
}

// The variants to run: "" (the algorithm's own choice) and every entry of variants(). Checks the list.
std::vector<std::string> variants_to_run(const Algorithm& a, const Conv2dProblem& p, const ConvConfig& cfg) {
  const std::vector<std::string> v = a.variants(p, cfg);
  std::set<std::string> seen;
  for (const std::string& s : v) {
    EXPECT_FALSE(s.empty()) << a.name() << " lists an empty variant for " << p.to_string() << " " << cfg.to_string();
    EXPECT_TRUE(seen.insert(s).second) << a.name() << " lists variant '" << s << "' twice for " << p.to_string();
  }
  std::vector<std::string> out{""};
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

bool verbose() {
  static const bool v = ckt::env_str("CONVKIT_TEST_VERBOSE") == "1";
  return v;
}

struct SweepOpts {
  bool exact = false;        // integer data: bit-equality for convkit's algorithms (peers: rel L2 only)
  bool per_element = true;   // Gaussian data: also the element-wise bound
  std::vector<unsigned char> poisons = {0xFF};
  bool misalign = false;
};

// Runs `a` on every case of the set in every variant and checks each output.
void sweep(const Algorithm& a, std::deque<TcCase>& set, const SweepOpts& o, Tally& t) {
  for (size_t ci = 0; ci < set.size(); ++ci) {
    TcCase& tc = set[ci];
    const ConvConfig cfg = on_device(tc.c.config, a.device());
    const Support s = a.can_implement(tc.c.problem, cfg);
    if (!s) {
      expect_good_reason(a, s, tc.describe());
      if (t.first_reason.empty()) t.first_reason = tc.c.problem.to_string() + ": " + s.reason;
      ++t.rejected;
      continue;
    }
    ++t.problems;
    std::unique_ptr<DeviceCase> dc;
    try {
      dc = std::make_unique<DeviceCase>(a.device(), tc.c, o.misalign);
    } catch (const std::exception& e) {
      t.fail(a.name() + ": could not set up " + tc.describe() + ": " + e.what());
      continue;
    }
    const std::vector<std::string> vars = variants_to_run(a, tc.c.problem, cfg);
    for (size_t vi = 0; vi < vars.size(); ++vi)
      for (unsigned char poison : o.poisons) {
        if (verbose()) std::fprintf(stderr, "  running %s on %s\n", a.name().c_str(), tc.describe(vars[vi]).c_str());
        ++t.runs;
        HostTensor out;
        try {
          // prepare() on every other case's own-choice run (run() must work either way); not for peers,
          // whose prepare() times every engine (cuDNN: seconds per problem).
          out = dc->run(a, vars[vi], poison, !a.is_peer() && vi == 0 && ci % 2 == 1);
        } catch (const std::exception& e) {
          t.fail(a.name() + " threw: " + e.what() + "\n    case: " + tc.describe(vars[vi]));
          continue;
        }
        const bool exact = o.exact && !a.is_peer();
        std::string msg = verdict(a, tc, vars[vi], out, exact, !o.exact && o.per_element);
        if (!msg.empty()) {
          if (o.poisons.size() > 1) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02X", unsigned(poison));
            msg = std::string("output prefilled with bytes ") + hex + ": " + msg;
          }
          t.fail(msg);
        }
      }
  }
}

// ---- parameters: (CUDA algorithm or peer) x configuration ---------------------------------------

struct TcParam {
  const Algorithm* algo;
  int config;
};

void PrintTo(const TcParam& p, std::ostream* os) { *os << p.algo->name() << "/" << kConfigs[p.config].name; }

std::vector<TcParam> tc_params() {
  std::vector<TcParam> v;
  for (const Algorithm* a : ckt::algorithms_and_peers())
    if (a->device() == Device::cuda)
      for (int ci = 0; ci < kNumConfigs; ++ci) v.push_back({a, ci});
  return v;
}

std::string param_name(const ::testing::TestParamInfo<TcParam>& info) {
  return info.param.algo->name() + "_" + kConfigs[info.param.config].name;
}

// An algorithm whose name says tensor cores (a token wmma, mma, wgmma, hmma, tc or tensorcore).
bool named_tensor_core(const std::string& name) {
  static const std::set<std::string> tokens = {"wmma", "mma", "wgmma", "hmma", "tc", "tensorcore"};
  for (const std::string& tok : ckt::split_list(name, '_'))
    if (tokens.count(tok)) return true;
  return false;
}

// A tensor-core algorithm: named so, or (by behaviour) it accepts a tensor-core configuration on some quick
// shape and strict fp32 on none. For these the brief's gate must hold: NCHW and strict fp32 are refused.
// (Needs a usable device: CUDA algorithms may answer "no" without one.)
bool is_tensor_core_algo(const Algorithm& a) {
  if (a.is_peer() || a.device() != Device::cuda) return false;
  if (named_tensor_core(a.name())) return true;
  bool tc = false, strict = false;
  for (const Shape& sh : quick_shapes()) {
    const Conv2dProblem p = Conv2dProblem::parse(sh.spec);
    for (const TcConfig& c : kConfigs) tc = tc || bool(a.can_implement(p, on_device(c.cfg, Device::cuda)));
    for (Layout l : {Layout::nchw, Layout::nhwc})
      strict = strict || bool(a.can_implement(p, ConvConfig{DType::f32, l, Device::cuda, MathMode::strict}));
  }
  return tc && !strict;
}

class Tc : public ::testing::TestWithParam<TcParam> {
 protected:
  const Algorithm& algo() const { return *GetParam().algo; }
  int config() const { return GetParam().config; }
  const char* config_name() const { return kConfigs[config()].name; }

  void report(const char* what, const Tally& t) const {
    std::printf("  %s %s %s: %d problems, %d runs, %d rejected, %d failed%s%s\n", algo().name().c_str(), config_name(),
                what, t.problems, t.runs, t.rejected, t.failed, t.first_reason.empty() ? "" : "; e.g. ",
                t.first_reason.c_str());
  }
  // Nothing ran: a failure for a required tensor-core algorithm (it must take every configuration, tf32
  // included), a skip with the reason otherwise.
  bool nothing_ran_is_failure(const Tally& t) const {
    return t.problems == 0 && ckt::is_required(algo().name()) && is_tensor_core_algo(algo());
  }
};

// Skip or fail at the end of a sweep in which nothing ran.
#define TC_FINISH(t)                                                                                          \
  do {                                                                                                        \
    if ((t).problems == 0) {                                                                                  \
      if (nothing_ran_is_failure(t))                                                                          \
        FAIL() << algo().name() << " is required (CONVKIT_REQUIRE_ALGOS) and is a tensor-core algorithm, but " \
               << "rejects every " << config_name() << " problem; e.g. " << (t).first_reason;                 \
      GTEST_SKIP() << algo().name() << " accepts no " << config_name() << " NHWC problem of this set; e.g. "   \
                   << (t).first_reason;                                                                       \
    }                                                                                                         \
  } while (0)

// The peer is compared in the main sweeps (exact, Gaussian, epilogues); the poison, alignment, variant
// and sanitizer tests are about convkit's own kernels.
#define TC_CONVKIT_ONLY()                                                                             \
  do {                                                                                                \
    if (algo().is_peer()) GTEST_SKIP() << algo().name() << " is a peer: run by the main sweeps only"; \
  } while (0)

}  // namespace

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

// Skip (or fail under CONVKIT_REQUIRE_GPU=1) without a GPU.
#define TC_REQUIRE_GPU()                                                                              \
  do {                                                                                                \
    if (!cuda_device_available()) {                                                                   \
      if (ckt::require_gpu()) FAIL() << "no CUDA device (or a build without CUDA), but CONVKIT_REQUIRE_GPU=1"; \
      GTEST_SKIP() << "no CUDA device on this machine (or a build without CUDA)";                     \
    }                                                                                                 \
  } while (0)

TEST(TensorCoreDiscovery, RequiredAlgorithmsAndWhoAcceptsWhat) {
  // Every name in CONVKIT_REQUIRE_ALGOS must be registered; then (GPU) the acceptance matrix is printed,
  // and a required tensor-core algorithm must accept each of the three configurations somewhere.
  for (const std::string& name : ckt::required_algos())
    EXPECT_NE(find_algorithm(name), nullptr) << "CONVKIT_REQUIRE_ALGOS names '" << name << "', which is not registered";
  TC_REQUIRE_GPU();
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
      if (ckt::is_required(a->name()) && is_tensor_core_algo(*a)) {
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
  TC_REQUIRE_GPU();
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

TEST(TensorCoreHuge, F16NhwcPast2e31Elements) {
  // n2c32h5793w5793k32r3s3p1 in f16 NHWC: 2,147,766,336 input and output elements each (> 2^31; 4.3 GB
  // each). Integers in [-2, 2] and an integer bias: every output is an integer of magnitude <= 1154, exact
  // in f16. Every output is scanned for leftover NaN poison; a few thousand points (the corners and edges
  // of both images, the last element, random ones) are compared exactly with a host double sum
  // (detail::reference_dot). Every CUDA convkit algorithm that accepts it runs its own choice and, when it
  // has variants, its last one too.
  TC_REQUIRE_GPU();
  const Conv2dProblem p = Conv2dProblem::parse("n2c32h5793w5793k32r3s3p1");
  const ConvConfig cfg{DType::f16, Layout::nhwc, Device::cuda, MathMode::strict};
  ASSERT_GT(p.input_elems(), int64_t(1) << 31);
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
