// epilogue_span (epilogue_span.hpp): the CPU's fused epilogue over a run of outputs.
//
// Measured (2-vCPU Zen 4, float32 NHWC, through the PyTorch op, 2026-12-05; docs/perf.md):
//   16 -> 96 1x1 at 80x80, bias + ReLU6: 2.11 ms before (the GEMM 0.12 ms; the rest the element loop's
//   data-dependent branches), 0.17 ms after. The same layer with SiLU: 2.15 ms before (activate<float>'s exp
//   in double, ~5.5 ns an element), 1.23 ms with libmvec's exp of 8 doubles (identical results), 0.30 ms with
//   its expf of 16 floats on whole vectors (the arithmetic of the CUDA kernels: a few float ulps from the
//   double route); torch's convolution and F.silu 0.29 ms.
#include "cpu/epilogue_span.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/activation.hpp"
#include "common/element.hpp"
#include "cpu/vec16.hpp"

#if defined(CONVKIT_HAVE_LIBMVEC) && defined(__x86_64__) && (defined(__AVX512F__) || defined(__AVX2__))
#include <immintrin.h>
#define CONVKIT_SPAN_MVEC 1
// glibc's vector math functions (the x86_64 vector function ABI: 'e' = AVX-512 with 16 float lanes, 'd' =
// AVX2 with 8): expf since glibc 2.22, erff since 2.35; within 4 ulp (glibc's manual).
extern "C" {
#if defined(__AVX512F__)
__m512 _ZGVeN16v_expf(__m512);
#if __GLIBC_PREREQ(2, 35)
__m512 _ZGVeN16v_erff(__m512);
#define CONVKIT_SPAN_MVEC_ERF 1
#endif
#else
__m256 _ZGVdN8v_expf(__m256);
#if __GLIBC_PREREQ(2, 35)
__m256 _ZGVdN8v_erff(__m256);
#define CONVKIT_SPAN_MVEC_ERF 1
#endif
#endif
}
#endif

