// How the library launches its forward kernels: programmatic dependent launch (convkit/cuda_launch.cuh has
// what it is and the rule that keeps it correct). Every kernel launched by launch_pdl calls pdl_enter() before
// it touches global memory: first thing, or after work on its parameters and shared memory alone (the
// persistent wgmma tile's barriers and tensor-map prefetches), and after prefetch_l2_share (below), which
// only hints; CONVKIT_PDL=0 in the environment, or a device before compute capability 9.0, launches
// without the attribute (pdl_enabled(), runtime.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "convkit/cuda_launch.cuh"
#include "core/cuda_hooks.hpp"  // pdl_enabled()
#include "cuda/common/check.cuh"
#include "cuda/common/l2_share.hpp"

namespace convkit::detail {

// Before pdl_enter() in a kernel launched by launch_pdl: this block's share of the `bytes` bytes at `p` (the
// kernel's filters) asked into L2 while the kernel before it on the stream may still run, so that the loads
// after the wait find them there instead of in DRAM (at batch 1 a layer's filters are most of its bytes, and
// the first stage's loads are on its critical path). One bulk prefetch by a block's first thread, of whole 4 KiB
// pieces split across the grid's blocks (the last one shorter); nothing where p is not 16-byte aligned. A
// prefetch reads nothing into the SM, so it is safe before the wait even where the kernel before writes these
// bytes (an optimizer's step): every write lands in L2, and the kernel's own loads come after the wait.
// Measured on an H100 (2026-12-07, docs/perf.md, fused models as CUDA graphs): 0.8-2.9% less time at batch 1,
// 0.4-1.2% at batch 32, on all five models (a process each). Built with -DCONVKIT_NO_L2_PREFETCH (that A/B's
// baseline) it does nothing.
__device__ __forceinline__ void prefetch_l2_share(const void* p, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(CONVKIT_NO_L2_PREFETCH)
  if ((threadIdx.x | threadIdx.y | threadIdx.z) != 0 || p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15) != 0)
    return;
  const int64_t blocks = int64_t(gridDim.x) * gridDim.y * gridDim.z;
  const int64_t block = blockIdx.x + int64_t(gridDim.x) * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z);
  const L2Share r = l2_share(bytes, blocks, block);
  if (r.len == 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<const char*>(p) + r.begin),
               "r"(uint32_t(r.len))
               : "memory");
#endif
}

template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  CK_CUDA(launch_with_pdl(pdl_enabled(), kernel, grid, block, smem, stream, std::forward<Args>(args)...));
}

}  // namespace convkit::detail
