// The CPU weight gradient as GEMMs (wgrad_gemm.cpp), behind convkit::conv2d_backward_weight with
// BackwardOptions::cpu_gemm.
#pragma once

#include "convkit/convkit.hpp"

namespace convkit::detail {

// Whether this build has it (OpenBLAS).
bool cpu_wgrad_gemm_available();

// gw = dL/dw from x and gz (validated by the caller; any dtype and layout, every problem whose GEMM
// dimensions fit an int). Throws Error(not_available) without OpenBLAS.
void cpu_wgrad_gemm(const Conv2dProblem& pb, const TensorView& x, const TensorView& gz, const TensorView& gw);

}  // namespace convkit::detail
