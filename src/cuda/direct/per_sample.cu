// cuda_per_sample: the CUDA kernel of conv2d_per_sample (a different filter bank for every sample), in one
// launch for the whole batch. f32, f16 and bf16 (fp32 accumulation, strict fp32 products), nchw and nhwc.
//
// Adds over a plain implicit GEMM: the batch is not folded into the GEMM's M dimension. Each (sample n,
// group g) pair is its own small GEMM, M = P*Q output pixels, N = K/groups output channels, K = C/groups*R*S,
// and every block knows its n and reads its filter bank at row n*K + g*K/groups of the [N*K, C/groups*R*S]
// weight matrix (KCRS and KRSC are both that matrix, with the reduction index in (c,r,s) or (r,s,c) order).
// Parallelisation: one 64x64 output tile (pixels x channels) per block of 256 threads, each thread a 4x4
// register block; the reduction runs in steps of kBlockK through shared memory, the input tile gathered
// im2col-style on the fly. Bias and residual are applied in the store (residual may alias dst: each element
// is read then written by the same thread). Registered after the faster per-sample modes (cuda_igemm_wgmma,
// cuda_igemm_mma for f16/bf16 NHWC, cuda_igemm_simt for f32 NCHW): it runs f32 NHWC and what they refuse.
// measured (H200, 2026-11-29): fp32 NCHW, N 32, 64->64, 56x56, 3x3: 0.75 ms here, 0.38x cuDNN on the batch
// folded into groups (0.29 ms); bf16 NHWC on cuda_igemm_wgmma 0.039 ms, 0.78x (docs/pytorch.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/activation.hpp"
#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/epilogue.cuh"

