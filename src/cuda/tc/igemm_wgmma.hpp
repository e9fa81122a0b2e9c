// The entry points of cuda_igemm_wgmma that are not the Algorithm interface: the per-sample-weights mode
// used by conv2d_per_sample (one launch over the batch; grid.z walks the samples, the weights' tensor map
// spans all N*K filter rows).
#pragma once

#include "convkit/epilogue.hpp"
#include "convkit/problem.hpp"
#include "convkit/tensor.hpp"

namespace convkit::detail {

// Whether the Hopper kernel takes this per-sample problem: a compute capability 9.0 device, NHWC, f16 or
// bf16, C/groups % 8 == 0, input and weights 16-byte aligned, within its limits.
bool wgmma_per_sample_supported(const Conv2dProblem& p, const TensorView& src, const TensorView& wei);
// wei: {N*K, C/groups, R, S} in KRSC; bias (if any) N*K elements. Enqueued on `stream`.
void wgmma_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei, const TensorView& dst,
                      const Epilogue& e, void* stream);

}  // namespace convkit::detail
