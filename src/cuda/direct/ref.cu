// cuda_ref: the GPU oracle, for shapes too large for cpu_ref. The same readable loop as cpu_ref (one thread
// per output element, accumulation in double, the epilogue applied in double) for every problem the API
// accepts, every dtype (f32, f16, bf16) and both layouts. Speed is not its job; being obviously right is.
//
// Work mapping: a grid-stride loop over the N*K*P*Q outputs in logical (n, k, p, q) order, 64-bit indices.
// nvcc -Xptxas -v (sm_90): 72 registers for each of the f32/f16/bf16 instantiations, no smem, no spills.
// measured (H200, 2026-11-29): seed000 368 ms (0.84 TFLOP/s in fp64 accumulation), seed001 4.06 ms.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "common/activation.hpp"
#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"

namespace convkit::detail {
namespace {

// A tensor's logical sizes and layout; offset() is TensorView::offset on the device.
struct Tensor4 {
  int64_t d0, d1, d2, d3;
  bool nhwc;
  __device__ int64_t offset(int64_t n, int64_t c, int64_t h, int64_t w) const {
    if (!nhwc) return ((n * d1 + c) * d2 + h) * d3 + w;
    return ((n * d2 + h) * d3 + w) * d1 + c;
  }
};

Tensor4 tensor4(const TensorView& t) {
  return {t.dims[0], t.dims[1], t.dims[2], t.dims[3], t.layout == Layout::nhwc};
}

struct RefArgs {
  int64_t n, c, h, w, k, r, s, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, cg, kg, p, q;
  Tensor4 x, wt, y;
  Activation activation;
  double alpha, beta;
};

__device__ double to_double(float v) { return v; }
__device__ double to_double(__half v) { return __half2float(v); }
__device__ double to_double(__nv_bfloat16 v) { return __bfloat162float(v); }

// double -> float -> element, rounding to nearest even at each step, exactly as cpu_ref's store does.
template <typename T> __device__ T from_double(double v);
template <> __device__ float from_double<float>(double v) { return static_cast<float>(v); }
template <> __device__ __half from_double<__half>(double v) { return __float2half_rn(static_cast<float>(v)); }
template <> __device__ __nv_bfloat16 from_double<__nv_bfloat16>(double v) {
  return __float2bfloat16_rn(static_cast<float>(v));
}

// One thread per output element (grid-stride, 64-bit): the 7-deep loop of cpu_ref, in double.
template <typename T>
__global__ void conv_ref_kernel(RefArgs a, const T* src, const T* wei, T* dst, const T* bias, const T* residual) {
  const int64_t total = a.n * a.k * a.p * a.q;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t q = i % a.q, p = (i / a.q) % a.p, k = (i / (a.q * a.p)) % a.k, n = i / (a.q * a.p * a.k);
    const int64_t g = k / a.kg;
    double acc = 0.0;
    for (int64_t c = 0; c < a.cg; ++c)
      for (int64_t r = 0; r < a.r; ++r) {
        const int64_t h = p * a.stride_h - a.pad_h + r * a.dil_h;
        if (h < 0 || h >= a.h) continue;
        for (int64_t s = 0; s < a.s; ++s) {
          const int64_t w = q * a.stride_w - a.pad_w + s * a.dil_w;
          if (w < 0 || w >= a.w) continue;
          acc += to_double(src[a.x.offset(n, g * a.cg + c, h, w)]) * to_double(wei[a.wt.offset(k, c, r, s)]);
        }
      }
    const int64_t o = a.y.offset(n, k, p, q);
    const double b = bias ? to_double(bias[k]) : 0.0;
    const double res = residual ? to_double(residual[o]) : 0.0;  // read before dst[o] is written (may alias)
    dst[o] = from_double<T>(apply_epilogue<double>(a.activation, a.alpha, a.beta, acc, bias != nullptr, b,
                                                   residual != nullptr, res));
  }
}

template <typename T>
void launch_ref(const ConvCall& call, const RefArgs& a) {
  const int64_t total = a.n * a.k * a.p * a.q;
  constexpr int kThreads = 256;
  // Enough blocks to fill the GPU several times over; the grid-stride loop covers the rest.
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(1) << 20);
  conv_ref_kernel<T><<<unsigned(blocks), kThreads, 0, as_stream(call.stream)>>>(
      a, static_cast<const T*>(call.src.data), static_cast<const T*>(call.wei.data), static_cast<T*>(call.dst.data),
      static_cast<const T*>(call.epilogue.bias), static_cast<const T*>(call.epilogue.residual));
  CK_LAUNCH("conv_ref_kernel");
}

class CudaRef final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_ref"; }
  std::string description() const override {
    return "GPU reference: one thread per output, double accumulation, every dtype and layout (the large-shape oracle)";
  }
  Support can_implement(const Conv2dProblem&, const ConvConfig& cfg) const override {
    if (cfg.math == MathMode::tf32) return Support::no("the reference computes in double; it has no tf32 mode.");
    return Support::yes();
  }
  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    const Epilogue& e = call.epilogue;
    RefArgs a{pb.n,         pb.c,          pb.h,          pb.w,          pb.k,
              pb.r,         pb.s,          pb.pad_h,      pb.pad_w,      pb.stride_h,
              pb.stride_w,  pb.dilation_h, pb.dilation_w, pb.c_per_group(), pb.k_per_group(),
              pb.p(),       pb.q(),        tensor4(call.src), tensor4(call.wei), tensor4(call.dst),
              e.activation, double(e.alpha), double(e.beta)};
    switch (call.dst.dtype) {
      case DType::f32: launch_ref<float>(call, a); break;
      case DType::f16: launch_ref<__half>(call, a); break;
      case DType::bf16: launch_ref<__nv_bfloat16>(call, a); break;
    }
  }
};

}  // namespace

const Algorithm* make_cuda_ref() {
  static CudaRef algo;
  return &algo;
}

}  // namespace convkit::detail
