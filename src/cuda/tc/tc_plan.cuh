// The planning side of the implicit-GEMM tensor-core kernels (cuda_igemm_mma, cuda_igemm_wgmma), host code
// only: a tile of a kernel's table (its size, its two fitted wave-model costs, its launch), the plan of a
// problem (tile x split count, its modelled time), the search over every plan, and the variant names
// `convkit tune` stores ("128x64w4/k2", "128x128w8s3/k1": BMxBN, warps, stages, p for persistent, splits).
// Each kernel file holds its own table of tiles (igemm_mma.cu, igemm_wgmma.cu), the fit behind its numbers
// at the table.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "convkit/problem.hpp"
#include "cuda/tc/tile_rules.hpp"
#include "core/overrides.hpp"
#include "cuda/common/check.cuh"

namespace convkit::detail {
namespace {

struct TcArgs;  // igemm_tc.cuh

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

using LaunchFn = void (*)(const TcArgs&, dim3, cudaStream_t, bool aligned);
using OccFn = int (*)();

struct Tile {
  int bm, bn, warps;
  // The wave model's two costs (see evaluate()), fitted to the H200: a wave's fixed part (prologue, pipeline
  // fill, epilogue) and its part per k slice (32 16-bit / 16 fp32 elements of k), in microseconds.
  double wave_us, slice_us;
  LaunchFn launch;
  OccFn blocks_per_sm;
  int stages = 0;  // pipeline depth, named ("128x128w8s3") only where a tile comes in more than one depth
  // A persistent kernel's tile ("128x128w12s4p"): one block per SM walks the output tiles; offered for one
  // group and no split-K only (for_each_plan).
  bool persistent = false;
  std::string name() const {
    return std::to_string(bm) + "x" + std::to_string(bn) + "w" + std::to_string(warps) +
           (stages > 0 ? "s" + std::to_string(stages) : std::string()) + (persistent ? "p" : "");
  }
};

// A kernel's tile table, the k depth of its pipeline stages, and the names it answers to.
struct TileSet {
  const Tile* tiles;
  int count;
  int bk_bytes;     // bytes of k per stage (per operand row)
  const char* algo;  // for error messages
  const char* env;   // the environment variable that forces a variant
  // What split-K adds (see evaluate()): microseconds per 10^9 outputs x splits (the fp32 partials written,
  // then read), and once (the reduce kernel's launch); coop_*: the same where the kernel sums the splits
  // itself (a grid of at most one wave; negative coop_us: never).
  double split_us_per_gout = 260.0, split_us = 8.7;
  double coop_us_per_gout = 0.0, coop_us = -1.0;
  // A last wave filled below this fraction is charged that fraction, not a whole wave (0: always whole).
  double straggler_wave = 0.0;
};

constexpr int kMaxSplits = 16;
constexpr int kMinTilesPerSplit = 4;                  // k >= 4 stages per split
constexpr int64_t kMaxWorkspace = int64_t(1) << 30;  // 1 GiB of partials at most

// The shape of the grid the plan runs: the GEMM per (batch entry, group).
struct Shape {
  int64_t Mb = 0;  // rows per entry
  int64_t n = 0;   // columns (K/groups)
  int64_t G = 1, nb = 1;
  int64_t k = 0;   // R*S*C/groups
  int64_t K = 0;   // all output channels
  int es = 2;      // element size
};

struct Plan {
  const Tile* tile = nullptr;
  int splits = 1, tiles_per_split = 0, num_k_tiles = 0;
  int64_t blocks = 0;
  size_t ws_bytes = 0;
  // Split-K summed inside the kernel (TcArgs::tile_counts) rather than by the reduce kernel: where the
  // TileSet offers it and every block is resident at once (the splits of a tile wait for each other; the
  // launch is cooperative).
  bool sums_in_kernel = false;
  double model_us = 0;
  std::string variant() const { return tile->name() + "/k" + std::to_string(splits); }
};

// The modelled time of one (tile, splits) choice, a wave model: the blocks (tiles x splits) run in waves of
// blocks_per_sm x SMs; each wave costs the tile's fixed part plus its per-slice part times the slices of one
// split (a partial last wave costs a whole one: its blocks take as long; except, where the TileSet says so, a
// last wave of a few stragglers, which is charged its fraction). Split-K adds the fp32 partials
// and a fixed part (the TileSet's split costs; cuda_igemm_mma's reduce kernel: 0.26 ms per 10^9 outputs x
// splits, written then read, and 8.7 us for its launch, fitted with the tile costs). E.g. (batch 32) 3x3 512@7 -> 128x128w4 with 5 splits, 1x1 64->64@56 ->
// 128x64w4, seed000 -> 128x128w8.
inline Plan evaluate(const Shape& s, const Tile& t, int splits, int sms, int64_t num_k_tiles, const TileSet& ts) {
  Plan p;
  const int tps = int(ceil_div(num_k_tiles, splits));
  p.tile = &t;
  p.splits = int(ceil_div(num_k_tiles, tps));
  p.tiles_per_split = tps;
  p.num_k_tiles = int(num_k_tiles);
  const int64_t tiles_mn = ceil_div(s.Mb, t.bm) * ceil_div(s.n, t.bn) * s.G * s.nb;
  p.blocks = tiles_mn * p.splits;
  p.ws_bytes = p.splits > 1 ? size_t(p.splits) * size_t(s.nb * s.Mb) * size_t(s.K) * sizeof(float) : 0;
  const int64_t per_wave = int64_t(t.blocks_per_sm()) * sms;
  const int64_t full = p.blocks / per_wave, rest = p.blocks % per_wave;
  const double last = rest == 0 ? 0.0
                      : full > 0 && double(rest) < ts.straggler_wave * double(per_wave) ? double(rest) / double(per_wave)
                                                                                         : 1.0;
  double us = (double(full) + last) * (t.wave_us + double(tps) * t.slice_us);
  p.sums_in_kernel = p.splits > 1 && ts.coop_us >= 0 && p.blocks <= per_wave;
  if (p.sums_in_kernel)
    us += ts.coop_us_per_gout * 1e-9 * double(s.nb * s.Mb) * double(s.K) * p.splits + ts.coop_us;
  else if (p.splits > 1)
    us += ts.split_us_per_gout * 1e-9 * double(s.nb * s.Mb) * double(s.K) * p.splits + ts.split_us;
  p.model_us = us;
  return p;
}

// Calls f(plan) for every plan worth having, tile by tile, split counts increasing (a split count that gives
// the same plan as a smaller one, or leaves a split under kMinTilesPerSplit slices, is skipped).
template <typename F>
void for_each_plan(const TileSet& ts, const Shape& s, int sms, F&& f) {
  const int64_t num_k_tiles = ceil_div(s.k, ts.bk_bytes / s.es);
  for (int ti = 0; ti < ts.count; ++ti) {
    const Tile& t = ts.tiles[ti];
    if (t.persistent && s.G != 1) continue;
    // (a persistent tile whose width is not whole 64-column store boxes writes past its own columns: it may
    // only be the one column tile, K <= BN, the tensor map clipping the columns past K)
    if (t.persistent && t.bn % 64 != 0 && s.n > t.bn) continue;
    int last_splits = 0;
    for (int want = 1; want <= (t.persistent ? 1 : kMaxSplits); ++want) {
      const Plan p = evaluate(s, t, want, sms, num_k_tiles, ts);
      if (p.splits == last_splits) continue;  // the same plan as a smaller request
      if (p.splits > 1 && (p.tiles_per_split < kMinTilesPerSplit || p.ws_bytes > size_t(kMaxWorkspace) ||
                           s.nb * s.G * p.splits > 65535 || s.nb * s.Mb * s.K > (int64_t(1) << 40)))
        continue;
      last_splits = p.splits;
      f(p);
    }
  }
}

inline std::vector<Plan> candidate_plans(const TileSet& ts, const Shape& s, int sms) {
  std::vector<Plan> out;
  for_each_plan(ts, s, sms, [&](const Plan& p) { out.push_back(p); });
  return out;
}

// A variant's name read as numbers ("128x64w4/k2", "128x128w8s3/k1"), so that run() compares integers, not
// strings.
struct VariantId {
  int bm = 0, bn = 0, warps = 0, stages = 0, splits = 0;  // splits == 0: none
  bool persistent = false;
  static VariantId parse(const char* v) {
    VariantId id;
    int used = 0;
    if (std::sscanf(v, "%dx%dw%d%n", &id.bm, &id.bn, &id.warps, &used) != 3) return {};
    const char* rest = v + used;
    if (*rest == 's') {
      if (std::sscanf(rest, "s%d%n", &id.stages, &used) != 1 || id.stages < 1) return {};
      rest += used;
    }
    if (*rest == 'p') {
      id.persistent = true;
      ++rest;
    }
    char tail = 0;
    if (std::sscanf(rest, "/k%d%c", &id.splits, &tail) != 1 || id.splits < 1) return {};
    return id;
  }
  bool matches(const Plan& p) const {
    return splits == p.splits && bm == p.tile->bm && bn == p.tile->bn && warps == p.tile->warps &&
           stages == p.tile->stages && persistent == p.tile->persistent;
  }
};

// NOTE: allocation-free: run() calls it on every launch, inside the benchmark's timed loop.
inline Plan choose_plan(const TileSet& ts, const Shape& s, int sms, const std::string& variant) {
  // The algorithm's environment variable (CONVKIT_MMA_VARIANT=128x64w4/k2) forces a variant (ignored when it
  // does not exist for the problem).
  const char* forced = variant.empty() ? env_override(ts.env) : variant.c_str();
  const VariantId want = forced != nullptr ? VariantId::parse(forced) : VariantId{};
  Plan best, named;
  for_each_plan(ts, s, sms, [&](const Plan& p) {
    if (want.splits > 0 && want.matches(p)) named = p;
    if (best.tile == nullptr || p.model_us < best.model_us) best = p;  // the first tile's k1 is always valid
  });
  if (named.tile != nullptr) return named;
  if (!variant.empty())
    throw Error(StatusCode::invalid_problem,
                std::string(ts.algo) + " has no variant '" + variant + "' for this problem.");
  return best;
}

inline Shape shape_of(const Conv2dProblem& p, DType dt, bool per_sample) {
  Shape s;
  s.nb = per_sample ? p.n : 1;
  s.Mb = per_sample ? p.p() * p.q() : p.gemm_m();
  s.n = p.gemm_n();
  s.G = p.groups;
  s.k = p.gemm_k();
  s.K = p.k;
  s.es = int(dtype_size(dt));
  return s;
}

}  // namespace
}  // namespace convkit::detail
