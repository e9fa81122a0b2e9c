// Epilogue arithmetic shared by every host and device implementation, so that all agree to the ulp
// where they can (the CPU reference applies it in double); SiLU and sigmoid divide within 2 ulp on the device
// (divide_fast).
#pragma once

#include <cmath>
#include <type_traits>

#include "convkit/epilogue.hpp"

#if defined(__CUDACC__)
#define CONVKIT_HD __host__ __device__ __forceinline__
#else
#define CONVKIT_HD inline
#endif

namespace convkit::detail {

// a / b; on the device in float, __fdividef (a times an approximate reciprocal, within 2 ulp): IEEE division
// is a branch to a slow path per element, which kept SiLU over the 64-128 accumulators a thread of
// cuda_igemm_wgmma's persistent tiles holds from overlapping (EfficientNet-B0's 24 -> 144 + SiLU: 0.122 ms
// against 0.036 with ReLU6). With it, EfficientNet-B0's fused forward (bf16 batch 32, H200) took 1.60 ms of
// GPU time against 1.84, its SiLU layers on the persistent tiles 9 us against 14 (docs/perf.md 2026-12-04).
// For |b| past 2^126 (SiLU's or sigmoid's 1 + exp(-x) at x < -87, where the exact result is below 1e-36 x)
// it gives 0.
template <typename A, typename B>
CONVKIT_HD auto divide_fast(A a, B b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<A, float> && std::is_same_v<B, float>) {
    return __fdividef(a, b);
  } else {
    return a / b;
  }
#else
  return a / b;  // (the host's float SiLU divides in double: cmath's exp(float) here is exp(double))
#endif
}

// The argument u(x) of GELU's tanh form for 16-bit outputs on the device (gelu_16bit in
// src/cuda/common/epilogue.cuh): Phi(x) = (1 + tanh(u(x))) / 2, u an odd polynomial of degree 5 fitted to
// atanh(erf(x / sqrt 2)), minimax in Phi's absolute error (1.9e-5 with an exact tanh); x is clamped to
// +-8, past which Phi is 0 or 1 in fp32 and before which u still rises (its maximum is at 8.7). Kept here,
// shared by host and device, so that a CPU test checks the coefficients (GeluTanhArg, tests/test_activation.cpp).
CONVKIT_HD float gelu_tanh_arg(float x) {
  const float c = fminf(fmaxf(x, -8.0f), 8.0f), c2 = c * c;
  return c * fmaf(fmaf(-3.1594868e-4f, c2, 3.6798727e-2f), c2, 7.9771757e-1f);
}

// gelu is the exact erf form (PyTorch's default approximate='none'); on the device, outputs of 16 bits take
// the tanh form above (activate_out in src/cuda/common/epilogue.cuh).
// NOTE: on the device, x Phi(x) with Phi from erfc's exponential form (no branch, fewer instructions, more
// accurate in fp32's negative tail) made ConvNeXt-T's GELU Linears 5-10% slower, likely because its reciprocal
// and exponential both take the special-function units (docs/perf.md, 2026-12-06, branch pending/gelu-erfc).
template <typename T>
CONVKIT_HD T activate(Activation act, T x) {
  switch (act) {
    case Activation::relu: return x > T(0) ? x : T(0);
    case Activation::silu: return divide_fast(x, T(1) + exp(-x));
    case Activation::gelu: return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
    case Activation::relu6: return x > T(0) ? (x < T(6) ? x : T(6)) : T(0);
    case Activation::hardswish: {
      const T t = x + T(3);
      return x * (t > T(0) ? (t < T(6) ? t : T(6)) : T(0)) / T(6);
    }
    case Activation::sigmoid: return divide_fast(T(1), T(1) + exp(-x));
    case Activation::hardsigmoid: {
      const T t = x + T(3);
      return (t > T(0) ? (t < T(6) ? t : T(6)) : T(0)) / T(6);
    }
    case Activation::none: default: return x;
  }
}

// alpha*acc + bias + beta*residual, then the activation. `bias`/`res` are ignored when has_* is false.
template <typename T>
CONVKIT_HD T apply_epilogue(Activation act, T alpha, T beta, T acc, bool has_bias, T bias, bool has_res, T res) {
  T v = alpha * acc;
  if (has_bias) v += bias;
  if (has_res) v += beta * res;
  return activate(act, v);
}

}  // namespace convkit::detail
