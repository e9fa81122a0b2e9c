// A base class for CUDA algorithms: the device, the "is a GPU here" check, and the configuration checks
// most fp32 kernels share, so each kernel file only says what is special about it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "convkit/algorithm.hpp"
#include "convkit/status.hpp"
#include "core/cuda_hooks.hpp"

namespace convkit::detail {

class CudaAlgorithm : public Algorithm {
 public:
  Device device() const override { return Device::cuda; }
  Support available() const override {
    if (!cuda_present()) return Support::no("no CUDA device is present on this machine.");
    return Support::yes();
  }
};

// The common gate of a strict-fp32 kernel: f32 tensors, fp32 math, and the layouts it was written for.
inline Support require_f32_strict(const ConvConfig& cfg, bool nhwc_ok) {
  if (cfg.dtype != DType::f32)
    return Support::no(std::string("it computes fp32 tensors only, not ") + to_string(cfg.dtype) + ".");
  if (cfg.math == MathMode::tf32) return Support::no("it computes in strict fp32; it has no tf32 mode.");
  if (cfg.layout == Layout::nhwc && !nhwc_ok) return Support::no("it reads NCHW tensors only, not NHWC.");
  return Support::yes();
}

// The current device's SM count, cached per device (throws convkit::Error when CUDA cannot say).
int sm_count_of_current_device();
// The current device's compute capability, major part (cached once a device).
int cc_major_of_current_device();
// Shared memory an SM has for its blocks, in bytes (cached once a device).
int64_t smem_per_sm_of_current_device();

// Lets `kernel` launch with up to `bytes` of dynamic shared memory (where its static and dynamic shared
// memory pass the 48 KiB default a kernel must opt in): cudaFuncSetAttribute once per device, kernel and
// size, not at every launch (each one costs host time).
void opt_in_dynamic_smem(const void* kernel, int64_t bytes);

// Blocks of `threads` threads and `smem` bytes of dynamic shared memory that fit one SM at once (at least 1),
// from the occupancy calculator once per device, kernel, block size and smem size, not at every launch.
// Call opt_in_dynamic_smem for the kernel first.
int blocks_per_sm(const void* kernel, int threads, int64_t smem);

inline bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// A residual is absent, the output itself (in-place add: each element is read before it is overwritten) or
// disjoint from it; a partial overlap would read outputs already written. Throws Error(invalid_tensor).
inline void check_residual_overlap(const void* residual, const void* dst, size_t dst_bytes) {
  if (residual != nullptr && residual != dst && ranges_overlap(residual, dst_bytes, dst, dst_bytes))
    throw Error(StatusCode::invalid_tensor,
                "the residual partially overlaps the output; it must be the output itself or disjoint from it.");
}

// The implicit-GEMM kernels keep pixel coordinates in 32 bits and mark pixels past M with the origin -2^30,
// so every spatial extent must stay below 2^30.
inline Support require_pixel_coords_below_2_30(const Conv2dProblem& p) {
  constexpr int64_t kLim = int64_t(1) << 30;
  if (p.h >= kLim || p.w >= kLim || p.p() >= kLim || p.q() >= kLim || p.pad_h >= kLim || p.pad_w >= kLim ||
      p.stride_h >= kLim || p.stride_w >= kLim || p.dilation_h * (p.r - 1) >= kLim ||
      p.dilation_w * (p.s - 1) >= kLim || p.p() * p.stride_h >= kLim || p.q() * p.stride_w >= kLim)
    return Support::no("a spatial size, stride, padding or dilated filter extent reaches 2^30 (32-bit pixel "
                       "coordinates).");
  return Support::yes();
}

}  // namespace convkit::detail
