// The few CUDA runtime services the device-independent core needs. Implemented in
// src/cuda/common/runtime.cu when CUDA is built in, and by throwing stubs in src/core/no_cuda.cpp otherwise.
#pragma once

#include <cstddef>
#include <string>

namespace convkit::detail {

bool cuda_built();                 // compiled with CUDA
bool cuda_present();               // and a device answers
void* cuda_alloc(size_t bytes);    // throws Error(cuda_error) with the size on failure
void cuda_free(void* p) noexcept;
void cuda_copy_h2d(void* dst, const void* src, size_t bytes);
void cuda_copy_d2h(void* dst, const void* src, size_t bytes);
void cuda_memset(void* dst, int byte, size_t bytes);
void cuda_sync();
bool pdl_enabled();               // kernels launched with programmatic dependent launch (launch.cuh)

}  // namespace convkit::detail

#include <functional>
#include <vector>

namespace convkit::detail {
struct TimingOptions;
// CUDA-event timing (see core/timing.hpp); in src/cuda/common/timing.cu.
std::vector<double> cuda_time_runs(void* stream, const std::function<void()>& fn, const TimingOptions& opt);
}  // namespace convkit::detail

namespace convkit {
struct SystemInfo;
namespace detail {
// The CUDA half of system_info() (runtime/driver versions, GPUs, cuBLAS, cuDNN, build archs); the stub in
// no_cuda.cpp sets cuda_built = false and says why in cuda_error.
void fill_cuda_info(SystemInfo& info);
}  // namespace detail
}  // namespace convkit
