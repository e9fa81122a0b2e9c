// The rules by which cuda_igemm_wgmma's heuristic runs one of its persistent tiles instead of the wave model's
// pick (igemm_wgmma.cu, rule_plan; cuda_pointwise_mma's SiLU rule defers to the first), each written from
// measurements on the GPU (the numbers at rule_plan, docs/perf.md). Plain integer logic, no CUDA: the CPU
// tests check their boundaries (tests/test_tile_rules.cpp).
#pragma once

#include <cstdint>

namespace convkit::detail {

// Where cuda_igemm_wgmma's heuristic runs one of its exact-width persistent tiles (16, 32, 96 or 144 columns)
// instead of the wave model's pick, having measured them faster there (igemm_wgmma.cu, rule_plan): 16-bit,
// one group, and either at most 32 columns (K/groups) on a GEMM depth (R*S*C/groups) of at most 192, or a
// depth of at most 32 with at most 144 columns; columns 33-64 and 97-128 keep the whole 128x64 and 128x128
// tiles. cuda_pointwise_mma's rule defers to it.
inline bool exact_width_tile_wins(int es, int64_t groups, int64_t gemm_k, int64_t gemm_n) {
  if (es != 2 || groups != 1) return false;
  if (!((gemm_n <= 32 && gemm_k <= 192) || (gemm_k <= 32 && gemm_n <= 144))) return false;
  return gemm_n <= 32 || (gemm_n > 64 && gemm_n <= 96) || gemm_n > 128;
}

// The rows of the exact-width tile: taller where every SM gets at least two tiles (rows >= 2 x BM x SMs), so
// that a tile carries more bytes for its fixed costs: 256 for at most 32 columns, 192 for 65-96 (the 56x56 and
// 112x112 layers of MobileNetV2 and EfficientNet-B0 at batch 32, not their 28x28 ones); else 128. Measured
// at rule_plan, igemm_wgmma.cu.
inline int exact_width_rows(int64_t gemm_n, int64_t rows, int sms) {
  if (gemm_n <= 32 && rows >= 2 * 256 * int64_t(sms)) return 256;
  if (gemm_n > 64 && gemm_n <= 96 && rows >= 2 * 192 * int64_t(sms)) return 192;
  return 128;
}

// Where the heuristic runs the persistent 256x64 tile (four consumer warpgroups) instead: the 1x1 layers that
// widen a shallow input into many channels (16-bit, one group, a GEMM depth of at most 112, more than 128
// columns) with at least one 256x64 tile an SM. Measured at rule_plan, igemm_wgmma.cu; it goes before the
// exact-width rule (24 -> 144 at 56x56).
inline bool tall_64_tile_wins(int es, int64_t groups, int64_t gemm_k, int64_t gemm_n, int64_t rows, int sms) {
  if (es != 2 || groups != 1 || gemm_k > 112 || gemm_n <= 128) return false;
  return (rows + 255) / 256 * ((gemm_n + 63) / 64) >= sms;
}

// Where the heuristic runs the persistent 192x128 tile (three consumer warpgroups of 64 rows x 128 columns)
// instead: 16-bit, one group, either whole 128-column tiles on a GEMM depth of at least 96 (shallower widening
// layers are tall_64_tile_wins's; this rule goes before it: ConvNeXt-T's 96 -> 384 at 56x56) or a widening
// layer of depth 80-112 to at least 256 columns that are not whole 128-column tiles (EfficientNet-B0's 80 -> 480
// and 112 -> 672 at 14x14, where the tuner had found 192x128 11-12% faster than tall_64_tile_wins's 256x64:
// both tiles waste the same part-filled last column there), and no more rows an SM
// on 192-row tiles than on 128-row ones (the tiles an SM walks, rounded up to whole rounds of one tile an SM,
// times the tile's rows). Where the counts tie, the taller tile loads 17% fewer operand bytes an output (320
// rows of 128 bytes a k stage for 192 x 128 outputs against 256 for 128 x 128); where 128-row tiles leave a
// last round mostly empty it needs fewer rounds (1536 -> 384 at 14x14, batch 32: 147 tiles of 128x128 for 132
// SMs, two rounds of 128 rows; 99 of 192x128, one of 192).
// Measured at rule_plan, igemm_wgmma.cu.
inline bool tall_128_tile_wins(int es, int64_t groups, int64_t gemm_k, int64_t gemm_n, int64_t rows, int sms) {
  if (es != 2 || groups != 1) return false;
  const bool whole = gemm_n % 128 == 0 && gemm_k >= 96;
  const bool widening = gemm_n % 128 != 0 && gemm_n >= 256 && gemm_k >= 80 && gemm_k <= 112;
  if (!whole && !widening) return false;
  const int64_t cols = (gemm_n + 127) / 128;
  const int64_t rounds128 = ((rows + 127) / 128 * cols + sms - 1) / sms;
  const int64_t rounds192 = ((rows + 191) / 192 * cols + sms - 1) / sms;
  return rounds192 * 192 <= rounds128 * 128;
}

}  // namespace convkit::detail
