// convkit/per_sample.hpp: a convolution with a different filter bank for every sample (dynamic convolution).
//
// The problem is the ordinary one (N, C, H, W, K, R, S, padding, stride, dilation, groups); the difference is
// the weight: sample n is convolved with its own K filters, rows n*K .. n*K+K-1 of
//   wei: dims {N*K, C/groups, R, S}, KCRS when the tensors are nchw, KRSC when they are nhwc,
// and the bias (optional) has N*K elements, bias[n*K + k]. The residual (optional) is shaped like the output
// and may alias it, as in conv2d(). One call runs the whole batch in one kernel (one launch on CUDA).
#pragma once

#include "convkit/convkit.hpp"

namespace convkit {

// The logical dims the per-sample weight must have: {N*K, C/groups, R, S}.
std::array<int64_t, 4> per_sample_weight_dims(const Conv2dProblem& problem);

// Checks shapes, dtypes, layouts, devices and nulls; one sentence per failure.
Status validate_per_sample(const Conv2dProblem& problem, const TensorView& src, const TensorView& wei,
                           const TensorView& dst, const Epilogue& epilogue);

// dst = act(alpha * conv(src[n], wei[n*K:(n+1)*K]) + bias[n*K + k] + beta * residual), for every sample n.
// A plan like conv2d's (convkit/plan.hpp, with Operands::per_sample): options.algo "auto", "autotune" or the
// name of an algorithm whose accepts() takes per-sample weights (`convkit list`: cuda_igemm_wgmma,
// cuda_igemm_mma, cuda_igemm_simt, cuda_per_sample, cpu_per_sample), logged under CONVKIT_LOG=dispatch and
// tuned into the tune cache like conv2d. Supported: f32 on the CPU; f32, f16 and bf16 (fp32 accumulation) on
// CUDA. Throws convkit::Error otherwise.
void conv2d_per_sample(const Conv2dProblem& problem, const TensorView& src, const TensorView& wei,
                       const TensorView& dst, const Epilogue& epilogue = {}, const RunOptions& options = {});

}  // namespace convkit
