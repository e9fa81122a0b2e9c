// The two implementations behind convkit::conv2d_per_sample (include/convkit/per_sample.hpp). Both receive
// validated tensors. The CUDA one lives in src/cuda/direct/per_sample.cu, with a throwing stub in
// src/core/per_sample_nocuda.cpp for builds without CUDA.
#pragma once

#include "convkit/convkit.hpp"

namespace convkit::detail {

void cpu_conv2d_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei,
                           const TensorView& dst, const Epilogue& epi);

void cuda_conv2d_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei,
                            const TensorView& dst, const Epilogue& epi, void* stream);

}  // namespace convkit::detail
