// The rules by which cuda_igemm_wgmma's heuristic runs a persistent tile instead of the wave model's pick
// (src/cuda/tc/tile_rules.hpp), at their boundaries, and on the 1x1 layers of MobileNetV2 and
// EfficientNet-B0 at batch 32 on a 132-SM GPU, where they were measured (docs/perf.md, 2026-12-06): the
// picks the measurements asked for. Plain integer logic: runs without a GPU (the planner's own choice of
// the tiles is PlannerGpu's, on the GPU).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "cuda/tc/tile_rules.hpp"

using convkit::detail::exact_width_rows;
using convkit::detail::exact_width_tile_wins;
using convkit::detail::tall_128_tile_wins;
using convkit::detail::tall_64_tile_wins;

namespace {

constexpr int kSms = 132;

TEST(TileRules, ExactWidthHoldsForSixteenBitOneGroupNarrowOrShallowLayers) {
  // at most 32 columns on a depth of at most 192
  EXPECT_TRUE(exact_width_tile_wins(2, 1, 192, 32));
  EXPECT_TRUE(exact_width_tile_wins(2, 1, 32, 16));
  EXPECT_FALSE(exact_width_tile_wins(2, 1, 193, 32));
  // a depth of at most 32 with 65-96 or 129-144 columns
  EXPECT_TRUE(exact_width_tile_wins(2, 1, 32, 96));
  EXPECT_TRUE(exact_width_tile_wins(2, 1, 16, 65));
  EXPECT_TRUE(exact_width_tile_wins(2, 1, 24, 144));
  EXPECT_FALSE(exact_width_tile_wins(2, 1, 33, 96));
  EXPECT_FALSE(exact_width_tile_wins(2, 1, 24, 145));
  // 33-64 and 97-128 columns keep the whole 64- and 128-wide tiles
  for (int64_t n : {33, 48, 64, 97, 112, 128}) EXPECT_FALSE(exact_width_tile_wins(2, 1, 16, n)) << n;
  // fp32 / tf32, and grouped layers: never
  EXPECT_FALSE(exact_width_tile_wins(4, 1, 16, 16));
  EXPECT_FALSE(exact_width_tile_wins(2, 2, 16, 16));
}

TEST(TileRules, TallerExactTilesWhereEverySmGetsTwo) {
  EXPECT_EQ(exact_width_rows(16, 2 * 256 * kSms, kSms), 256);
  EXPECT_EQ(exact_width_rows(32, 2 * 256 * kSms, kSms), 256);
  EXPECT_EQ(exact_width_rows(32, 2 * 256 * kSms - 1, kSms), 128);
  EXPECT_EQ(exact_width_rows(96, 2 * 192 * kSms, kSms), 192);
  EXPECT_EQ(exact_width_rows(65, 2 * 192 * kSms, kSms), 192);
  EXPECT_EQ(exact_width_rows(96, 2 * 192 * kSms - 1, kSms), 128);
  // no tall tile for 144 columns (192x144 does not fit: its staging alone is 144 KB)
  EXPECT_EQ(exact_width_rows(144, int64_t(1) << 30, kSms), 128);
  // a GPU of fewer SMs takes the tall tiles from fewer rows
  EXPECT_EQ(exact_width_rows(16, 2 * 256 * 66, 66), 256);
}

TEST(TileRules, TallSixtyFourForShallowLayersWideningPastOneTwentyEight) {
  EXPECT_TRUE(tall_64_tile_wins(2, 1, 112, 129, 256 * kSms, kSms));
  EXPECT_FALSE(tall_64_tile_wins(2, 1, 113, 672, int64_t(1) << 20, kSms));  // deeper
  EXPECT_FALSE(tall_64_tile_wins(2, 1, 24, 128, int64_t(1) << 20, kSms));   // not wider than 128
  EXPECT_FALSE(tall_64_tile_wins(4, 1, 24, 144, int64_t(1) << 20, kSms));
  EXPECT_FALSE(tall_64_tile_wins(2, 32, 24, 144, int64_t(1) << 20, kSms));
  // at least one tile an SM: 64 -> 384 at 14x14 is 25 x 6 = 150 tiles at batch 32, 1 x 6 at batch 1
  EXPECT_TRUE(tall_64_tile_wins(2, 1, 64, 384, 32 * 14 * 14, kSms));
  EXPECT_FALSE(tall_64_tile_wins(2, 1, 64, 384, 14 * 14, kSms));
}

// The tile the rules give the 1x1 layers of MobileNetV2 and EfficientNet-B0 at batch 32 (bf16, 132 SMs):
// "192x128", "256x64", "<rows>x<exact>" for the exact-width tiles, "" for the wave model's; the rules in
// rule_plan's order.
const char* pick(int64_t c, int64_t k, int64_t hw) {
  const int64_t rows = 32 * hw * hw;
  if (tall_128_tile_wins(2, 1, c, k, rows, kSms)) return "192x128";
  if (tall_64_tile_wins(2, 1, c, k, rows, kSms)) return "256x64";
  if (!exact_width_tile_wins(2, 1, c, k)) return "";
  const int bm = exact_width_rows(k, rows, kSms);
  const int64_t width = k <= 16 ? 16 : k <= 32 ? 32 : k <= 96 ? 96 : 144;
  static thread_local char buf[32];
  std::snprintf(buf, sizeof(buf), "%dx%lld", bm, static_cast<long long>(width));
  return buf;
}

TEST(TileRules, TheMeasuredLayersGetTheTilesThatWonThere) {
  struct Layer { int64_t c, k, hw; const char* tile; };
  const Layer layers[] = {
      {32, 16, 112, "256x16"},  {16, 96, 112, "192x96"},  {96, 24, 56, "256x32"},   {24, 144, 56, "256x64"},
      {144, 24, 56, "256x32"},  {144, 32, 28, "128x32"},  {32, 192, 28, "256x64"},  {192, 32, 28, "128x32"},
      {40, 240, 28, "256x64"},  {64, 384, 14, "256x64"},  {112, 672, 14, "192x128"}, {80, 480, 14, "192x128"},
      {96, 576, 14, "256x64"},  // (2% slower there, inside the noise: the rule's boundary is depth 112)
      {144, 40, 28, ""},        {240, 80, 14, ""},        {160, 960, 7, ""},        {192, 1152, 7, ""},
      {320, 1280, 7, ""},       {1152, 192, 7, ""},       {480, 112, 14, ""},       {576, 96, 14, ""},
  };
  for (const Layer& l : layers) EXPECT_STREQ(pick(l.c, l.k, l.hw), l.tile) << l.c << " -> " << l.k << " at " << l.hw;
}

TEST(TileRules, TallOneTwentyEightWhereItsRowsAnSmAreNoMore) {
  // 1536 -> 384 at 14x14, batch 32: 147 tiles of 128x128 (two rounds on 132 SMs, 256 rows) against 99 of
  // 192x128 (one round, 192 rows)
  EXPECT_TRUE(tall_128_tile_wins(2, 1, 1536, 384, 32 * 14 * 14, kSms));
  // equal rows an SM: 128 -> 512 at 28x28 (six rounds of 128 against four of 192)
  EXPECT_TRUE(tall_128_tile_wins(2, 1, 128, 512, 32 * 28 * 28, kSms));
  // more rows an SM: 3072 -> 768 at 7x7 (78 tiles of 128 rows against 54 of 192, one round each)
  EXPECT_FALSE(tall_128_tile_wins(2, 1, 3072, 768, 32 * 7 * 7, kSms));
  EXPECT_FALSE(tall_128_tile_wins(2, 1, 1024, 256, 32 * 14 * 14, kSms));
  // the boundary: 132 tiles of 192 rows are one round, 133 two
  EXPECT_TRUE(tall_128_tile_wins(2, 1, 512, 128, 132 * 192, kSms));      // 198 tiles of 128: two rounds, 256 rows
  EXPECT_FALSE(tall_128_tile_wins(2, 1, 512, 128, 132 * 192 + 1, kSms)); // 384 rows against 256
  // whole 128-column tiles from a depth of 96, or part-filled ones on widening layers of depth 80-112 to at
  // least 256 columns; 16-bit types, one group
  EXPECT_FALSE(tall_128_tile_wins(2, 1, 1536, 192, 32 * 14 * 14, kSms));
  EXPECT_FALSE(tall_128_tile_wins(2, 1, 113, 480, 32 * 14 * 14, kSms));
  EXPECT_FALSE(tall_128_tile_wins(2, 1, 79, 480, 32 * 14 * 14, kSms));
  EXPECT_FALSE(tall_128_tile_wins(2, 1, 96, 240, 32 * 14 * 14, kSms));
  EXPECT_TRUE(tall_128_tile_wins(2, 1, 80, 480, 32 * 14 * 14, kSms));
  EXPECT_FALSE(tall_128_tile_wins(2, 1, 80, 384, 32 * 14 * 14, kSms));  // whole tiles: a depth of 96
  EXPECT_FALSE(tall_128_tile_wins(2, 1, 95, 384, 32 * 14 * 14, kSms));
  EXPECT_TRUE(tall_128_tile_wins(2, 1, 96, 384, 32 * 14 * 14, kSms));
  EXPECT_FALSE(tall_128_tile_wins(4, 1, 1536, 384, 32 * 14 * 14, kSms));
  EXPECT_FALSE(tall_128_tile_wins(2, 2, 1536, 384, 32 * 14 * 14, kSms));
}

TEST(TileRules, TallOneTwentyEightOnTheMeasuredLayers) {
  // bf16 batch 32 on 132 SMs (igemm_wgmma.cu, at rule_plan): the layers where 192x128 ran faster or even
  // take it, those where it lost do not; {depth R*S*C, K, output pixels an image}
  struct Layer { int64_t depth, k, pq; bool tall; };
  const Layer layers[] = {
      {9 * 384, 384, 14 * 14, true},  {1024, 512, 14 * 14, true},
      {9 * 128, 128, 28 * 28, true},  // (3x3 128 at 28x28, and at stride 2 from 56x56: the same GEMM)
      {1536, 384, 14 * 14, true},     {2048, 512, 14 * 14, true},
      {192, 768, 28 * 28, true},      {384, 1536, 14 * 14, true},     {128, 512, 28 * 28, true},
      {512, 1024, 14 * 14, true},     {256, 384, 14 * 14, true},      {256, 128, 56 * 56, true},
      {256, 1024, 14 * 14, true},     {256, 512, 28 * 28, true},      {512, 256, 28 * 28, true},
      {768, 3072, 7 * 7, true},       {512, 128, 28 * 28, true},
      {9 * 512, 512, 7 * 7, false},   {512, 2048, 7 * 7, false},      {2048, 512, 7 * 7, false},
      {1024, 256, 14 * 14, false},    {9 * 256, 256, 14 * 14, false}, {3072, 768, 7 * 7, false},
      {96, 384, 56 * 56, true},  // (ahead of tall_64_tile_wins: 0.0705 ms with GELU against 0.0825 on 256x64)
      {768, 192, 28 * 28, false},     {384, 96, 56 * 56, false},      {64, 256, 56 * 56, false},
      // the tall-64 rule's layers keep 256x64 where shallower than 80, or where 192-row tiles need more rows an SM
      {64, 384, 14 * 14, false},      {96, 576, 14 * 14, false},      {40, 240, 28 * 28, false},
      // widening layers of depth 80-112 to columns that are not whole 128-column tiles: 192x128, as the tuner
      // chose (0.0113 and 0.0132 ms with SiLU against 0.0128 and 0.0148)
      {80, 480, 14 * 14, true},       {112, 672, 14 * 14, true},
  };
  for (const Layer& l : layers)
    EXPECT_EQ(tall_128_tile_wins(2, 1, l.depth, l.k, 32 * l.pq, kSms), l.tall) << l.depth << " -> " << l.k << " at " << l.pq;
}

}  // namespace
