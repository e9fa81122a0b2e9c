// The fused epilogue over a run of contiguous outputs on the CPU, for the algorithms that finish their sums
// in a pass of their own (cpu_im2col_gemm after its GEMM, cpu_depthwise after a row's taps).
//
//   out[j] = act(alpha * acc[j] + bias + beta * res[j]),  j < n,  rounded to the output's dtype
//
// Per element the arithmetic is apply_epilogue<float>'s (src/common/activation.hpp), but the activation,
// the dtype and which operands are present are decided once a run instead of once an element, so the loop
// body is straight-line code the compiler vectorises (relu, relu6, hardswish and hardsigmoid become
// min/max/blends, bit for bit the element loop's; the per-element switch was a branch the data decided).
// SiLU, sigmoid and GELU are computed in float as the CUDA kernels do, their expf and erff 16 values at a time
// from glibc's vector math library (libmvec) where the build has it (activate<float> on the host takes exp
// and erf in double: a few float ulps apart). tests/test_epilogue_span.cpp; epilogue_span.cpp has the
// measurements.
#pragma once

#include <cstdint>

#include "convkit/epilogue.hpp"
#include "convkit/tensor.hpp"

namespace convkit::detail {

// How the bias of a run is indexed: none, one value for the whole run (an NCHW row: one channel), or one
// value an element (an NHWC pixel: bias[j] is channel j's).
enum class SpanBias { none, one, per_element };

// out[j] = activation(alpha * acc[j] + bias + e.beta * res[j]) for j < n, stored as dt (16-bit: rounded
// once, to nearest even). bias and res are dt's elements (bias: where `bm` says, ignored when null; res:
// null for none). out may be acc (f32), and res may be out: each element is read before it is written.
// e supplies the activation and beta; alpha is separate, since a GEMM may have applied it (pass 1 then).
void epilogue_span(const Epilogue& e, float alpha, DType dt, const float* acc, void* out, int64_t n, const void* bias,
                   SpanBias bm, const void* res);

// Whether SiLU, sigmoid and GELU use libmvec's vector exp / erf in this build (`convkit doctor`-style facts).
bool epilogue_span_vector_math();

}  // namespace convkit::detail
