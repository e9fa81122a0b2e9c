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
// "256x64", "<rows>x<exact>" for the exact-width tiles, "" for the wave model's.
const char* pick(int64_t c, int64_t k, int64_t hw) {
  const int64_t rows = 32 * hw * hw;
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
      {40, 240, 28, "256x64"},  {64, 384, 14, "256x64"},  {112, 672, 14, "256x64"},
      {96, 576, 14, "256x64"},  // (2% slower there, inside the noise: the rule's boundary is depth 112)
      {144, 40, 28, ""},        {240, 80, 14, ""},        {160, 960, 7, ""},        {192, 1152, 7, ""},
      {320, 1280, 7, ""},       {1152, 192, 7, ""},       {480, 112, 14, ""},       {576, 96, 14, ""},
  };
  for (const Layer& l : layers) EXPECT_STREQ(pick(l.c, l.k, l.hw), l.tile) << l.c << " -> " << l.k << " at " << l.hw;
}

}  // namespace
