// What the tensor-core kernels (cuda_igemm_wmma, cuda_igemm_mma) share: the configuration gate, element
// conversion on the device, and the fused epilogue for 16-bit and fp32 outputs.
//
// Tensor-core configurations: NHWC activations with KRSC weights, and
//   f16 or bf16 tensors (fp32 accumulation, output rounded once, to nearest even), or
//   f32 tensors with MathMode::tf32 (operands rounded to tf32 on the way into the MMA, fp32 accumulation).
// Strict fp32 is never computed on tensor cores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "common/activation.hpp"
#include "convkit/algorithm.hpp"
#include "convkit/epilogue.hpp"

namespace convkit::detail {

inline Support require_tensor_core_config(const ConvConfig& cfg) {
  if (cfg.layout != Layout::nhwc)
    return Support::no("tensor-core kernels read NHWC activations and KRSC weights; NCHW tensors need an explicit "
                       "transform first (convkit bench --layout nchw shows its cost).");
  if (cfg.dtype == DType::f32 && cfg.math != MathMode::tf32)
    return Support::no("strict fp32 does not run on tensor cores; ask for tf32 math (--dtype tf32) or use f16/bf16.");
  return Support::yes();
}

// fp32 -> tf32 (10 mantissa bits kept, the low 13 bits zero): convkit's tf32, to nearest with ties to
// even, in every tensor-core kernel (the host oracle of tests/test_tensor_core.cpp rounds the same way).
// sm_90 does it in one instruction (cvt.rn.tf32.f32 -> F2FP.TF32); cvt.rna (ties away, the only form
// before sm_90) is 3 there. Older targets round in integer arithmetic: add half an ulp (less one on an
// even tf32 mantissa), then clear the low bits; inf passes, NaN stays a (quiet) NaN.
// NOTE: cuda_igemm_wgmma rounds every activation stage in shared memory with this: cvt.rna made it
// 14 instructions per 16-byte chunk, cvt.rn 6 (docs/perf.md, 2026-11-29, commit d26f16b).
__device__ __forceinline__ uint32_t tf32_rne_bits(uint32_t f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t r;
  asm("cvt.rn.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(f)));
  return r;
#else
  if ((f & 0x7f800000u) == 0x7f800000u) return (f & 0x007fffffu) != 0 ? ((f | 0x00400000u) & 0xffffe000u) : f;
  return (f + 0x00000fffu + ((f >> 13) & 1u)) & 0xffffe000u;
#endif
}
__device__ __forceinline__ float tf32_rne(float f) { return __uint_as_float(tf32_rne_bits(__float_as_uint(f))); }

// Element conversion on the device. T is __half, __nv_bfloat16 or float (the tf32 path).
template <typename T>
__device__ __forceinline__ float elem_to_float(T v);
template <>
__device__ __forceinline__ float elem_to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float elem_to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float elem_to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T float_to_elem(float v);
template <>
__device__ __forceinline__ float float_to_elem<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half float_to_elem<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 float_to_elem<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// y = act(alpha*acc + bias[k] + beta*residual[o]) in fp32, stored as T. bias and residual are T (the
// output's dtype); the residual may alias the output: operator() reads residual[o], so the caller stores
// dst[o] after calling it, from the same thread.
template <typename T>
struct EpilogueTc {
  const T* bias = nullptr;
  const T* residual = nullptr;
  Activation activation = Activation::none;
  float alpha = 1.0f, beta = 1.0f;

  static EpilogueTc from(const Epilogue& e) {
    return {static_cast<const T*>(e.bias), static_cast<const T*>(e.residual), e.activation, e.alpha, e.beta};
  }

  __device__ __forceinline__ float operator()(float acc, int64_t k, int64_t o) const {
    const bool has_bias = bias != nullptr, has_res = residual != nullptr;
    return apply_epilogue<float>(activation, alpha, beta, acc, has_bias,
                                 has_bias ? elem_to_float<T>(bias[k]) : 0.0f, has_res,
                                 has_res ? elem_to_float<T>(residual[o]) : 0.0f);
  }
};

}  // namespace convkit::detail
