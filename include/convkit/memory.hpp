// convkit/memory.hpp: an owning buffer on the host or a CUDA device, so front ends (CLI, tests) need no
// CUDA headers. Without CUDA in the build, device buffers throw convkit::Error(not_available).
#pragma once

#include <cstddef>

#include "convkit/tensor.hpp"

namespace convkit {

class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

  void copy_from_host(const void* src, size_t bytes);
  void copy_to_host(void* dst, size_t bytes) const;
  // Sets every byte to `byte` (0xFF makes every fp32/f16/bf16 element a NaN: the poison).
  void fill_bytes(unsigned char byte);

 private:
  void release() noexcept;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::cpu;
};

// True when this build has CUDA and a device is present.
bool cuda_device_available();
// Waits for all outstanding device work (no-op on CPU-only builds).
void device_synchronize(Device device);

}  // namespace convkit
