// The CUDA half of convkit/backward.hpp: the depthwise gradient kernels (src/cuda/direct/depthwise_backward.cu)
// and the dense weight-gradient kernel (src/cuda/tc/wgrad_mma.cu), throwing stand-ins in src/core/no_cuda.cpp
// when CUDA is not built in.
#pragma once

#include <cstddef>
#include <string>

#include "convkit/backward.hpp"

namespace convkit::detail {

// Whether the CUDA kernels take the problem (depthwise, sizes within their 32-bit indexing), and why not.
Support cuda_backward_supports(const Conv2dProblem& problem, const ConvConfig& config);
// The kernel a call runs, for the dispatch log ("depthwise_dgrad_kernel (NHWC, 8-channel vectors)").
std::string cuda_backward_kernel_name(const Conv2dProblem& problem, const ConvConfig& config, bool weight);
void cuda_depthwise_backward_data(const Conv2dProblem& problem, const ConvConfig& config, const void* grad_out,
                                  const void* wei, void* grad_in, void* stream);
size_t cuda_depthwise_backward_weight_workspace(const Conv2dProblem& problem, const ConvConfig& config);
void cuda_depthwise_backward_weight(const Conv2dProblem& problem, const ConvConfig& config, const void* src,
                                    const void* grad_out, void* grad_wei, void* workspace, void* stream);

// The weight gradient of a dense (groups = 1) f16/bf16 NHWC problem with C and K multiples of 8.
Support cuda_dense_wgrad_supports(const Conv2dProblem& problem, const ConvConfig& config);
std::string cuda_dense_wgrad_kernel_name(const Conv2dProblem& problem, const ConvConfig& config);
size_t cuda_dense_wgrad_workspace(const Conv2dProblem& problem, const ConvConfig& config);
// Throws convkit::Error (unsupported) when src or grad_out is not 16-byte aligned.
void cuda_dense_wgrad(const Conv2dProblem& problem, const ConvConfig& config, const void* src, const void* grad_out,
                      void* grad_wei, void* workspace, void* stream);

}  // namespace convkit::detail
