// The CUDA half of convkit::system_info() (used by `convkit doctor`): runtime and driver versions, every
// GPU with whether this binary carries code for it, and the cuBLAS and cuDNN versions. Never throws: what
// fails is said in SystemInfo::cuda_error or in the GPU's code_note.
#include <cublas_api.h>
#include <cuda_runtime.h>

#include <sstream>
#include <string>

#include "convkit/system.hpp"
#include "core/cuda_hooks.hpp"

#ifdef CONVKIT_HAVE_CUDNN
#include <cudnn_graph.h>
#include <cudnn_version.h>
#endif

#ifndef CONVKIT_CUDA_ARCHS
#define CONVKIT_CUDA_ARCHS "unknown"
#endif

namespace convkit::detail {
namespace {

// Compiled for exactly the architectures of the library: asking the runtime for its attributes tells
// whether this binary can run kernels on a given GPU.
__global__ void convkit_probe_kernel() {}

std::string version_string(int v) {  // 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// Whether the build's architecture list names this compute capability as real code (SASS), e.g. "90",
// "90-real", "90a"; "native"/"all" give no answer ("").
bool archs_have_sass(const std::string& archs, int cc) {
  std::stringstream ss(archs);
  std::string a;
  const std::string want = std::to_string(cc);
  while (std::getline(ss, a, ',')) {
    if (a.rfind(want, 0) != 0) continue;
    const std::string rest = a.substr(want.size());
    if (rest.empty() || rest == "-real" || rest == "a" || rest == "a-real" || rest == "f" || rest == "f-real")
      return true;
  }
  return false;
}

void probe_code(GpuInfo& g, const std::string& archs) {
  const int cc = g.cc_major * 10 + g.cc_minor;
  const std::string fix = "-DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(cc);
  int prev = 0;
  const bool restore = cudaGetDevice(&prev) == cudaSuccess;
  cudaError_t e = cudaSetDevice(g.index);
  cudaFuncAttributes attr{};
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, convkit_probe_kernel);
  if (restore) cudaSetDevice(prev);
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
    cudaGetLastError();
    g.binary_has_code = false;
    g.code_note = "no code for sm_" + std::to_string(cc) + " in this build (CUDA archs " + archs +
                  "): rebuild with " + fix;
    return;
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    g.binary_has_code = false;
    g.code_note = std::string("could not probe this GPU: ") + cudaGetErrorString(e);
    return;
  }
  g.binary_has_code = true;
  if (archs_have_sass(archs, cc)) {
    g.code_note = "sm_" + std::to_string(cc) + " SASS";
  } else if (archs == "native" || archs == "all" || archs == "all-major") {
    g.code_note = "code for sm_" + std::to_string(cc) + " (build archs '" + archs + "')";
  } else {
    g.code_note = "runs PTX compute_" + std::to_string(attr.ptxVersion) +
                  " JIT-compiled by the driver (slow first launch; for native code rebuild with " + fix + ")";
  }
}

}  // namespace

void fill_cuda_info(SystemInfo& info) {
  info.cuda_built = true;
  info.cuda_build_archs = CONVKIT_CUDA_ARCHS;

  int rt = 0, drv = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) info.cuda_runtime_version = rt;
  if (cudaDriverGetVersion(&drv) == cudaSuccess) info.cuda_driver_version = drv;  // 0: no driver
  cudaGetLastError();

  {
    int major = 0, minor = 0, patch = 0;
    if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
      info.cublas_version = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }
#ifdef CONVKIT_HAVE_CUDNN
  {
    const size_t v = cudnnGetVersion();  // 91900 -> 9.19.0 (cuDNN 9 numbering)
    auto fmt = [](size_t x) {
      return std::to_string(x / 10000) + "." + std::to_string((x % 10000) / 100) + "." + std::to_string(x % 100);
    };
    info.cudnn_version = fmt(v) + " (header " + fmt(CUDNN_VERSION) + ")";
  }
#endif

  if (drv == 0) {
    info.cuda_error = "no NVIDIA driver was found (cudaDriverGetVersion reports none): no GPU is usable; "
                      "install the driver to run the CUDA algorithms.";
    return;
  }
  if (drv < rt) {
    info.cuda_error = "the NVIDIA driver supports CUDA " + version_string(drv) + " but this build needs CUDA " +
                      version_string(rt) + ": update the driver.";
  }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (info.cuda_error.empty())
      info.cuda_error = std::string("no usable CUDA GPU: cudaGetDeviceCount failed: ") + cudaGetErrorString(e) + ".";
    return;
  }
  if (count == 0) {
    info.cuda_error = "the CUDA driver is present but reports no GPU.";
    return;
  }
  for (int i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = i;
    cudaDeviceProp prop{};
    const cudaError_t pe = cudaGetDeviceProperties(&prop, i);
    if (pe != cudaSuccess) {
      cudaGetLastError();
      g.name = "?";
      g.code_note = std::string("cudaGetDeviceProperties failed: ") + cudaGetErrorString(pe);
      info.gpus.push_back(g);
      continue;
    }
    g.name = prop.name;
    g.cc_major = prop.major;
    g.cc_minor = prop.minor;
    g.sm_count = prop.multiProcessorCount;
    g.memory_bytes = prop.totalGlobalMem;
    g.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
    g.smem_per_block_optin = prop.sharedMemPerBlockOptin;
    probe_code(g, info.cuda_build_archs);
    info.gpus.push_back(g);
  }
}

}  // namespace convkit::detail
