// cuda_grouped: grouped convolutions with few channels per group (2 to 64 input and up to 64 output channels
// a group; ResNeXt's 3x3 layers have 4 to 32), NHWC, as a register-blocked direct kernel.
//
// Adds over cuda_depthwise: several input channels per group. An implicit-GEMM tile is 64 to 256 output
// channels wide, so with 4 to 32 channels a group most of it multiplies zeros; here a block stages the input
// tile of whole groups once and every thread sums only its own group's C/groups x R x S products.
//
// Work mapping: a block = one image x a tp x tq output tile x gb whole groups (kb = gb*Kg output channels,
// cbk = gb*Cg input channels). The input tile with its halo sits in shared memory as fp32 [ih][iw][cbk], the
// block's filters as fp32 [R*S][Cg][kb]. A thread = (lane: kKt consecutive output channels of one group,
// strip: one output row and a column phase); its outputs are kQt pixels of the row, tq/kQt columns apart,
// times its kKt channels: 16 fp32 sums, and per input value read from shared memory kKt FMAs (the kKt taps
// come as one 16-byte read, and the input four channels at a time where Cg % 4 == 0). f32 (strict), f16 and bf16 (fp32 accumulation, one rounding), every filter
// size, stride, dilation and padding that fits the shared-memory budget, the whole fused epilogue, 64-bit
// global offsets.
// nvcc -Xptxas -v (sm_90): 32-64 registers, no spills.
// measured (H200, 2026-12-01, batch 32, docs/perf.md): f32 strict rnx50_g3x3_256_28_g32 0.117 ms (1.90x
// cuDNN's FMA engine; 0.69-1.90x, geomean 1.28x over the suite's grouped layers); bf16 rnx50_g3x3_128_56_g32
// 0.198 ms (0.26x cuDNN, 4.7x cuda_igemm_mma's gather path).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/common/epilogue.cuh"
#include "cuda/common/geometry.cuh"

