// The CUDA half of conv2d_per_sample in a build without CUDA: says so.
#ifndef CONVKIT_WITH_CUDA
#include "convkit/status.hpp"
#include "core/per_sample_hooks.hpp"

namespace convkit::detail {

void cuda_conv2d_per_sample(const Conv2dProblem&, const TensorView&, const TensorView&, const TensorView&,
                            const Epilogue&, void*) {
  throw Error(StatusCode::not_available,
              "conv2d_per_sample: this convkit was built without CUDA, so CUDA tensors cannot be used.");
}

}  // namespace convkit::detail
#endif  // CONVKIT_WITH_CUDA
