// The epilogue on the device for fp32 outputs: y = act(alpha*acc + bias[k] + beta*residual[o]), built on
// detail::apply_epilogue (src/common/activation.hpp) so host and device agree on the arithmetic.
// Passed to kernels by value. The residual may alias the output: call it (which reads residual[o]) before
// storing to dst[o], from the thread that stores dst[o].
#pragma once

#include <cstdint>

#include "common/activation.hpp"
#include "convkit/epilogue.hpp"

namespace convkit::detail {

struct EpilogueF32 {
  const float* bias = nullptr;      // K elements or null
  const float* residual = nullptr;  // the output's shape and layout, or null; may equal dst
  Activation activation = Activation::none;
  float alpha = 1.0f, beta = 1.0f;

  static EpilogueF32 from(const Epilogue& e) {
    return {static_cast<const float*>(e.bias), static_cast<const float*>(e.residual), e.activation, e.alpha,
            e.beta};
  }

  // acc: the convolution sum of output channel k (global index; per-sample weights: the bias index
  // img*K + k); o: the output element's offset.
#if defined(__CUDACC__)
  __device__ __forceinline__ float operator()(float acc, int64_t k, int64_t o) const {
    const bool has_bias = bias != nullptr, has_res = residual != nullptr;
    return apply_epilogue<float>(activation, alpha, beta, acc, has_bias, has_bias ? bias[k] : 0.0f, has_res,
                                 has_res ? residual[o] : 0.0f);
  }
#endif
};

#if defined(__CUDACC__)
// The activation on N values of one thread, the switch taken once instead of once per value (each case
// is activate() with a constant, so the arithmetic is the same).
template <int N>
__device__ __forceinline__ void activate_all(Activation act, float* v) {
  switch (act) {
    case Activation::none: return;
#define CONVKIT_ACTIVATE_ALL(A) \
  case Activation::A:           \
    _Pragma("unroll") for (int i = 0; i < N; ++i) v[i] = activate<float>(Activation::A, v[i]); return;
    CONVKIT_ACTIVATE_ALL(relu)
    CONVKIT_ACTIVATE_ALL(relu6)
    CONVKIT_ACTIVATE_ALL(silu)
    CONVKIT_ACTIVATE_ALL(gelu)
    CONVKIT_ACTIVATE_ALL(hardswish)
#undef CONVKIT_ACTIVATE_ALL
    default:
      for (int i = 0; i < N; ++i) v[i] = activate<float>(act, v[i]);
  }
}
#endif

}  // namespace convkit::detail
