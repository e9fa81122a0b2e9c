// A base class for CUDA algorithms: the device, the "is a GPU here" check, and the configuration checks
// most fp32 kernels share, so each kernel file only says what is special about it.
#pragma once

#include <string>

#include "convkit/algorithm.hpp"
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

}  // namespace convkit::detail
