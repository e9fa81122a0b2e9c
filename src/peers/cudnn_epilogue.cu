// The cuDNN peer's epilogue: a separate elementwise kernel after cuDNN's convolution, i.e. exactly what
// a framework user runs today ("cuDNN conv, then bias, activation and residual add"), so the fused-epilogue
// comparison is against that.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "common/activation.hpp"
#include "convkit/epilogue.hpp"
#include "convkit/tensor.hpp"
#include "cuda/common/check.cuh"

namespace convkit::detail {
namespace {

__device__ __forceinline__ float load_f(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float load_f(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store_f(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void store_f(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// One thread per output element (grid-stride). The channel of element i is (i / PQ) % K in NCHW and
// i % K in NHWC. NOTE: the residual may be the output itself: each element's residual is read before the
// same thread overwrites it, and no other thread touches that element.
template <typename T>
__global__ void cudnn_peer_epilogue_kernel(T* y, int64_t count, int64_t K, int64_t PQ, bool nhwc,
                                           const T* bias, const T* res, Activation act, float alpha,
                                           float beta) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const int64_t k = nhwc ? i % K : (i / PQ) % K;
    const float b = bias ? load_f(bias, k) : 0.0f;
    const float r = res ? load_f(res, i) : 0.0f;
    store_f(y, i, apply_epilogue<float>(act, alpha, beta, load_f(y, i), bias != nullptr, b, res != nullptr, r));
  }
}

template <typename T>
void launch(void* y, int64_t count, int64_t K, int64_t PQ, bool nhwc, const void* bias, const void* res,
            Activation act, float alpha, float beta, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((count + kThreads - 1) / kThreads, int64_t(1) << 20);
  cudnn_peer_epilogue_kernel<T><<<static_cast<unsigned>(std::max<int64_t>(blocks, 1)), kThreads, 0, stream>>>(
      static_cast<T*>(y), count, K, PQ, nhwc, static_cast<const T*>(bias), static_cast<const T*>(res), act,
      alpha, beta);
  CK_LAUNCH("cudnn_peer_epilogue_kernel");
}

}  // namespace

// y = act(alpha*y + bias[k] + beta*res) in place; `res` may equal `y`.
void cudnn_peer_epilogue(void* y, DType dtype, Layout layout, int64_t count, int64_t K, int64_t PQ,
                         const void* bias, const void* res, Activation act, float alpha, float beta,
                         void* stream) {
  if (count <= 0) return;
  const bool nhwc = layout == Layout::nhwc;
  cudaStream_t s = as_stream(stream);
  switch (dtype) {
    case DType::f32: launch<float>(y, count, K, PQ, nhwc, bias, res, act, alpha, beta, s); break;
    case DType::f16: launch<__half>(y, count, K, PQ, nhwc, bias, res, act, alpha, beta, s); break;
    case DType::bf16: launch<__nv_bfloat16>(y, count, K, PQ, nhwc, bias, res, act, alpha, beta, s); break;
  }
}

}  // namespace convkit::detail
