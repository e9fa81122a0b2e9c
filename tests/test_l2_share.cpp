// l2_share (cuda/common/l2_share.hpp): the byte ranges that prefetch_l2_share asks into L2, one a block. For
// filter sizes around the 16-byte and 4 KiB edges and the grids the kernels launch (one block to grids far
// larger than the filters' pieces), the shares must lie inside the filters, start on 4 KiB, be whole 16-byte
// multiples that fit the prefetch's 32-bit size, never overlap, and together cover all but the last bytes of
// a 16-byte piece.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/common/l2_share.hpp"

using convkit::detail::l2_share;
using convkit::detail::L2Share;

namespace {

::testing::AssertionResult tiles(int64_t bytes, int64_t blocks) {
  int64_t next = 0;  // the shares come in block order: each must start where the one before ended
  bool ended = false;
  for (int64_t b = 0; b < blocks; ++b) {
    const L2Share r = l2_share(bytes, blocks, b);
    if (r.len == 0) {
      ended = true;
      continue;
    }
    if (ended || r.begin != next)
      return ::testing::AssertionFailure() << "bytes " << bytes << ", " << blocks << " blocks: block " << b
                                           << " starts at " << r.begin << ", expected " << next;
    if (r.begin % 4096 != 0 || r.len % 16 != 0 || r.len < 0 || r.len > int64_t(UINT32_MAX) ||
        r.begin + r.len > bytes)
      return ::testing::AssertionFailure() << "bytes " << bytes << ", " << blocks << " blocks: block " << b
                                           << " has [" << r.begin << ", +" << r.len << ")";
    next = r.begin + r.len;
  }
  const int64_t want = bytes < 16 ? 0 : bytes & ~int64_t(15);
  if (next != want)
    return ::testing::AssertionFailure() << "bytes " << bytes << ", " << blocks << " blocks: covered " << next
                                         << " of " << want;
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(L2Share, SharesTileTheFilters) {
  std::vector<int64_t> sizes{0, 1, 15, 16, 17, 31, 32, 4080, 4095, 4096, 4097, 4112, 8192, 12288 + 48,
                             // a few layers' bf16 filters: 64->64 3x3, 512->2048 1x1, 1536->384 1x1
                             73728, 2097152, 1179648, 1179648 + 2};
  for (int e = 13; e <= 30; e += 3) sizes.push_back((int64_t(1) << e) + 4096 * 3 + 32);
  for (int64_t bytes : sizes)
    for (int64_t blocks : {1, 2, 3, 7, 64, 132, 264, 1000, 4097, 65536}) EXPECT_TRUE(tiles(bytes, blocks));
}

TEST(L2Share, OutOfRangeBlocksTakeNothing) {
  for (int64_t b : {int64_t(-1), int64_t(8), int64_t(100)}) EXPECT_EQ(l2_share(1 << 20, 8, b).len, 0);
  EXPECT_EQ(l2_share(1 << 20, 0, 0).len, 0);
}

TEST(L2Share, SharesPastThe32BitSizeAreLeftOut) {
  // 16 GiB over 2 blocks: each share would pass UINT32_MAX bytes, so nobody prefetches (a hint may be
  // dropped, never truncated into a wrong range).
  const int64_t bytes = int64_t(1) << 34;
  EXPECT_EQ(l2_share(bytes, 2, 0).len, 0);
  EXPECT_EQ(l2_share(bytes, 2, 1).len, 0);
  // over 8 blocks each share is 2 GiB: all taken
  EXPECT_TRUE(tiles(bytes, 8));
}
