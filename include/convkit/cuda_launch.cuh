// convkit/cuda_launch.cuh: how convkit launches its CUDA kernels, for kernels of other code that run between
// them on the same stream (the PyTorch extension's). CUDA sources only; not part of convkit.hpp.
//
// Programmatic dependent launch (compute capability 9.0 and later): a kernel launched by launch_with_pdl(true,
// ...) may be scheduled while the kernel before it on the stream still runs, and is held at pdl_enter() (its
// first statement, or after work on its parameters and shared memory alone) until that kernel has finished and
// its writes are visible; pdl_enter() then lets the next such kernel be scheduled. What it saves is the gap between two dependent kernels (the launch and
// the first blocks' dispatch), which at batch 1 is a large part of a layer. The rule that keeps it correct:
// a kernel launched so calls pdl_enter() before it touches global memory. Without the attribute (on = false,
// or an older device) pdl_enter() does nothing. convkit::cuda_programmatic_launch() (convkit/system.hpp) says
// whether convkit launches its own kernels so.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace convkit {

__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-stream-serialization attribute where
// `on`; the launch's own error code.
template <typename... KernelArgs, typename... Args>
cudaError_t launch_with_pdl(bool on, void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                            cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = on ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace convkit
