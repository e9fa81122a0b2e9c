// The one epilogue layer of the CUDA kernels: element conversion on the device, the fused epilogue
// (DeviceEpilogue<T>, built on detail::apply_epilogue in src/common/activation.hpp so that host and device
// agree on the arithmetic) and the activation over a thread's values (activate_all). Device code only: the
// .cu files include it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/activation.hpp"
#include "convkit/epilogue.hpp"

namespace convkit::detail {

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

// The tanh instruction (MUFU.TANH, sm_75 and later; relative error about 1.1e-5).
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// GELU and SiLU for outputs of 16 bits, on one tanh instruction each: x (1 + tanh(u)) / 2 with u =
// gelu_tanh_arg(x) (activation.hpp) for GELU, u = x / 2 for SiLU (x sigmoid(x), exactly). erff is a select
// chain, a polynomial and a divergent exponential; expf and the division are two special-function
// operations. Their error against the exact function: within 2^-15 |x| for GELU (the fit's 1.9e-5 and the
// instruction's) and 2^-17 |x| for SiLU, measured on the GPU by CudaActivation.SixteenBitFormsWithinBound;
// an output's own rounding is 2^-9 (bf16) or 2^-12 (f16) relative. fp32 outputs keep activate()'s forms.
__device__ __forceinline__ float gelu_16bit(float x) {
  const float h = 0.5f * x;
  return fmaf(h, tanh_approx(gelu_tanh_arg(x)), h);
}
__device__ __forceinline__ float silu_16bit(float x) {
  const float h = 0.5f * x;
  return fmaf(h, tanh_approx(h), h);
}

template <typename T>
inline constexpr bool kSixteenBit = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// The activation of a value bound for an output of type T: activate()'s, except GELU and SiLU into 16 bits.
// The depthwise kernels (src/cuda/direct/depthwise*) pass float, the exact forms, whatever their output: they
// are bound by memory, which hides the activation, and the tanh forms' registers gave eight of their 16-bit
// instances 8-16-byte stack frames.
template <typename T>
__device__ __forceinline__ float activate_out(Activation act, float x) {
  if constexpr (kSixteenBit<T>) {
    if (act == Activation::gelu) return gelu_16bit(x);
    if (act == Activation::silu) return silu_16bit(x);
  }
  return activate<float>(act, x);
}

// apply_epilogue's arithmetic with activate_out<T>'s activation.
template <typename T>
__device__ __forceinline__ float epilogue_out(Activation act, float alpha, float beta, float acc, bool has_bias,
                                              float bias, bool has_res, float res) {
  return activate_out<T>(act, apply_epilogue<float>(Activation::none, alpha, beta, acc, has_bias, bias, has_res, res));
}

// The epilogue of every CUDA kernel: y = act(alpha*acc + bias[k] + beta*residual[o]) in fp32, stored as T.
// bias and residual are T (the output's dtype); the residual may alias the output: operator() reads
// residual[o], so the caller stores dst[o] after calling it, from the same thread. Passed to kernels by
// value. acc: the convolution sum of output channel k (global index; per-sample weights: the bias index
// img*K + k); o: the output element's offset.
template <typename T>
struct DeviceEpilogue {
  const T* bias = nullptr;
  const T* residual = nullptr;
  Activation activation = Activation::none;
  float alpha = 1.0f, beta = 1.0f;

  static DeviceEpilogue from(const Epilogue& e) {
    return {static_cast<const T*>(e.bias), static_cast<const T*>(e.residual), e.activation, e.alpha, e.beta};
  }

  __device__ __forceinline__ float operator()(float acc, int64_t k, int64_t o) const {
    const bool has_bias = bias != nullptr, has_res = residual != nullptr;
    return epilogue_out<T>(activation, alpha, beta, acc, has_bias, has_bias ? elem_to_float<T>(bias[k]) : 0.0f,
                           has_res, has_res ? elem_to_float<T>(residual[o]) : 0.0f);
  }
};

// The activation on N values of one thread bound for an output of type T, the switch taken once instead of
// once per value (each case is activate_out<T>() with a constant, so the arithmetic is the same). Every index
// is a constant after unrolling, so the values stay in registers.
// NOTE: a case that loops without unrolling indexes v at run time, and then the caller's whole array lives
// in local memory even where that case never runs (a looping default case put cuda_igemm_wgmma's persistent
// accumulators in a 128- or 256-byte stack frame: `nvcc -Xptxas -v` shows it as "bytes stack frame", not as
// a spill). A value outside the enum is left as it is, as activate() does.
static_assert(int(Activation::hardsigmoid) == 7, "activate_all has a case for every Activation");
template <int N, typename T>
__device__ __forceinline__ void activate_all(Activation act, float* v) {
  switch (act) {
    case Activation::none: return;
#define CONVKIT_ACTIVATE_ALL(A) \
  case Activation::A:           \
    _Pragma("unroll") for (int i = 0; i < N; ++i) v[i] = activate_out<T>(Activation::A, v[i]); return;
    CONVKIT_ACTIVATE_ALL(relu)
    CONVKIT_ACTIVATE_ALL(relu6)
    CONVKIT_ACTIVATE_ALL(silu)
    CONVKIT_ACTIVATE_ALL(gelu)
    CONVKIT_ACTIVATE_ALL(hardswish)
    CONVKIT_ACTIVATE_ALL(sigmoid)
    CONVKIT_ACTIVATE_ALL(hardsigmoid)
#undef CONVKIT_ACTIVATE_ALL
    default: return;
  }
}

}  // namespace convkit::detail
