// What the fuzz targets share: the input bytes as a file (the readers take paths), through one in-memory
// file per process that each run overwrites.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ckfuzz {

inline const std::string& as_file(const uint8_t* data, size_t size) {
  static int fd = -1;
  static std::string path;
  if (fd < 0) {
    fd = ::memfd_create("convkit-fuzz", 0);
    if (fd < 0) std::abort();
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  if (::ftruncate(fd, 0) != 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, off_t(done));
    if (n <= 0) std::abort();
    done += size_t(n);
  }
  return path;
}

// A property the target checks: a failure is a crash the fuzzer reports, with its input.
#define CKFUZZ_ASSERT(cond)                                                   \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "fuzz property failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                           \
    }                                                                         \
  } while (0)

}  // namespace ckfuzz
