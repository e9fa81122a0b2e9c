// Epilogue arithmetic shared by every host and device implementation, so that all agree to the ulp
// where they can (the CPU reference applies it in double).
#pragma once

#include <cmath>

#include "convkit/epilogue.hpp"

#if defined(__CUDACC__)
#define CONVKIT_HD __host__ __device__ __forceinline__
#else
#define CONVKIT_HD inline
#endif

namespace convkit::detail {

// gelu is the exact erf form (PyTorch's default approximate='none').
template <typename T>
CONVKIT_HD T activate(Activation act, T x) {
  switch (act) {
    case Activation::relu: return x > T(0) ? x : T(0);
    case Activation::silu: return x / (T(1) + exp(-x));
    case Activation::gelu: return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
    case Activation::relu6: return x > T(0) ? (x < T(6) ? x : T(6)) : T(0);
    case Activation::hardswish: {
      const T t = x + T(3);
      return x * (t > T(0) ? (t < T(6) ? t : T(6)) : T(0)) / T(6);
    }
    case Activation::sigmoid: return T(1) / (T(1) + exp(-x));
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
