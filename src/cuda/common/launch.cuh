// How the library launches its forward kernels: programmatic dependent launch (convkit/cuda_launch.cuh has
// what it is and the rule that keeps it correct). Every kernel launched by launch_pdl calls pdl_enter() as its
// first statement; CONVKIT_PDL=0 in the environment, or a device before compute capability 9.0, launches
// without the attribute (pdl_enabled(), runtime.cu).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "convkit/cuda_launch.cuh"
#include "core/cuda_hooks.hpp"  // pdl_enabled()
#include "cuda/common/check.cuh"

namespace convkit::detail {

template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  CK_CUDA(launch_with_pdl(pdl_enabled(), kernel, grid, block, smem, stream, std::forward<Args>(args)...));
}

}  // namespace convkit::detail
