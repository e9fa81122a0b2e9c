// Every CUDA, cuBLAS and cuDNN call goes through these: a failure throws convkit::Error(cuda_error) whose
// message names the call (or kernel), the file and line, and the library's own error string.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "convkit/status.hpp"

namespace convkit::detail {

[[noreturn]] void throw_cuda_error(const char* what, const char* err, const char* file, int line);

}  // namespace convkit::detail

#define CK_CUDA(call)                                                                          \
  do {                                                                                         \
    cudaError_t ck_err_ = (call);                                                              \
    if (ck_err_ != cudaSuccess)                                                                \
      ::convkit::detail::throw_cuda_error(#call, cudaGetErrorString(ck_err_), __FILE__, __LINE__); \
  } while (0)

// After a launch: catches bad configurations at once (and, with CONVKIT_SYNC_CHECK=1 in the environment,
// synchronizes so an asynchronous fault is reported against the kernel that caused it).
#define CK_LAUNCH(kernel_name) ::convkit::detail::check_launch(kernel_name, __FILE__, __LINE__)

namespace convkit::detail {
void check_launch(const char* kernel_name, const char* file, int line);
inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace convkit::detail
