// The entry points of cuda_igemm_mma that are not the Algorithm interface: the per-sample-weights mode
// used by conv2d_per_sample (one launch over the batch; grid.z walks the samples).
#pragma once

#include "convkit/epilogue.hpp"
#include "convkit/problem.hpp"
#include "convkit/tensor.hpp"

namespace convkit::detail {

// Whether the tensor-core kernel takes this per-sample problem: CUDA, NHWC, f16 or bf16, within its limits.
bool mma_per_sample_supported(const Conv2dProblem& p, const TensorView& src);
// wei: {N*K, C/groups, R, S} in KRSC; bias (if any) N*K elements. Enqueued on `stream`.
void mma_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei, const TensorView& dst,
                    const Epilogue& e, void* stream);

}  // namespace convkit::detail
