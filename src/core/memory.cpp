// Buffer: owning host or device memory behind one type.
#include "convkit/memory.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "convkit/status.hpp"
#include "core/cuda_hooks.hpp"

namespace convkit {
namespace {

// The machine's physical memory in bytes (0 when the system cannot say).
size_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
}

}  // namespace

Buffer::Buffer(Device device, size_t bytes) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device == Device::cpu) {
    // More than the machine's physical memory is refused up front: where the kernel overcommits memory,
    // the allocation would succeed and touching it would end in the OOM killer, not in an error.
    if (const size_t phys = physical_memory_bytes(); phys > 0 && bytes > phys)
      throw Error(StatusCode::internal, "host allocation of " + std::to_string(bytes) + " bytes failed: more than " +
                                            "this machine's " + std::to_string(phys) + " bytes of memory");
    // 64-byte alignment: whole cache lines and aligned AVX-512 loads.
    data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!data_)
      throw Error(StatusCode::internal, "host allocation of " + std::to_string(bytes) + " bytes failed");
  } else {
    data_ = detail::cuda_alloc(bytes);
  }
}

Buffer::~Buffer() { release(); }

void Buffer::release() noexcept {
  if (!data_) return;
  if (device_ == Device::cpu) std::free(data_);
  else detail::cuda_free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

Buffer::Buffer(Buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), device_(o.device_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    device_ = o.device_;
  }
  return *this;
}

void Buffer::copy_from_host(const void* src, size_t bytes) {
  if (bytes > bytes_)
    throw Error(StatusCode::invalid_tensor, "copy of " + std::to_string(bytes) + " bytes into a buffer of " +
                                                std::to_string(bytes_));
  if (bytes == 0) return;
  if (device_ == Device::cpu) std::memcpy(data_, src, bytes);
  else detail::cuda_copy_h2d(data_, src, bytes);
}

void Buffer::copy_to_host(void* dst, size_t bytes) const {
  if (bytes > bytes_)
    throw Error(StatusCode::invalid_tensor, "copy of " + std::to_string(bytes) + " bytes out of a buffer of " +
                                                std::to_string(bytes_));
  if (bytes == 0) return;
  if (device_ == Device::cpu) std::memcpy(dst, data_, bytes);
  else detail::cuda_copy_d2h(dst, data_, bytes);
}

void Buffer::fill_bytes(unsigned char byte) {
  if (bytes_ == 0) return;
  if (device_ == Device::cpu) std::memset(data_, byte, bytes_);
  else detail::cuda_memset(data_, byte, bytes_);
}

bool cuda_device_available() { return detail::cuda_present(); }

void device_synchronize(Device device) {
  if (device == Device::cuda) detail::cuda_sync();
}

}  // namespace convkit