namespace convkit::detail {
namespace {

constexpr int kBlockM = 64;   // output pixels per block
constexpr int kBlockN = 64;   // output channels per block
constexpr int kBlockK = 16;   // reduction step
constexpr int kThreads = 256;
constexpr int kThreadM = 4, kThreadN = 4;
// NOTE: +4 padding: the nhwc gather writes As with the reduction index fastest across a warp.
constexpr int kPad = 4;

struct Params {
  int64_t N, C, H, W, K, R, S, P, Q, G, Cg, Kg;
  int64_t pad_h, pad_w, stride_h, stride_w, dil_h, dil_w;
  int64_t tiles_m, tiles_n;
  Activation act;
  float alpha, beta;
};

// Block b -> (sample n, group g, pixel tile, channel tile); thread -> 4 pixels x 4 channels of that tile.
template <typename T, bool kNhwc>
__global__ void __launch_bounds__(kThreads) per_sample_igemm(Params p, const T* __restrict__ x,
                                                             const T* __restrict__ wt, const T* __restrict__ bias,
                                                             const T* res, T* y) {
  __shared__ float As[kBlockK][kBlockM + kPad];
  __shared__ float Bs[kBlockK][kBlockN + kPad];

  int64_t b = blockIdx.x;
  const int64_t tile_m = b % p.tiles_m;
  b /= p.tiles_m;
  const int64_t tile_n = b % p.tiles_n;
  b /= p.tiles_n;
  const int64_t g = b % p.G;
  const int64_t n = b / p.G;

  const int tid = threadIdx.x;
  const int64_t PQ = p.P * p.Q, RS = p.R * p.S, Kred = p.Cg * RS;
  const int64_t m0 = tile_m * kBlockM, col0 = tile_n * kBlockN;
  const T* xn = x + (kNhwc ? n * p.H * p.W * p.C + g * p.Cg : (n * p.C + g * p.Cg) * p.H * p.W);
  const T* wn = wt + (n * p.K + g * p.Kg) * Kred;  // this sample's (and group's) filters

  // Gather roles: nchw walks pixels fastest (contiguous w), nhwc walks the reduction index (contiguous c).
  const int a_fast = kNhwc ? tid % kBlockK : tid % kBlockM;
  const int a_slow = kNhwc ? tid / kBlockK : tid / kBlockM;
  constexpr int a_slow_step = kNhwc ? kThreads / kBlockK : kThreads / kBlockM;
  constexpr int a_loads = kBlockK * kBlockM / kThreads;

  const int tx = tid % (kBlockN / kThreadN), ty = tid / (kBlockN / kThreadN);
  float acc[kThreadM][kThreadN] = {};

  for (int64_t k0 = 0; k0 < Kred; k0 += kBlockK) {
#pragma unroll
    for (int i = 0; i < a_loads; ++i) {
      const int kk = kNhwc ? a_fast : a_slow + i * a_slow_step;
      const int mm = kNhwc ? a_slow + i * a_slow_step : a_fast;
      const int64_t kidx = k0 + kk, m = m0 + mm;
      float v = 0.0f;
      if (kidx < Kred && m < PQ) {
        int64_t c, r, s;
        if (kNhwc) {
          c = kidx % p.Cg;
          s = (kidx / p.Cg) % p.S;
          r = kidx / (p.Cg * p.S);
        } else {
          s = kidx % p.S;
          r = (kidx / p.S) % p.R;
          c = kidx / RS;
        }
        const int64_t pp = m / p.Q, qq = m % p.Q;
        const int64_t h = pp * p.stride_h - p.pad_h + r * p.dil_h;
        const int64_t w = qq * p.stride_w - p.pad_w + s * p.dil_w;
        if (h >= 0 && h < p.H && w >= 0 && w < p.W)
          v = elem_to_float(xn[kNhwc ? (h * p.W + w) * p.C + c : (c * p.H + h) * p.W + w]);
      }
      As[kk][mm] = v;
    }
#pragma unroll
    for (int i = 0; i < kBlockK * kBlockN / kThreads; ++i) {
      const int kk = tid % kBlockK, nn = tid / kBlockK + i * (kThreads / kBlockK);
      const int64_t kidx = k0 + kk, col = col0 + nn;
      Bs[kk][nn] = (kidx < Kred && col < p.Kg) ? elem_to_float(wn[col * Kred + kidx]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBlockK; ++kk) {
      float a[kThreadM], bv[kThreadN];
#pragma unroll
      for (int i = 0; i < kThreadM; ++i) a[i] = As[kk][ty * kThreadM + i];
#pragma unroll
      for (int j = 0; j < kThreadN; ++j) bv[j] = Bs[kk][tx * kThreadN + j];
#pragma unroll
      for (int i = 0; i < kThreadM; ++i)
#pragma unroll
        for (int j = 0; j < kThreadN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < kThreadM; ++i) {
    const int64_t m = m0 + ty * kThreadM + i;
    if (m >= PQ) continue;
    const int64_t pp = m / p.Q, qq = m % p.Q;
#pragma unroll
    for (int j = 0; j < kThreadN; ++j) {
      const int64_t col = col0 + tx * kThreadN + j;
      if (col >= p.Kg) continue;
      const int64_t k = g * p.Kg + col;
      const int64_t o = kNhwc ? ((n * p.P + pp) * p.Q + qq) * p.K + k : ((n * p.K + k) * p.P + pp) * p.Q + qq;
      const float bb = bias ? elem_to_float(bias[n * p.K + k]) : 0.0f;
      const float rr = res ? elem_to_float(res[o]) : 0.0f;
      const float v = epilogue_out<T>(p.act, p.alpha, p.beta, acc[i][j], bias != nullptr, bb, res != nullptr, rr);
      y[o] = float_to_elem<T>(v);
    }
  }
}

template <typename T>
void launch(const Params& p, const TensorView& src, const TensorView& wei, const TensorView& dst,
            const Epilogue& epi, cudaStream_t stream) {
  const int64_t blocks = p.N * p.G * p.tiles_m * p.tiles_n;
  if (blocks > 0x7fffffffLL)
    throw Error(StatusCode::unsupported, "conv2d_per_sample: the problem needs more than 2^31-1 CUDA blocks.");
  const T* x = static_cast<const T*>(src.data);
  const T* w = static_cast<const T*>(wei.data);
  const T* b = static_cast<const T*>(epi.bias);
  const T* r = static_cast<const T*>(epi.residual);
  T* y = static_cast<T*>(dst.data);
  if (src.layout == Layout::nhwc) {
    per_sample_igemm<T, true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, x, w, b, r, y);
    CK_LAUNCH("per_sample_igemm<nhwc>");
  } else {
    per_sample_igemm<T, false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, x, w, b, r, y);
    CK_LAUNCH("per_sample_igemm<nchw>");
  }
}

void run_per_sample(const Conv2dProblem& pb, const TensorView& src, const TensorView& wei, const TensorView& dst,
                    const Epilogue& epi, void* stream) {
  Params p{};
  p.N = pb.n; p.C = pb.c; p.H = pb.h; p.W = pb.w; p.K = pb.k; p.R = pb.r; p.S = pb.s;
  p.P = pb.p(); p.Q = pb.q(); p.G = pb.groups; p.Cg = pb.c_per_group(); p.Kg = pb.k_per_group();
  p.pad_h = pb.pad_h; p.pad_w = pb.pad_w; p.stride_h = pb.stride_h; p.stride_w = pb.stride_w;
  p.dil_h = pb.dilation_h; p.dil_w = pb.dilation_w;
  p.tiles_m = (p.P * p.Q + kBlockM - 1) / kBlockM;
  p.tiles_n = (p.Kg + kBlockN - 1) / kBlockN;
  p.act = epi.activation; p.alpha = epi.alpha; p.beta = epi.beta;
  const cudaStream_t s = as_stream(stream);
  switch (src.dtype) {
    case DType::f32: launch<float>(p, src, wei, dst, epi, s); break;
    case DType::f16: launch<__half>(p, src, wei, dst, epi, s); break;
    case DType::bf16: launch<__nv_bfloat16>(p, src, wei, dst, epi, s); break;
  }
}

class CudaPerSample final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_per_sample"; }
  std::string description() const override {
    return "per-sample weights only (conv2d_per_sample): a plain 64x64-tile implicit GEMM per (sample, group), "
           "any dtype, layout and alignment; what the faster per-sample modes refuse";
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig&) const override {
    // (tf32 requests get strict fp32 products: more accurate than asked)
    const int64_t blocks = p.n * p.groups * ((p.p() * p.q() + kBlockM - 1) / kBlockM) *
                           ((p.k_per_group() + kBlockN - 1) / kBlockN);
    if (blocks > 0x7fffffffLL) return Support::no("the problem needs more than 2^31-1 CUDA blocks.");
    return Support::yes();
  }
  Support accepts(const Conv2dProblem&, const ConvConfig&, const Operands& ops) const override {
    return per_sample_weights_only(ops);
  }
  void run(const ConvCall& call) const override {
    check_per_sample_call(*this, call);
    check_residual_overlap(call.epilogue.residual, call.dst.data, call.dst.bytes());
    run_per_sample(call.problem, call.src, call.wei, call.dst, call.epilogue, call.stream);
  }
};

}  // namespace

const Algorithm* make_cuda_per_sample() {
  static CudaPerSample algo;
  return &algo;
}

}  // namespace convkit::detail
