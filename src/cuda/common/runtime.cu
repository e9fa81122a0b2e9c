// The CUDA hooks of the core (allocation, copies, sync) and the error helpers of check.cuh.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "core/overrides.hpp"
#include "core/cuda_hooks.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"

namespace convkit::detail {

void throw_cuda_error(const char* what, const char* err, const char* file, int line) {
  throw Error(StatusCode::cuda_error,
              std::string(what) + " failed: " + err + " (" + file + ":" + std::to_string(line) + ")");
}

void check_launch(const char* kernel_name, const char* file, int line) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) {
    static const bool sync = [] {
      const char* v = env_override("CONVKIT_SYNC_CHECK");
      return v && v[0] == '1';
    }();
    if (sync) e = cudaDeviceSynchronize();
  }
  if (e != cudaSuccess) {
    std::string msg = std::string("kernel ") + kernel_name;
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction)
      msg += " has no code for this GPU: rebuild with -DCMAKE_CUDA_ARCHITECTURES=<your sm> (see `convkit doctor`)";
    throw_cuda_error(msg.c_str(), cudaGetErrorString(e), file, line);
  }
}

void opt_in_dynamic_smem(const void* kernel, int64_t bytes) {
  // NOTE: not only past 48 KB: a launch without the opt-in fails where the kernel's static shared memory and
  // `bytes` together pass 48 KB (a stage plan of exactly 48 KB and a kernel's 32 bytes of barriers did).
  if (bytes <= 0) return;
  int dev = 0;
  CK_CUDA(cudaGetDevice(&dev));  // the attribute belongs to the device's context
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int64_t> granted;  // the largest size set, per device and kernel
  const std::lock_guard<std::mutex> lock(mu);
  int64_t& have = granted[{dev, kernel}];
  if (bytes <= have) return;
  CK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  have = bytes;
}

int blocks_per_sm(const void* kernel, int threads, int64_t smem) {
  int dev = 0;
  CK_CUDA(cudaGetDevice(&dev));
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, int, int64_t>, int> known;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(dev, kernel, threads, smem);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int n = 0;
  CK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, size_t(smem)));
  return known[key] = std::max(n, 1);
}

bool cuda_built() { return true; }

namespace {
// One attribute of the current device, asked once a device (0 = not asked yet).
int cached_attribute(std::array<std::atomic<int>, 64>& cache, cudaDeviceAttr attr) {
  int dev = 0;
  CK_CUDA(cudaGetDevice(&dev));
  if (dev < 0 || dev >= int(cache.size())) dev = 0;
  int n = cache[size_t(dev)].load(std::memory_order_relaxed);
  if (n == 0) {
    CK_CUDA(cudaDeviceGetAttribute(&n, attr, dev));
    cache[size_t(dev)].store(n, std::memory_order_relaxed);
  }
  return n;
}
}  // namespace

int sm_count_of_current_device() {
  static std::array<std::atomic<int>, 64> cache{};
  return cached_attribute(cache, cudaDevAttrMultiProcessorCount);
}

int64_t smem_per_sm_of_current_device() {
  static std::array<std::atomic<int>, 64> cache{};
  return cached_attribute(cache, cudaDevAttrMaxSharedMemoryPerMultiprocessor);
}

int cc_major_of_current_device() {
  static std::array<std::atomic<int>, 64> cache{};
  return cached_attribute(cache, cudaDevAttrComputeCapabilityMajor);
}

bool cuda_present() {
  static const bool present = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no device" error
      return false;
    }
    return n > 0;
  }();
  return present;
}

// launch.cuh's switch (convkit::cuda_programmatic_launch()): a device of compute capability 9.0 or later
// (the current one), and CONVKIT_PDL not "0".
bool pdl_enabled() {
  static const bool allowed = [] {
    const char* v = env_override("CONVKIT_PDL");
    return v == nullptr || std::string(v) != "0";
  }();
  return allowed && cuda_present() && cc_major_of_current_device() >= 9;
}

void* cuda_alloc(size_t bytes) {
  if (!cuda_present())
    throw Error(StatusCode::not_available, "no CUDA device is present on this machine.");
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    std::string room;
    size_t free_b = 0, total_b = 0;
    if (e == cudaErrorMemoryAllocation && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      room = " (" + std::to_string(free_b) + " bytes free of " + std::to_string(total_b) + " on the device)";
    cudaGetLastError();
    throw Error(StatusCode::cuda_error, "cudaMalloc of " + std::to_string(bytes) + " bytes failed: " +
                                            cudaGetErrorString(e) + room);
  }
  return p;
}

void cuda_free(void* p) noexcept {
  if (p) cudaFree(p);
}

void cuda_copy_h2d(void* dst, const void* src, size_t bytes) {
  CK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void cuda_copy_d2h(void* dst, const void* src, size_t bytes) {
  CK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void cuda_memset(void* dst, int byte, size_t bytes) { CK_CUDA(cudaMemset(dst, byte, bytes)); }
void cuda_sync() {
  if (cuda_present()) CK_CUDA(cudaDeviceSynchronize());
}

}  // namespace convkit::detail