namespace convkit::detail {
namespace {

constexpr int kQt = 4;                      // pixels per thread
constexpr int kThreadsTarget = 256;
constexpr int64_t kSmemBudget = 96 * 1024;  // dynamic shared memory per block (opted in above 48 KB)
constexpr int64_t kMaxPerGroup = 64;

struct GrPlan {
  int gb = 1;            // groups per block
  int kkt = 4;           // output channels per thread (4 where K/groups % 4 == 0, else 1)
  int tp = 1, tq = kQt;  // output tile
  int ih = 1, iw = 1;    // staged input rows and columns (halo included)
  int tiles_p = 1, tiles_q = 1;
  int threads = 0;
  int64_t smem = 0;
};

// The tile for gb groups a block: the widest output tile whose staged input and filters fit.
GrPlan plan_for(const Conv2dProblem& pb, int gb) {
  GrPlan t;
  const int64_t cg = pb.c_per_group(), kg = pb.k_per_group();
  t.kkt = kg % 4 == 0 ? 4 : 1;
  t.gb = gb;
  const int64_t P = pb.p(), Q = pb.q();
  t.tq = Q <= 4 ? 4 : Q <= 8 ? 8 : 16;
  for (;;) {
    const int64_t kb = t.gb * kg, cbk = t.gb * cg, lanes = kb / t.kkt;
    const int64_t strips_per_row = t.tq / kQt;
    t.tp = int(std::max<int64_t>(1, std::min<int64_t>(P, kThreadsTarget / std::max<int64_t>(1, lanes * strips_per_row))));
    for (;;) {
      t.ih = int((t.tp - 1) * pb.stride_h + (pb.r - 1) * pb.dilation_h + 1);
      t.iw = int((t.tq - 1) * pb.stride_w + (pb.s - 1) * pb.dilation_w + 1);
      t.smem = (pb.r * pb.s * cg * kb + int64_t(t.ih) * t.iw * cbk) * 4;
      if (t.smem <= kSmemBudget || t.tp == 1) break;
      t.tp = std::max(1, t.tp / 2);
    }
    t.threads = int(lanes * t.tp * strips_per_row);
    if (t.smem <= kSmemBudget && t.threads <= kThreadsTarget) break;
    if (t.tq > kQt) { t.tq /= 2; continue; }
    break;  // does not fit: can_implement says so
  }
  t.tiles_p = int((P + t.tp - 1) / t.tp);
  t.tiles_q = int((Q + t.tq - 1) / t.tq);
  return t;
}

// As many groups a block as keep 64 channels, halved while the block would have fewer than 128 threads
// (wide groups with stride 2: the filters of two 32-channel groups alone took 72 KB and left a 1x8 tile of
// 32 threads, 2.0 ms on rnx50_g3x3s2_1024_14 against cuDNN's 0.16).
GrPlan plan_of(const Conv2dProblem& pb) {
  const int64_t cg = pb.c_per_group(), kg = pb.k_per_group();
  int gb = int(std::max<int64_t>(1, std::min<int64_t>(pb.groups, 64 / std::max(cg, kg))));
  GrPlan t = plan_for(pb, gb);
  while (gb > 1 && (t.threads < 128 || t.smem > kSmemBudget)) {
    const GrPlan u = plan_for(pb, gb / 2);
    if (u.smem > kSmemBudget || (u.threads <= t.threads && t.smem <= kSmemBudget)) break;
    gb /= 2;
    t = u;
  }
  return t;
}

// Block (tile, group block): thread = lane + lanes * strip, strip = (row ps, column phase qs).
template <typename T, int kKt, int kCv>
__global__ void __launch_bounds__(kThreadsTarget)
    grouped_nhwc_kernel(ConvDims d, GrPlan t, const T* __restrict__ src, const T* __restrict__ wei, T* dst,
                        DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
  extern __shared__ float4 smem4[];
  const int RS = d.r * d.s, cg = d.cg, kg = d.kg;
  const int kb = t.gb * kg, cbk = t.gb * cg;
  float* s_w = reinterpret_cast<float*>(smem4);  // [R*S][Cg][kb]
  float* s_in = s_w + RS * cg * kb;              // [ih][iw][cbk]

  int64_t tile = blockIdx.x;
  const int tq_i = int(tile % t.tiles_q);
  tile /= t.tiles_q;
  const int tp_i = int(tile % t.tiles_p);
  const int64_t n = tile / t.tiles_p;
  const int p0 = tp_i * t.tp, q0 = tq_i * t.tq;
  const int g0 = blockIdx.y * t.gb, k0 = g0 * kg, c0 = g0 * cg;
  const int h0 = p0 * d.stride_h - d.pad_h, w0 = q0 * d.stride_w - d.pad_w;
  const int tid = threadIdx.x, nthreads = blockDim.x;

  // The block's filters (KRSC: element (k, rs, c) at (k*R*S + rs)*Cg + c), transposed to [rs][c][k] in fp32.
  for (int i = tid; i < RS * cg * kb; i += nthreads) {
    const int kk = i % kb, rest = i / kb, c = rest % cg, rs = rest / cg, k = k0 + kk;
    s_w[i] = k < d.k ? elem_to_float<T>(wei[(int64_t(k) * RS + rs) * cg + c]) : 0.0f;
  }
  // The input tile with its halo, zeros outside the image and past the last group.
  const int npix = t.ih * t.iw;
  for (int u = tid; u < npix * cbk; u += nthreads) {
    const int cc = u % cbk, pix = u / cbk, y = pix / t.iw, x = pix - y * t.iw;
    const int h = h0 + y, w = w0 + x, c = c0 + cc;
    float v = 0.0f;
    if (h >= 0 && h < d.h && w >= 0 && w < d.w && c < d.c) v = elem_to_float<T>(src[((n * d.h + h) * d.w + w) * d.c + c]);
    s_in[u] = v;
  }
  __syncthreads();

  const int lanes = kb / kKt, lane = tid % lanes, strip = tid / lanes;
  const int qstrips = t.tq / kQt;
  const int ps = strip / qstrips, qs = strip % qstrips;
  if (ps >= t.tp) return;
  const int kl = lane * kKt;         // the thread's first output channel within the block
  const int ci0 = (kl / kg) * cg;    // its group's first input channel within the block

  float acc[kQt][kKt];
#pragma unroll
  for (int i = 0; i < kQt; ++i)
#pragma unroll
    for (int j = 0; j < kKt; ++j) acc[i][j] = 0.0f;

  // Input values are read kCv channels at a time (16 bytes where Cg % 4 == 0): a quarter-warp's lanes then
  // read whole 16-byte words of one or a few groups, which no two lanes' words share a bank with; one
  // float a lane at a stride of Cg floats collided in the banks up to four ways.
  const float* ip0 = s_in + (ps * d.stride_h * t.iw + qs * d.stride_w) * cbk + ci0;
  const int out_step = qstrips * d.stride_w * cbk, row_step = d.dil_h * t.iw * cbk, col_step = d.dil_w * cbk;
  const float* wp = s_w + kl;
  for (int r = 0; r < d.r; ++r)
    for (int s = 0; s < d.s; ++s) {
      const float* ip = ip0 + r * row_step + s * col_step;
      for (int c = 0; c < cg; c += kCv) {
        float xv[kQt][kCv];
#pragma unroll
        for (int i = 0; i < kQt; ++i) {
          if constexpr (kCv == 4) {
            const float4 x4 = *reinterpret_cast<const float4*>(ip + i * out_step + c);
            xv[i][0] = x4.x, xv[i][1] = x4.y, xv[i][2] = x4.z, xv[i][3] = x4.w;
          } else {
            xv[i][0] = ip[i * out_step + c];
          }
        }
#pragma unroll
        for (int cc = 0; cc < kCv; ++cc, wp += kb) {
          float wv[kKt];
          if constexpr (kKt == 4) {
            const float4 w4 = *reinterpret_cast<const float4*>(wp);
            wv[0] = w4.x, wv[1] = w4.y, wv[2] = w4.z, wv[3] = w4.w;
          } else {
            wv[0] = *wp;
          }
#pragma unroll
          for (int i = 0; i < kQt; ++i)
#pragma unroll
            for (int j = 0; j < kKt; ++j) acc[i][j] = fmaf(xv[i][cc], wv[j], acc[i][j]);
        }
      }
    }

  const int p = p0 + ps;
  if (p >= d.p) return;
#pragma unroll
  for (int i = 0; i < kQt; ++i) {
    const int q = q0 + qs + i * qstrips;
    if (q >= d.q) continue;
    const int64_t o = ((n * d.p + p) * d.q + q) * d.k;
#pragma unroll
    for (int j = 0; j < kKt; ++j) {
      const int k = k0 + kl + j;
      if (k < d.k) dst[o + k] = float_to_elem<T>(epi(acc[i][j], k, o + k));
    }
  }
}

template <typename T>
void launch(const ConvCall& call) {
  const Conv2dProblem& pb = call.problem;
  if (pb.output_elems() == 0) return;
  const ConvDims d = make_dims(pb);
  const GrPlan t = plan_of(pb);
  const dim3 grid(unsigned(int64_t(pb.n) * t.tiles_p * t.tiles_q), unsigned((pb.groups + t.gb - 1) / t.gb));
  const bool cv4 = pb.c_per_group() % 4 == 0;
  auto kernel = t.kkt == 4 ? (cv4 ? grouped_nhwc_kernel<T, 4, 4> : grouped_nhwc_kernel<T, 4, 1>)
                           : (cv4 ? grouped_nhwc_kernel<T, 1, 4> : grouped_nhwc_kernel<T, 1, 1>);
  if (t.smem > 48 * 1024) opt_in_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemBudget);
  launch_pdl(kernel, dim3(grid), dim3(t.threads), size_t(t.smem), as_stream(call.stream), d, t,
             static_cast<const T*>(call.src.data), static_cast<const T*>(call.wei.data),
             static_cast<T*>(call.dst.data), DeviceEpilogue<T>::from(call.epilogue));
  CK_LAUNCH("grouped_nhwc_kernel");
}

class CudaGrouped final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_grouped"; }
  std::string description() const override {
    return "grouped conv with 2-64 channels a group (ResNeXt): whole groups' input tiles staged once in shared "
           "memory, 4 pixels x 4 channels of one group a thread; NHWC, f32/f16/bf16, fp32 accumulation";
  }
  Support can_implement(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (pb.groups < 2) return Support::no("it computes grouped convolutions only (groups > 1).");
    if (pb.c_per_group() < 2)
      return Support::no("one input channel a group is a depthwise layer (cuda_depthwise takes it).");
    if (pb.c_per_group() > kMaxPerGroup || pb.k_per_group() > kMaxPerGroup)
      return Support::no("it takes at most 64 input and 64 output channels a group (wider groups fill a GEMM "
                         "tile).");
    if (cfg.layout != Layout::nhwc) return Support::no("it reads NHWC tensors only.");
    if (cfg.dtype == DType::f32 && cfg.math == MathMode::tf32) return Support::no("it computes in strict fp32.");
    if (Support s = dims_fit_int(pb); !s) return s;
    const GrPlan t = plan_of(pb);
    if (t.smem > kSmemBudget || t.threads > kThreadsTarget)
      return Support::no("the dilated filter extent is too large: the smallest tile needs " + std::to_string(t.smem) +
                         " bytes of shared memory (" + std::to_string(kSmemBudget) + " available).");
    if ((pb.groups + t.gb - 1) / t.gb > 65535) return Support::no("more than 65535 group blocks (grid.y).");
    if (int64_t(pb.n) * t.tiles_p * t.tiles_q >= INT_MAX) return Support::no("more than 2^31 tiles (grid.x).");
    return Support::yes();
  }
  // f16/bf16 with C/groups % 8 == 0: the tensor-core kernels (cuda_grouped_mma, cuda_igemm_mma) measured
  // 1.5-3x faster on the resnext50 suite (docs/perf.md, 2026-12-01).
  Support heuristic_choice(const Conv2dProblem& pb, const ConvConfig& cfg, const Operands&) const override {
    if (cfg.dtype != DType::f32 && pb.c_per_group() % 8 == 0)
      return Support::no("f16/bf16 with C/groups % 8 == 0 run faster on the tensor-core kernels.");
    return Support::yes();
  }
  std::string detail(const Conv2dProblem& pb, const ConvConfig&) const override {
    const GrPlan t = plan_of(pb);
    return std::to_string(t.gb) + " groups x " + std::to_string(t.tp) + "x" + std::to_string(t.tq) +
           " outputs a block, " + std::to_string(t.threads) + " threads";
  }
  void run(const ConvCall& call) const override {
    if (Support ok = can_implement(call.problem, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + call.problem.to_string() + ": " + ok.reason);
    check_residual_overlap(call.epilogue.residual, call.dst.data,
                           size_t(call.problem.output_elems()) * dtype_size(call.config.dtype));
    switch (call.config.dtype) {
      case DType::f32: launch<float>(call); break;
      case DType::f16: launch<__half>(call); break;
      case DType::bf16: launch<__nv_bfloat16>(call); break;
    }
  }
};

}  // namespace

const Algorithm* make_cuda_grouped() {
  static CudaGrouped algo;
  return &algo;
}

}  // namespace convkit::detail
