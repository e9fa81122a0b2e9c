// cuda_direct_naive: rung 1 of the CUDA direct ladder, the seed's first version. One thread computes one
// output element with an fp32 accumulator, reading every input and filter value it needs straight from
// global memory (through L1). Nothing is reused on purpose: this is the baseline every later rung beats.
//
// Adds over cpu_ref: the GPU, one thread per output. NCHW, and NHWC too (only the offset arithmetic
// differs; threads follow the output's memory order so stores are coalesced in either layout).
// Work mapping: a grid-stride loop over the output elements in memory order, 64-bit indices; in NCHW a
// warp holds 32 neighbouring q of one (n, k, p), so its filter reads are one broadcast address.
// nvcc -Xptxas -v (sm_90): NCHW 64 registers, NHWC 72 registers, no smem, no spills.
// measured (H200, 2026-11-29): seed000 247.9 ms (1.25 TFLOP/s, 2% of the 67 TFLOP/s FMA peak), seed001
// 2.77 ms. ncu on seed001: 64 registers, FMA pipe 31% busy, 49% achieved occupancy, DRAM 0.1%: every
// thread re-reads its whole window from L1/L2, so load issue, not arithmetic, is the limit.
#include <algorithm>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/epilogue.cuh"
#include "cuda/direct/direct_common.cuh"

namespace convkit::detail {
namespace {

// One thread per output element, grid-stride over the output in its memory order (kNhwc: k fastest).
template <bool kNhwc>
__global__ void conv_direct_naive_kernel(ConvDims d, const float* __restrict__ src, const float* __restrict__ wei,
                                         float* dst, DeviceEpilogue<float> epi) {
  const int64_t total = int64_t(d.n) * d.k * d.p * d.q;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, k, p, q;
    if (!kNhwc) {
      q = i % d.q, p = (i / d.q) % d.p, k = (i / (int64_t(d.q) * d.p)) % d.k, n = i / (int64_t(d.q) * d.p * d.k);
    } else {
      k = i % d.k, q = (i / d.k) % d.q, p = (i / (int64_t(d.k) * d.q)) % d.p, n = i / (int64_t(d.k) * d.q * d.p);
    }
    const int64_t g = k / d.kg;
    const int64_t h0 = p * d.stride_h - d.pad_h, w0 = q * d.stride_w - d.pad_w;
    float acc = 0.0f;
    for (int c = 0; c < d.cg; ++c) {
      const int64_t ci = g * d.cg + c;  // input channel
      for (int r = 0; r < d.r; ++r) {
        const int64_t h = h0 + int64_t(r) * d.dil_h;
        if (h < 0 || h >= d.h) continue;
        for (int s = 0; s < d.s; ++s) {
          const int64_t w = w0 + int64_t(s) * d.dil_w;
          if (w < 0 || w >= d.w) continue;
          const int64_t xo = kNhwc ? ((n * d.h + h) * d.w + w) * d.c + ci : ((n * d.c + ci) * d.h + h) * d.w + w;
          const int64_t wo = kNhwc ? ((k * d.r + r) * d.s + s) * d.cg + c : ((k * d.cg + c) * d.r + r) * d.s + s;
          acc = fmaf(src[xo], wei[wo], acc);
        }
      }
    }
    dst[i] = epi(acc, k, i);  // i is the output offset: the loop runs in memory order
  }
}

class CudaDirectNaive final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_direct_naive"; }
  std::string description() const override {
    return "direct conv, one thread per output, fp32, all reads from global memory (ladder rung 1)";
  }
  Support can_implement(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (Support s = require_f32_strict(cfg, /*nhwc_ok=*/true); !s) return s;
    return dims_fit_int(pb);
  }
  void run(const ConvCall& call) const override {
    const ConvDims d = make_dims(call.problem);
    const auto* src = static_cast<const float*>(call.src.data);
    const auto* wei = static_cast<const float*>(call.wei.data);
    auto* dst = static_cast<float*>(call.dst.data);
    const DeviceEpilogue<float> epi = DeviceEpilogue<float>::from(call.epilogue);
    const int64_t total = call.problem.output_elems();
    constexpr int kThreads = 256;
    const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(1) << 20);
    if (call.dst.layout == Layout::nhwc) {
      conv_direct_naive_kernel<true><<<unsigned(blocks), kThreads, 0, as_stream(call.stream)>>>(d, src, wei, dst, epi);
    } else {
      conv_direct_naive_kernel<false><<<unsigned(blocks), kThreads, 0, as_stream(call.stream)>>>(d, src, wei, dst, epi);
    }
    CK_LAUNCH("conv_direct_naive_kernel");
  }
};

}  // namespace

const Algorithm* make_cuda_direct_naive() {
  static CudaDirectNaive algo;
  return &algo;
}

}  // namespace convkit::detail
