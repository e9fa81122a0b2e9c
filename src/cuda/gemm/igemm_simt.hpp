// The entry points of cuda_igemm_simt that are not the Algorithm interface: the per-sample-weights mode
// used by conv2d_per_sample for f32 NCHW (one launch over the batch; grid.z walks the samples and groups).
#pragma once

#include "convkit/epilogue.hpp"
#include "convkit/problem.hpp"
#include "convkit/tensor.hpp"

namespace convkit::detail {

// Whether the SIMT implicit GEMM takes this per-sample problem: CUDA, f32, NCHW, within its limits.
bool simt_per_sample_supported(const Conv2dProblem& p, const TensorView& src);
// wei: {N*K, C/groups, R, S} in KCRS; bias (if any) N*K elements. Enqueued on `stream`.
void simt_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei, const TensorView& dst,
                     const Epilogue& e, void* stream);

}  // namespace convkit::detail
