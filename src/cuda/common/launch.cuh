// Programmatic dependent launch (sm_90 and later): a kernel launched by launch_pdl may be scheduled while the
// kernel before it on the stream is still running, and is then held at its first instruction, pdl_wait(),
// until that kernel has completed and its writes are visible. What it saves is the gap between two
// dependent kernels (the launch, the first blocks' dispatch), which at batch 1 is a large part of a layer.
// The rule that keeps it correct: every kernel launched by launch_pdl calls pdl_wait() before it touches
// global memory (the kernels here call it first thing), and then pdl_launch_dependents(), so that the next
// such kernel can be scheduled once all of this one's blocks have started. Both instructions do nothing in a
// kernel launched without the attribute. CONVKIT_PDL=0 in the environment launches without it (for
// comparisons); so do devices before compute capability 9.0.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda_hooks.hpp"  // pdl_enabled()
#include "cuda/common/check.cuh"

namespace convkit::detail {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Both, at a kernel's top.
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_launch_dependents();
}

template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  CK_CUDA(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace convkit::detail