namespace convkit::detail {
namespace {

constexpr int kLanes = 16;  // values a vector math call

// v[i] = expf(v[i]) or erff(v[i]) for 16 floats.
inline void exp16(float* v) {
#if defined(CONVKIT_SPAN_MVEC) && defined(__AVX512F__)
  _mm512_storeu_ps(v, _ZGVeN16v_expf(_mm512_loadu_ps(v)));
#elif defined(CONVKIT_SPAN_MVEC)
  _mm256_storeu_ps(v, _ZGVdN8v_expf(_mm256_loadu_ps(v)));
  _mm256_storeu_ps(v + 8, _ZGVdN8v_expf(_mm256_loadu_ps(v + 8)));
#else
  for (int i = 0; i < kLanes; ++i) v[i] = std::exp(v[i]);
#endif
}

inline void erf16(float* v) {
#if defined(CONVKIT_SPAN_MVEC_ERF) && defined(__AVX512F__)
  _mm512_storeu_ps(v, _ZGVeN16v_erff(_mm512_loadu_ps(v)));
#elif defined(CONVKIT_SPAN_MVEC_ERF)
  _mm256_storeu_ps(v, _ZGVdN8v_erff(_mm256_loadu_ps(v)));
  _mm256_storeu_ps(v + 8, _ZGVdN8v_erff(_mm256_loadu_ps(v + 8)));
#else
  for (int i = 0; i < kLanes; ++i) v[i] = std::erf(v[i]);
#endif
}

// The value before the activation: apply_epilogue<float>'s arithmetic with no activation.
template <DType D, SpanBias B, bool kRes>
inline float pre(float alpha, float beta, const float* acc, int64_t j, float b0, const void* bias, const void* res) {
  const float b = B == SpanBias::per_element ? load_as_float(bias, D, j) : b0;
  const float r = kRes ? load_as_float(res, D, j) : 0.0f;
  return apply_epilogue<float>(Activation::none, alpha, beta, acc[j], B != SpanBias::none, b, kRes, r);
}

template <DType D>
inline void load16(v16& v, const void* p, int64_t j) {
  if constexpr (D == DType::f32) {
    std::memcpy(&v, static_cast<const float*>(p) + j, sizeof(v));
  } else if constexpr (D == DType::bf16) {
    bf16_to_floats(v, static_cast<const uint16_t*>(p) + j);
  } else {
    f16_to_floats(v, static_cast<const uint16_t*>(p) + j);
  }
}

template <DType D>
inline void store16(void* p, int64_t j, const v16& v) {
  if constexpr (D == DType::f32) {
    std::memcpy(static_cast<float*>(p) + j, &v, sizeof(v));
  } else if constexpr (D == DType::bf16) {
    floats_to_bf16(static_cast<uint16_t*>(p) + j, v);
  } else {
#ifdef CONVKIT_VEC16_F16_STORES
    floats_to_f16(static_cast<uint16_t*>(p) + j, v);
#else
    for (int i = 0; i < kLanes; ++i) store_from_float(p, D, j + i, v[i]);
#endif
  }
}

// SiLU, sigmoid and GELU of 16 values, in float as the CUDA kernels compute them: x / (1 + exp(-x)),
// 1 / (1 + exp(-x)) and 0.5 * x * (1 + erf(x / sqrt 2)).
template <Activation A>
inline void activate16(const v16& x, v16& y) {
  alignas(64) float t[kLanes];
  const v16 one = v16{} + 1.0f;
  if constexpr (A == Activation::gelu) {
    const v16 s = x * 0.70710678118654752440f;
    std::memcpy(t, &s, sizeof(s));
    erf16(t);
    v16 e;
    std::memcpy(&e, t, sizeof(e));
    y = 0.5f * x * (one + e);
  } else {
    const v16 m = -x;
    std::memcpy(t, &m, sizeof(m));
    exp16(t);
    v16 e;
    std::memcpy(&e, t, sizeof(e));
    if constexpr (A == Activation::silu) {
      y = x / (one + e);
    } else {
      y = one / (one + e);
    }
  }
}

template <Activation A, DType D, SpanBias B, bool kRes>
void run(float alpha, float beta, const float* acc, void* out, int64_t n, const void* bias, const void* res) {
  const float b0 = B == SpanBias::one ? load_as_float(bias, D, 0) : 0.0f;
  constexpr bool kVecAct = A == Activation::silu || A == Activation::sigmoid || A == Activation::gelu;
#ifdef CONVKIT_VEC16_F16_STORES
  // float16 takes whole chunks for every activation: its scalar conversions (branches, a subnormal's ldexp)
  // kept the compiler from vectorising the plain loop below, as it does for float32 and bfloat16
  constexpr bool kChunks = kVecAct || D == DType::f16;
#else
  constexpr bool kChunks = kVecAct;
#endif
  if constexpr (kChunks) {
    int64_t j0 = 0;
    for (; j0 + kLanes <= n; j0 += kLanes) {  // whole chunks as vectors; the same arithmetic as pre()
      v16 x, t, y;
      load16<DType::f32>(x, acc, j0);
      x = alpha * x;
      if constexpr (B == SpanBias::one) x += b0;
      if constexpr (B == SpanBias::per_element) {
        load16<D>(t, bias, j0);
        x += t;
      }
      if constexpr (kRes) {
        load16<D>(t, res, j0);
        x += beta * t;
      }
      if constexpr (kVecAct) {
        activate16<A>(x, y);
      } else {
#pragma GCC unroll 16
        for (int i = 0; i < kLanes; ++i) y[i] = activate<float>(A, x[i]);
      }
      store16<D>(out, j0, y);
    }
    if (!kVecAct) {  // the tail, one value at a time
      for (int64_t j = j0; j < n; ++j)
        store_from_float(out, D, j, activate<float>(A, pre<D, B, kRes>(alpha, beta, acc, j, b0, bias, res)));
    } else if (j0 < n) {  // the tail: zeros past n
      const int m = int(n - j0);
      v16 x = {};
      for (int i = 0; i < m; ++i) x[i] = pre<D, B, kRes>(alpha, beta, acc, j0 + i, b0, bias, res);
      v16 y;
      activate16<A>(x, y);
      for (int i = 0; i < m; ++i) store_from_float(out, D, j0 + i, y[i]);
    }
  } else {
    for (int64_t j = 0; j < n; ++j)
      store_from_float(out, D, j, activate<float>(A, pre<D, B, kRes>(alpha, beta, acc, j, b0, bias, res)));
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

}  // namespace

static_assert(int(Activation::hardsigmoid) == 7, "epilogue_span has a case for every Activation");

void epilogue_span(const Epilogue& e, float alpha, DType dt, const float* acc, void* out, int64_t n, const void* bias,
                   SpanBias bm, const void* res) {
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
  with_dtype<Activation::none>(dt, alpha, beta, acc, out, n, bias, bm, res);  // (outside the enum: as activate())
}

bool epilogue_span_vector_math() {
#if defined(CONVKIT_SPAN_MVEC)
  return true;
#else
  return false;
#endif
}

}  // namespace convkit::detail
