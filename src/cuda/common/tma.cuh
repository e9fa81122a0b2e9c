// The mbarrier and tensor-memory-access (TMA) pieces that every Hopper kernel uses (plain sm_90 PTX, so that
// kernels outside the sm_90a objects can use them too: cuda_depthwise's TMA kernel, cuda_igemm_wgmma,
// cuda_conv_wgmma_halo): barrier init, arrival with a transaction count, the parity wait, a 4-D tiled box
// load, and the host side's tensor-map encoder reached through the runtime (libconvkit needs no -lcuda).
// A kernel that calls the device functions must itself be built for sm_90 or later (guard its body with
// __CUDA_ARCH__ >= 900 where the library is built for older targets too).
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <string>

#include "convkit/status.hpp"

namespace convkit::detail {
namespace {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// One arrival that also announces `bytes` of transaction to come (the TMA's complete_tx pays them off).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Returns once the barrier's phase of the given parity has completed. The "memory" clobber keeps the
// compiler from moving shared-memory reads of the data it guards above the wait.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// A 4-D box (coordinates innermost first: e.g. channel, column, row, image) into shared memory in the tensor
// map's layout; coordinates may be negative or run past the tensor, and those elements arrive as zeros.
// Completes on `bar` with the box's whole size in bytes.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// ---- host side ----------------------------------------------------------------------------------
// A driver function (cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col) reached through the runtime, so that
// libconvkit needs no -lcuda; looked up once.
template <typename Fn>
Fn driver_function(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    throw Error(StatusCode::cuda_error, std::string("convkit: the CUDA driver does not provide ") + name + ".");
  }
  return reinterpret_cast<Fn>(p);
}
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const auto fn = driver_function<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled");
  return fn;
}

}  // namespace
}  // namespace convkit::detail
