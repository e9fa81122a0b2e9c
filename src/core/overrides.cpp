// The environment overrides (see overrides.hpp); docs/environment.md documents every entry.
#include "core/overrides.hpp"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string>

#include "convkit/status.hpp"

namespace convkit::detail {
namespace {

constexpr std::string_view kOverrides[] = {
    "CONVKIT_SYNC_CHECK",               // 1: synchronise after every launch (src/cuda/common/runtime.cu)
    "CONVKIT_WINOGRAD_VARIANT",         // cpu_winograd's transform
    "CONVKIT_SGEMM",                    // the CPU's float32 GEMM: openblas or onednn
    "CONVKIT_REGBLOCK_CFG",             // cuda_direct_regblock's channel split and chunk
    "CONVKIT_IGEMM_TILE",               // cuda_igemm_simt's tile
    "CONVKIT_IGEMM_SPLITK",             // cuda_igemm_simt's split count
    "CONVKIT_WMMA_TILE",                // cuda_igemm_wmma's tile
    "CONVKIT_MMA_VARIANT",              // cuda_igemm_mma's variant
    "CONVKIT_WGMMA_VARIANT",            // cuda_igemm_wgmma's variant
    "CONVKIT_WGMMA_PERSISTENT_BLOCKS",  // caps the persistent grid
    "CONVKIT_WGMMA_WS",                 // 0: no warp-specialized variants
    "CONVKIT_WGMMA_A_TMA",              // 0: activations by cp.async, never the TMA
    "CONVKIT_WGMMA_IM2COL",             // 0: no TMA im2col mode
    "CONVKIT_CUDNN_RTC",                // 0: the cuDNN peer without runtime-compiled engines
    "CONVKIT_PDL",                      // 0: kernels launched without programmatic dependent launch
};

}  // namespace

const char* env_override(std::string_view name) {
  if (std::find(std::begin(kOverrides), std::end(kOverrides), name) == std::end(kOverrides))
    throw Error(StatusCode::internal, "env_override: '" + std::string(name) +
                                          "' is not a listed override (src/core/overrides.cpp, docs/environment.md).");
  return std::getenv(std::string(name).c_str());
}

}  // namespace convkit::detail
