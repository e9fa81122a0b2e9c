// The oracle's inner product, shared by cpu_ref and every sampled check (bench, tests): output element
// (n, k, p, q) of the plain convolution, before any epilogue, accumulated in double, any dtype and layout.
#pragma once

#include <cstdint>

#include "convkit/problem.hpp"
#include "convkit/tensor.hpp"

namespace convkit::detail {

double reference_dot(const Conv2dProblem& pb, const TensorView& x, const TensorView& w, int64_t n, int64_t k,
                     int64_t p, int64_t q);

}  // namespace convkit::detail
