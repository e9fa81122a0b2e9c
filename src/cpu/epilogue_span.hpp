// The fused epilogue over a run of contiguous outputs on the CPU, for the algorithms that finish their sums
// in a pass of their own (cpu_im2col_gemm after its GEMM, cpu_depthwise after a row's taps).
//
//   out[j] = act(alpha * acc[j] + bias + beta * res[j]),  j < n,  rounded to the output's dtype
//
// Per element this is apply_epilogue<float> (src/common/activation.hpp), so the results are those of the
// element-by-element loop it replaces. What differs is that the activation, the dtype and which operands are
// present are decided once a run instead of once an element: the loop body is straight-line code the
// compiler vectorises (relu, relu6, hardswish, hardsigmoid become min/max/blend), where the per-element
// switch was a branch the data decided. Measured (2-vCPU Zen 4, a 16 -> 96 1x1 layer at 80x80 with bias and
// ReLU6, float32 NHWC, through the PyTorch op): 2.11 ms, of which the epilogue ~2.0, against 0.12 ms for
// the GEMM; docs/perf.md 2026-12-05.
#pragma once

#include <cstdint>

#include "common/activation.hpp"
#include "common/element.hpp"
#include "convkit/epilogue.hpp"
#include "convkit/tensor.hpp"

namespace convkit::detail {

// How the bias of a run is indexed: none, one value for the whole run (an NCHW row: one channel), or one
// value an element (an NHWC pixel: bias[j] is channel j's).
enum class SpanBias { none, one, per_element };

namespace span_impl {

template <Activation A, DType D, SpanBias B, bool kRes>
void run(float alpha, float beta, const float* acc, void* out, int64_t n, const void* bias, const void* res) {
  const float b0 = B == SpanBias::one ? load_as_float(bias, D, 0) : 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float b = B == SpanBias::per_element ? load_as_float(bias, D, j) : b0;
    const float r = kRes ? load_as_float(res, D, j) : 0.0f;
    store_from_float(out, D, j, apply_epilogue<float>(A, alpha, beta, acc[j], B != SpanBias::none, b, kRes, r));
  }
}

template <Activation A, DType D>
void with_operands(float alpha, float beta, const float* acc, void* out, int64_t n, const void* bias, SpanBias bm,
                   const void* res) {
  const bool r = res != nullptr;
  switch (bm) {
    case SpanBias::none:
      return r ? run<A, D, SpanBias::none, true>(alpha, beta, acc, out, n, bias, res)
               : run<A, D, SpanBias::none, false>(alpha, beta, acc, out, n, bias, res);
    case SpanBias::one:
      return r ? run<A, D, SpanBias::one, true>(alpha, beta, acc, out, n, bias, res)
               : run<A, D, SpanBias::one, false>(alpha, beta, acc, out, n, bias, res);
    case SpanBias::per_element:
      return r ? run<A, D, SpanBias::per_element, true>(alpha, beta, acc, out, n, bias, res)
               : run<A, D, SpanBias::per_element, false>(alpha, beta, acc, out, n, bias, res);
  }
}

template <Activation A>
void with_dtype(DType dt, float alpha, float beta, const float* acc, void* out, int64_t n, const void* bias,
                SpanBias bm, const void* res) {
  switch (dt) {
    case DType::f32: return with_operands<A, DType::f32>(alpha, beta, acc, out, n, bias, bm, res);
    case DType::f16: return with_operands<A, DType::f16>(alpha, beta, acc, out, n, bias, bm, res);
    case DType::bf16: return with_operands<A, DType::bf16>(alpha, beta, acc, out, n, bias, bm, res);
  }
}

}  // namespace span_impl

// out[j] = activation(alpha * acc[j] + bias + e.beta * res[j]) for j < n, stored as dt (16-bit: rounded
// once, to nearest even). bias and res are dt's elements (bias: where `bm` says; null with SpanBias::none;
// res: null for none). out may be acc (f32), and res may be out: each element is read before it is written.
// e supplies the activation and beta; alpha is separate, since a GEMM may have applied it (pass 1 then).
inline void epilogue_span(const Epilogue& e, float alpha, DType dt, const float* acc, void* out, int64_t n,
                          const void* bias, SpanBias bm, const void* res) {
  using namespace span_impl;
  if (bias == nullptr) bm = SpanBias::none;
  const float beta = e.beta;
  switch (e.activation) {
#define CONVKIT_SPAN_CASE(A) \
  case Activation::A: return with_dtype<Activation::A>(dt, alpha, beta, acc, out, n, bias, bm, res);
    CONVKIT_SPAN_CASE(none)
    CONVKIT_SPAN_CASE(relu)
    CONVKIT_SPAN_CASE(relu6)
    CONVKIT_SPAN_CASE(silu)
    CONVKIT_SPAN_CASE(gelu)
    CONVKIT_SPAN_CASE(hardswish)
    CONVKIT_SPAN_CASE(sigmoid)
    CONVKIT_SPAN_CASE(hardsigmoid)
#undef CONVKIT_SPAN_CASE
  }
  // (a value outside the enum: as activate() does, no activation)
  with_dtype<Activation::none>(dt, alpha, beta, acc, out, n, bias, bm, res);
}

}  // namespace convkit::detail
