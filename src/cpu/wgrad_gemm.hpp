// The CPU's fast weight gradients (wgrad_gemm.cpp, wgrad_depthwise.cpp), behind
// convkit::conv2d_backward_weight with BackwardOptions::cpu_fast.
#pragma once

#include "convkit/convkit.hpp"

namespace convkit::detail {

// Whether this build has it (OpenBLAS).
bool cpu_wgrad_gemm_available();

// gw = dL/dw from x and gz (validated by the caller; any dtype and layout, every problem whose GEMM
// dimensions fit an int). Throws Error(not_available) without OpenBLAS.
void cpu_wgrad_gemm(const Conv2dProblem& pb, const TensorView& x, const TensorView& gz, const TensorView& gw);

// The same for a depthwise problem (groups = C, any multiplier) by a direct loop (wgrad_depthwise.cpp).
void cpu_wgrad_depthwise(const Conv2dProblem& pb, const TensorView& x, const TensorView& gz, const TensorView& gw);

}  // namespace convkit::detail
