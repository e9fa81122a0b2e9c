// For the tests: the CUDA epilogue's activation of each value in fp32, as a kernel whose output has dtype
// `out` computes it before the output's rounding (activate_out in epilogue.cuh). Throws convkit::Error
// without a GPU.
#pragma once

#include <vector>

#include "convkit/epilogue.hpp"
#include "convkit/tensor.hpp"

namespace convkit::detail {

std::vector<float> cuda_activation_probe(Activation act, DType out, const std::vector<float>& x);

}  // namespace convkit::detail
