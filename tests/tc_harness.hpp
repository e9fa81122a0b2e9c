// The tensor-core test harness shared by test_tensor_core.cpp (the GPU sweeps, discovery, rejections, past
// 2^31 elements) and test_tensor_core_oracle.cpp (the oracle, the checker and the harness itself, on the CPU):
// the three configurations, the bounds with their reasons, the case sets, running one algorithm on one case
// in every variant, checking, and the Tc fixture. test_tensor_core.cpp's header says what is checked.
#pragma once

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

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // each test file uses a part

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
//           covers exp/erf's own error and the cancellation in 1+erf for very negative inputs); for
//           16-bit outputs the CUDA kernels' tanh forms (src/cuda/common/epilogue.cuh): 2^-15 (GELU) and
//           2^-17 (SiLU), measured by CudaActivation.SixteenBitFormsWithinBound;
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
  const bool sixteen = c.config.dtype != DType::f32;
  switch (c.epi.activation) {
    case Activation::gelu: b.e_act = std::ldexp(1.0, sixteen ? -15 : -18); break;
    case Activation::silu: b.e_act = std::ldexp(1.0, sixteen ? -17 : -18); break;
    default: b.e_act = 0;
  }
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
  int refused_operands = 0;  // of `rejected`: by accepts() (misaligned pointers), not by can_implement
  std::string first_operand_reason;
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
    if (o.misalign) {  // every pointer one element past a 256-byte allocation boundary
      Operands ops;
      ops.src_align = ops.wei_align = ops.dst_align = ops.bias_align = ops.residual_align =
          unsigned(dtype_size(cfg.dtype));
      ops.has_bias = !tc.c.bias.empty();
      ops.has_residual = tc.c.epi.residual;
      ops.residual_is_dst = tc.c.epi.residual && tc.c.epi.residual_aliases_dst;
      if (const Support r = a.accepts(tc.c.problem, cfg, ops); !r) {
        expect_good_reason(a, r, tc.describe() + " (misaligned operands)");
        if (t.first_reason.empty()) t.first_reason = tc.c.problem.to_string() + ": " + r.reason;
        if (t.first_operand_reason.empty()) t.first_operand_reason = tc.c.problem.to_string() + ": " + r.reason;
        ++t.rejected;
        ++t.refused_operands;
        continue;
      }
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

// Whether it takes an ungrouped problem in some tensor-core configuration (the dense GEMM family does).
bool takes_dense_layers(const Algorithm& a) {
  const Conv2dProblem p = Conv2dProblem::parse("n1c16h8w8k16r3s3p1");
  for (const TcConfig& c : kConfigs)
    if (a.can_implement(p, on_device(c.cfg, Device::cuda))) return true;
  return false;
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
  // Nothing ran: a failure for a required dense tensor-core algorithm (it must take every configuration,
  // tf32 included), a skip with the reason otherwise (also for one of grouped layers only, cuda_grouped_mma:
  // the sweeps' shapes are dense).
  bool nothing_ran_is_failure(const Tally& t) const {
    return t.problems == 0 && ckt::is_required(algo().name()) && is_tensor_core_algo(algo()) &&
           takes_dense_layers(algo());
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

#pragma GCC diagnostic pop
