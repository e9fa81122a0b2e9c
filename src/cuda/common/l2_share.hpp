// The byte range of a kernel's filters that one block asks into L2 (prefetch_l2_share, launch.cuh): plain
// arithmetic, so that the CPU tests check it (tests/test_l2_share.cpp) for every grid the kernels launch.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CONVKIT_L2_HD __host__ __device__
#else
#define CONVKIT_L2_HD
#endif

namespace convkit::detail {

struct L2Share {
  int64_t begin;  // a multiple of 4096
  int64_t len;    // a multiple of 16, at most UINT32_MAX (the bulk prefetch's size operand); 0: nothing
};

// Block `block` of `blocks` takes whole 4 KiB pieces of [0, bytes): the shares of the blocks in order tile the
// range without overlap, the last one shorter and cut to a multiple of 16 (so at most 15 bytes at the end go
// unasked); blocks past the end take nothing, and so does every block where a share would not fit the 32-bit
// size (over 4 GiB of filters: no kernel has them, but a hint must never be wrong).
CONVKIT_L2_HD inline L2Share l2_share(int64_t bytes, int64_t blocks, int64_t block) {
  if (bytes < 16 || blocks <= 0 || block < 0 || block >= blocks) return {0, 0};
  const int64_t share = ((bytes + blocks - 1) / blocks + 4095) / 4096 * 4096;
  const int64_t begin = block * share;
  if (begin >= bytes || share > int64_t(UINT32_MAX)) return {0, 0};
  const int64_t len = (bytes - begin < share ? bytes - begin : share) & ~int64_t(15);
  return {begin, len};
}

}  // namespace convkit::detail

#undef CONVKIT_L2_HD
