// The CUDA half of the tune cache key (core/tune.hpp): the current device's name, SM count and the driver.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>

#include "core/tune.hpp"

namespace convkit::detail {

DeviceIdentity cuda_device_identity() {
  static std::mutex mu;
  static std::map<int, std::string> names;  // per device index: cudaGetDeviceProperties is not free
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return {std::string("no CUDA device (") + cudaGetErrorString(e) + ")", "-"};
  }
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) cudaGetLastError();
  std::lock_guard<std::mutex> lock(mu);
  auto it = names.find(dev);
  if (it == names.end()) {
    cudaDeviceProp prop{};
    e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return {std::string("CUDA device ") + std::to_string(dev) + " (" + cudaGetErrorString(e) + ")",
              std::to_string(driver)};
    }
    it = names.emplace(dev, std::string(prop.name) + " (" + std::to_string(prop.multiProcessorCount) + " SMs)").first;
  }
  return {it->second, std::to_string(driver)};
}

}  // namespace convkit::detail
