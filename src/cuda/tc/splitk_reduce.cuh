// The split-K reduce kernel of the two implicit-GEMM kernels that split k (cuda_igemm_mma, cuda_igemm_wgmma):
// the fp32 partials summed in split order, then the epilogue. Include only from their translation units (a
// kernel template here is instantiated in every object that includes it).
#pragma once

#include <algorithm>

#include "cuda/tc/igemm_tc.cuh"

namespace convkit::detail {
namespace {

// Adds the split-K partials in split order and applies the epilogue: one thread per output element.
template <typename T>
__global__ void __launch_bounds__(256) tc_splitk_reduce_kernel(const TcArgs a) {
  const DeviceEpilogue<T> epi{static_cast<const T*>(a.bias), static_cast<const T*>(a.residual), a.act, a.alpha,
                          a.beta};
  T* dst = static_cast<T*>(a.dst);
  const int64_t total = a.Mtot * a.K, plane = total;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int sp = 0; sp < a.splits; ++sp) s += a.ws[sp * plane + o];
    const int64_t mg = o / a.K;
    const int k = int(o - mg * a.K);
    const int64_t b = mg / a.Mb;
    dst[o] = float_to_elem<T>(epi(s, b * a.bias_b_stride + k, o));
  }
}

inline void launch_splitk_reduce(const TcArgs& a, DType dt, cudaStream_t stream) {
  const int64_t total = a.Mtot * a.K;
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(total, 256), 132 * 16));
  switch (dt) {
    case DType::f16: tc_splitk_reduce_kernel<__half><<<blocks, 256, 0, stream>>>(a); break;
    case DType::bf16: tc_splitk_reduce_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(a); break;
    case DType::f32: tc_splitk_reduce_kernel<float><<<blocks, 256, 0, stream>>>(a); break;
  }
  CK_LAUNCH("tc_splitk_reduce_kernel");
}

}  // namespace
}  // namespace convkit::detail
