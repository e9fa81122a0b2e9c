// cuda_grouped_mma: grouped convolutions with 2 to 64 channels a group (ResNeXt's 3x3 layers: 4 to 32) on
// tensor cores, f16/bf16 NHWC with fp32 accumulation.
//
// Adds over cuda_grouped (the fp32 direct kernel): mma.sync m16n8k16 with several groups in one block, and
// over cuda_igemm_mma: no GEMM tile spent on zeros. A block stages the input tile of 64 channels (whole
// groups) with its halo once; each warp multiplies one group's pixels by that group's filters only.
//   - The reduction of one group is cut into units of 8 channels x 1 filter tap (16 bytes of a staged pixel),
//     two units per k16 step. An A fragment row is one output pixel's unit: ldmatrix takes a row address per
//     lane, so the im2col gather is only an address in the staged tile (no copy, no zeros but the padding).
//   - Groups of fewer than 8 channels (Cg = 2 or 4) are merged into super-groups of 8 whose filter is block
//     diagonal (zeros across groups): 2x or 4x the multiplies, on units the tensor cores take whole.
//   - A staged pixel's 128 bytes sit at a pitch of 144 (16 bytes of padding), and at stride 2 a staged row
//     keeps its even columns first and then its odd ones, so that the 8 rows of an ldmatrix phase, 8
//     consecutive output pixels, are 8 consecutive slots on distinct banks for every tap, and a row's
//     address is the pixel's offset plus the unit's (an add and a select a fragment; the XOR swizzle of
//     the chunks by the column cost 8). Filter rows are an odd number of 16-byte units long for
//     the same reason.
// Work mapping: a block = one image x tp output rows x tq columns (tp*tq <= 128: 8 m16 tiles) x 64 output
// channels (K = C: the filter keeps each group's width); where a whole image's output is one tile of at most
// 64 pixels (7x7), nimg images side by side instead, so that the block's 8 m16 tiles and its staged filters
// serve more than 49 pixels. 8 warps; warp = kWM m16 tiles x kWN n8 tiles of one
// super-group (kWN = min(super-group width / 8, 4), kWM = 8 / kWN), fp32 accumulators in registers; the
// epilogue (bias, residual, then the activation over all of a thread's values) in registers, the rounded
// outputs staged in the multiplied input tile and written 16 bytes a thread (gm_epilogue).
// nvcc -Xptxas -v (sm_90): 64 registers and a 16-24-byte stack frame (kWN = 1 and 4: a few registers spilled
// around the activation of 32 values at once; tests/local_memory_allowed.txt), __launch_bounds__(256, 4): 4
// blocks an SM; the dynamic shared memory a block is the input tile at 144 bytes a pixel plus the filters
// (plan_of).
// Variants: "tile" (this file's kernel) and "pipe" (grouped_mma_pipe.cuh: persistent, the next tile in
// flight); the heuristic's rule is at heuristic_pipe.
// measured (H100, 2026-12-05, bf16 batch 32, cuDNN in the same process, docs/perf.md): rnx50_g3x3_128_56_g32
// 0.0434 ms (1.22x cuDNN), rnx50_g3x3_256_28_g32 0.0261 (1.33x), rnx50_g3x3s2_256_56_g32 0.0448 (0.92x),
// rnx50_g3x3s2_512_28_g32 0.0293 (pipe; 0.78x), rnx50_g3x3_1024_7_g32 0.0156 (pipe; 0.86x).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/common/epilogue.cuh"
#include "cuda/common/geometry.cuh"
#include "cuda/common/vec.cuh"
#include "cuda/tc/mma_sync.cuh"

namespace convkit::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kBlockC = 64;               // input (= output) channels a block: a 128-byte staged pixel
constexpr int kChunks = kBlockC / 8;      // 16-byte chunks a staged pixel
constexpr int kPixBytes = kBlockC * 2;
// A staged input pixel's pitch: its 128 bytes and 16 of padding, so that the rows of 8 consecutive staged
// pixels (an ldmatrix phase) start 36 words apart and fall on 8 distinct groups of 4 banks.
constexpr int kPitch = kPixBytes + 16;
constexpr int kMaxM = 128;                // output pixels a block (8 m16 tiles)
constexpr int64_t kSmemBudget = 200 * 1024;

struct GmPlan {
  int cs = 8;          // super-group width (input = output channels): f * Cg groups merged, f = 8 / Cg below 8
  int units = 0;       // 16-byte reduction units of a super-group: R*S*cs/8
  int steps = 0;       // k16 steps: ceil(units / 2)
  int wstride = 0;     // filter row length in 16-byte units (odd: the 8 rows of an ldmatrix phase on distinct banks)
  int tp = 1, tq = 1;  // output tile: tp rows x tq columns of one image
  int nimg = 1;        // images a block (> 1 only when a whole image is one tile of at most 64 pixels)
  int ih = 1, iw = 1;  // staged input rows and columns (halo included)
  int mtiles = 1;      // m16 tiles: ceil(tp*tq / 16)
  int tiles_p = 1, tiles_q = 1, tiles_n = 1;  // tiles_n = ceil(N / nimg)
  int de = 1;          // column deinterleave: 2 at stride 2 (even columns first, then odd), else 1
  int wh = 1;          // staged columns of one parity: ceil(iw / de)
  int iws = 1;         // pixel slots a staged row: de * wh
  int kwn = 1;         // n8 tiles a warp
  int tq_mul = 0;      // m / tq as (m * tq_mul) >> 16: exact for m < 128, tq <= 128 (checked for all)
  int img_mul = 0;     // m / (tp * tq) the same way (tp * tq <= 128)
  int bufs = 1;        // input tiles staged at once (2: the persistent kernel's next tile in flight)
  int64_t smem_in = 0, smem_w = 0, smem = 0, budget = 0;  // smem_in: one buffer
};

int super_width(int64_t cg) { return cg < 8 ? 8 : int(cg); }

// The tiling for `bufs` staged input tiles (1: the one-tile kernel; 2: the persistent kernel, the next tile
// in flight) within `budget` bytes of shared memory: whole output rows up to 128 pixels, halved (rows, then
// columns) until the tile, its halo and the filters fit.
GmPlan plan_of(const Conv2dProblem& pb, int bufs = 1, int64_t budget = kSmemBudget) {
  GmPlan t;
  t.bufs = bufs;
  t.cs = super_width(pb.c_per_group());
  t.units = int(pb.r * pb.s * t.cs / 8);
  t.steps = (t.units + 1) / 2;
  t.wstride = (2 * t.steps) | 1;
  t.kwn = std::min(t.cs / 8, 4);
  t.de = pb.stride_w == 2 ? 2 : 1;
  const int64_t P = pb.p(), Q = pb.q();
  t.tq = int(std::min<int64_t>(Q, kMaxM));
  t.tp = int(std::max<int64_t>(1, std::min<int64_t>(P, kMaxM / t.tq)));
  t.smem_w = int64_t(kBlockC) * t.wstride * 16;
  for (;;) {
    t.ih = int((t.tp - 1) * pb.stride_h + (pb.r - 1) * pb.dilation_h + 1);
    t.iw = int((t.tq - 1) * pb.stride_w + (pb.s - 1) * pb.dilation_w + 1);
    t.wh = (t.iw + t.de - 1) / t.de;
    t.iws = t.de * t.wh;
    t.smem_in = int64_t(t.ih) * t.iws * kPitch;
    // the input tiles, the filters, 16 bytes of zeros (the padding unit's A rows), the unit table
    t.smem = bufs * t.smem_in + t.smem_w + 16 + int64_t(2 * t.steps) * 4;
    if (t.smem <= budget) break;
    if (t.tp > 1) { t.tp = (t.tp + 1) / 2; continue; }
    if (t.tq > 16) { t.tq = (t.tq + 1) / 2; continue; }
    break;  // does not fit: can_implement says so
  }
  t.tiles_p = int((P + t.tp - 1) / t.tp);
  t.tiles_q = int((Q + t.tq - 1) / t.tq);
  // Small images (ResNeXt's last stage: 7x7 outputs): one tile would leave most of the block's 8 m16 tiles,
  // and so half its warps, idle and stage the 64 channels' filters for 49 pixels; a block takes several
  // whole images instead, their input tiles side by side.
  if (t.tiles_p == 1 && t.tiles_q == 1 && t.smem <= budget) {
    t.nimg = int(std::max<int64_t>(1, std::min<int64_t>(pb.n, kMaxM / (int64_t(t.tp) * t.tq))));
    while (t.nimg > 1 && t.smem + bufs * (t.nimg - 1) * t.smem_in > budget) --t.nimg;
    t.smem += bufs * (t.nimg - 1) * t.smem_in;
    t.smem_in *= t.nimg;
  }
  t.tiles_n = int((pb.n + t.nimg - 1) / t.nimg);
  t.mtiles = (t.nimg * t.tp * t.tq + 15) / 16;
  t.tq_mul = (65536 + t.tq - 1) / t.tq;
  t.img_mul = (65536 + t.tp * t.tq - 1) / (t.tp * t.tq);
  t.budget = budget;
  return t;
}

// The pieces both kernels are made of (the one-tile kernel below, the persistent one in
// grouped_mma_pipe.cuh). Thread tid = warp * 32 + lane; warp = wm * (8 / kWN) + wn.

// The slot of staged input pixel (image img, row y, column x) of a tile: rows of iws slots, the columns of
// each parity together where de = 2 (x even first), so that the outputs of consecutive columns read
// consecutive slots at stride 2 too.
__device__ __forceinline__ int gm_slot(const GmPlan& t, int img, int y, int x) {
  return (img * t.ih + y) * t.iws + (x & (t.de - 1)) * t.wh + (x >> (t.de - 1));
}

// Stage the input tile of each of the block's images whose first output is (n0, p0, q0) into s_in (zeros
// outside the image, past C and past N), 16 bytes a piece: [image][ih][iw] pixels. Aligned: by cp.async
// (the caller commits and waits) down the staged columns, so that a piece costs a bounds test, a select and
// two adds: a thread's chunk and columns are fixed (ceil(iw / 32) at most, usually one), so its column's
// slot, global offset and bounds test are computed once a column, and a step down a row adds a row's stride
// to both offsets. (ncu: stepping each piece's pixel with a carry took 74 instructions a piece, 18% of the
// one-tile kernel's at 128@56; a row's offset and slot computed again each row, 65 a piece at 512@28 stride
// 2, where a row has one piece a thread.)
template <typename T>
__device__ __forceinline__ void gm_stage_input(const ConvDims& d, const GmPlan& t, bool aligned, const T* __restrict__ src,
                                               unsigned char* s_in, int64_t n0, int p0, int q0, int c0) {
  const int tid = threadIdx.x;
  const int h0 = p0 * d.stride_h - d.pad_h, w0 = q0 * d.stride_w - d.pad_w;
  if (aligned) {
    constexpr int kPx = kThreads / kChunks;
    const int c = tid % kChunks, ch = c0 + c * 8;
    const bool c_in = ch < d.c;  // C % 8 == 0: a chunk is all in or all out
    // the staged rows y in [y_lo, y_hi) are inside the image
    const int y_lo = max(0, -h0), y_hi = min(t.ih, d.h - h0);
    const int64_t g_row = int64_t(d.w) * d.c;
    const uint32_t s_row = uint32_t(t.iws * kPitch);
    const uint32_t s_base = uint32_t(__cvta_generic_to_shared(s_in)) + uint32_t(c * 16);
    for (int img = 0; img < t.nimg; ++img) {
      const int64_t n = n0 + img;
      const bool img_ok = c_in && n < d.n;
      for (int x = tid / kChunks; x < t.iw; x += kPx) {
        const int w = w0 + x;
        const bool col_ok = img_ok && w >= 0 && w < d.w;
        int64_t g = ((n * d.h + h0) * d.w + w) * d.c + ch;  // row 0's piece (used only where inside)
        uint32_t s = s_base + uint32_t(gm_slot(t, img, 0, x) * kPitch);
#pragma unroll 1
        for (int y = 0; y < t.ih; ++y, g += g_row, s += s_row) {
          const bool ok = col_ok && y >= y_lo && y < y_hi;
          cp_async16(s, ok ? src + g : src, ok);
        }
      }
    }
    return;
  }
  for (int u = tid; u < t.nimg * t.ih * t.iw * kChunks; u += kThreads) {
    const int c = u % kChunks, pix = u / kChunks, yi = pix / t.iw, x = pix - yi * t.iw;  // (pix: img, y, x)
    const int img = t.nimg > 1 ? yi / t.ih : 0, y = yi - img * t.ih;  // (one image: no division)
    const int h = h0 + y, w = w0 + x, ch = c0 + c * 8;
    const int64_t n = n0 + img;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (n < d.n && h >= 0 && h < d.h && w >= 0 && w < d.w && ch < d.c) {
      const T* g = src + ((n * d.h + h) * d.w + w) * d.c + ch;
      T e[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) e[j] = g[j];
      memcpy(&v, e, 16);
    }
    *reinterpret_cast<uint4*>(s_in + gm_slot(t, img, y, x) * kPitch + c * 16) = v;
  }
}

// The block's filters (output channels c0 ..) as rows of 16-byte units in s_w, zeros past the last unit and
// past K; 16 bytes of zeros at s_zero (the padding unit's A rows); the unit table at s_unit. With 8 or more
// channels a group the unit order (tap, channel) is KRSC's own, so a row is a copy of the filter's; merged
// groups are spread block diagonally (a unit's channels of another group are zeros).
// NOTE: one element a thread with the index arithmetic per element took longer than the convolution
// (0.15 ms on rnx50_g3x3_128_56_g32, 0.13 on rnx50_g3x3_1024_7_g32): whole units a thread here, and for
// merged groups one word load a unit (element loads and a division by the row length a unit were 10% of the
// kernel's instructions at 128@56).
template <typename T>
__device__ __forceinline__ void gm_stage_filters(const ConvDims& d, const GmPlan& t, bool aligned, const T* __restrict__ wei,
                                                 unsigned char* s_w, unsigned char* s_zero, int* s_unit, int c0) {
  const int tid = threadIdx.x, RS = d.r * d.s, cg = d.cg, octs = t.cs / 8;
  // kRowThreads threads a filter row, each every kRowThreads-th unit: no division by the row's length
  constexpr int kRowThreads = kThreads / kBlockC;
  const int nl = tid / kRowThreads, k = c0 + nl;
  // merged groups (cg = 2 or 4): k's group's first channel within its 8-channel super-group, and its word
  const int wpos = cg < 8 ? ((k & 7) & ~(cg - 1)) / 2 : 0;
  for (int u = tid % kRowThreads; u < t.wstride; u += kRowThreads) {
    unsigned char* s = s_w + (nl * t.wstride + u) * 16;
    const bool ok = u < t.units && k < d.k;
    if (cg >= 8 && aligned) {  // (by cp.async too)
      cp_async16_zfill(s, ok ? wei + int64_t(k) * RS * cg + u * 8 : wei, ok);
      continue;
    }
    uint4 v = make_uint4(0, 0, 0, 0);
    if (ok && cg >= 8) {
      const T* g = wei + int64_t(k) * RS * cg + u * 8;
      T e[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) e[j] = g[j];
      memcpy(&v, e, 16);
    } else if (ok) {
      // unit u = tap u of the 8-channel super-group holding k: k's cg channels (one 8- or 4-byte word pair or
      // word of the filter) at word wpos, zeros for the other groups' channels
      const T* g = wei + (int64_t(k) * RS + u) * cg;
      uint32_t lo = 0, hi = 0;
      if (aligned && cg == 4) {
        const uint2 p = *reinterpret_cast<const uint2*>(g);
        lo = p.x, hi = p.y;
      } else if (aligned) {
        lo = *reinterpret_cast<const uint32_t*>(g);
      } else {
        T e[4];  // static indices: a runtime one put the array in local memory
#pragma unroll
        for (int j = 0; j < 4; ++j) e[j] = j < cg ? g[j] : float_to_elem<T>(0.0f);
        memcpy(&lo, e, 4);
        memcpy(&hi, e + 2, 4);
      }
      v.x = wpos == 0 ? lo : 0u;
      v.y = wpos == 1 ? lo : wpos == 0 && cg == 4 ? hi : 0u;
      v.z = wpos == 2 ? lo : 0u;
      v.w = wpos == 3 ? lo : wpos == 2 && cg == 4 ? hi : 0u;
    }
    *reinterpret_cast<uint4*>(s) = v;
  }
  if (tid < 4) reinterpret_cast<uint32_t*>(s_zero)[tid] = 0;
  // unit u (tap, 8-channel chunk) -> its byte offset from an output pixel's first staged slot; -1: padding
  for (int u = tid; u < 2 * t.steps; u += kThreads) {
    int e = -1;
    if (u < t.units) {
      const int tap = u / octs, r = tap / d.s, s = tap - r * d.s, sd = s * d.dil_w;
      e = (r * d.dil_h * t.iws + (sd & (t.de - 1)) * t.wh + (sd >> (t.de - 1))) * kPitch + (u % octs) * 16;
    }
    s_unit[u] = e;
  }
}

// The A row offset of output pixel m of a tile (m < m_rows; past it pixel 0, computed and never stored): its
// first staged slot (tap 0, 0) times the pitch.
__device__ __forceinline__ int gm_arow(const ConvDims& d, const GmPlan& t, int m, int m_rows) {
  if (m >= m_rows) m = 0;
  const int img = (m * t.img_mul) >> 16, mi = m - img * t.tp * t.tq;
  const int py = (mi * t.tq_mul) >> 16, px = mi - py * t.tq;
  return ((img * t.ih + py * d.stride_h) * t.iws + px * (d.stride_w / t.de)) * kPitch;
}

// acc += the warp's kWM m16 tiles x kWN n8 tiles over all k16 steps, from the staged tile at in_addr. A rows:
// lane l reads row l % 8 of matrix l / 8: pixel (l % 8) + 8 * ((l / 8) % 2) of the m16 tile, unit 2*step +
// l / 16. B rows: lanes 0-7 row n_base + l, unit 2*step; 8-15 the same rows, unit + 1; 16-31 the next n8 tile
// (w_addr is the lane's row and unit in s_w). sgc: the warp's super-group's first chunk in a staged pixel.
template <typename T, int kWN>
__device__ __forceinline__ void gm_multiply(float (&acc)[8 / kWN][kWN][4], const GmPlan& t, const int (&arow)[8 / kWN],
                                            const int* s_unit, uint32_t in_addr, uint32_t zero_addr, uint32_t w_addr,
                                            int sgc) {
  constexpr int kWM = 8 / kWN;
  const int a_unit = (threadIdx.x & 31) >> 4;
  for (int step = 0; step < t.steps; ++step) {
    const int ue = s_unit[2 * step + a_unit];
    uint32_t b[kWN][2];
    if constexpr (kWN == 1) {
      ldmatrix_x2(b[0], w_addr + uint32_t(step * 32));
    } else {
#pragma unroll
      for (int j = 0; j < kWN; j += 2) {
        uint32_t r4[4];
        ldmatrix_x4(r4, w_addr + uint32_t(step * 32 + j * 8 * t.wstride * 16));
        b[j][0] = r4[0], b[j][1] = r4[1], b[j + 1][0] = r4[2], b[j + 1][1] = r4[3];
      }
    }
    const uint32_t base = in_addr + uint32_t(sgc * 16 + ue);
#pragma unroll
    for (int i = 0; i < kWM; ++i) {
      const uint32_t addr = ue < 0 ? zero_addr : base + uint32_t(arow[i]);
      uint32_t a[4];
      ldmatrix_x4(a, addr);
#pragma unroll
      for (int j = 0; j < kWN; ++j) Mma<T>::run(acc[i][j], a, b[j]);
    }
  }
}

// The first image, output row and column of tile `tile` (image, tile row, tile column; the column fastest).
__device__ __forceinline__ void gm_origin(const GmPlan& t, int tile, int64_t& n0, int& p0, int& q0) {
  q0 = tile % t.tiles_q * t.tq;
  tile /= t.tiles_q;
  p0 = tile % t.tiles_p * t.tp;
  n0 = int64_t(tile / t.tiles_p) * t.nimg;
}

// The output pixels of the tile at (n0, p0): its images' (the last tile may have fewer), or one tile's (the
// last tile row may be short; one image a tile then).
__device__ __forceinline__ int gm_valid_pixels(const ConvDims& d, const GmPlan& t, int64_t n0, int p0) {
  return int(min(int64_t(t.nimg), int64_t(d.n) - n0)) * min(t.tp, d.p - p0) * t.tq;
}

// The tile's outputs, for both kernels: apply_epilogue's arithmetic before the activation (alpha, bias, beta *
// residual) on the accumulators in registers, the bias of the thread's channels loaded once, then the
// activation over all of them at once (activate_all: one switch a thread), each value rounded once into s_out
// (the tile's input buffer, free once multiplied: 128-byte pixels, 16-byte chunks XOR-swizzled with m % 8 so
// that the 8 rows of a store fall on distinct banks), then written out 16 bytes a thread, consecutive threads
// on consecutive chunks of a pixel. (ncu: the epilogue of one store and its switch per value took 40% of the
// one-tile kernel's instructions at 128@56.) Every thread of the block calls it (it has a barrier); s_out
// must be free (a barrier since the multiply). active: the warp has m16 tiles of the block's.
template <typename T, int kWN>
__device__ __forceinline__ void gm_epilogue(float (&acc)[8 / kWN][kWN][4], bool active, const ConvDims& d,
                                            const GmPlan& t, const DeviceEpilogue<T>& epi, T* dst,
                                            unsigned char* s_out, int64_t n0, int p0, int q0, int c0, int wm,
                                            int n_base) {
  constexpr int kWM = 8 / kWN;
  const int tid = threadIdx.x, lane = tid % 32;
  const int m_valid = gm_valid_pixels(d, t, n0, p0);
  const int64_t first = ((n0 * d.p + p0) * d.q + q0) * d.k + c0;  // the tile's first output pixel's channel c0
  const bool rows = t.tq == d.q;  // a tile is whole output rows (whole images where several): pixel m at first + m * K
  // Output pixel m of the tile -> its channel c0 in dst; -1 past the image's last column.
  auto out_at = [&](int m) -> int64_t {
    if (rows) return first + int64_t(m) * d.k;
    const int img = (m * t.img_mul) >> 16, mi = m - img * t.tp * t.tq;
    const int py = (mi * t.tq_mul) >> 16, px = mi - py * t.tq;
    return q0 + px >= d.q ? -1 : (((n0 + img) * d.p + p0 + py) * d.q + q0 + px) * d.k + c0;
  };
  // Output pixels a buffer holds as staged outputs (128 bytes a pixel): at least the tile's (ih >= tp, iw >= tq).
  const int out_rows = int(t.smem_in / kPixBytes);
  if (active) {
    // C fragment: lane l holds rows l / 4 and l / 4 + 8, columns 2 * (l % 4) + 0, 1 of each 16 x 8 tile.
    float bias[kWN][2];
#pragma unroll
    for (int j = 0; j < kWN; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int k = c0 + n_base + j * 8 + 2 * (lane % 4) + e;
        bias[j][e] = epi.bias && k < d.k ? elem_to_float<T>(epi.bias[k]) : 0.0f;
      }
#pragma unroll
    for (int i = 0; i < kWM; ++i)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int m = (wm * kWM + i) * 16 + lane / 4 + hf * 8;
        const int64_t o = epi.residual && m < m_valid ? out_at(m) : -1;  // read before s_out's copy writes it
#pragma unroll
        for (int j = 0; j < kWN; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int kl = n_base + j * 8 + 2 * (lane % 4) + e;  // channel within the block
            float v = acc[i][j][hf * 2 + e] * epi.alpha;
            if (epi.bias) v += bias[j][e];
            if (o >= 0 && c0 + kl < d.k) v += epi.beta * elem_to_float<T>(epi.residual[o + kl]);
            acc[i][j][hf * 2 + e] = v;
          }
      }
    activate_all<kWM * kWN * 4, T>(epi.activation, &acc[0][0][0]);
#pragma unroll
    for (int i = 0; i < kWM; ++i)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int m = (wm * kWM + i) * 16 + lane / 4 + hf * 8;
        if (m >= out_rows) continue;
#pragma unroll
        for (int j = 0; j < kWN; ++j) {
          const int kl = n_base + j * 8 + 2 * (lane % 4);
          Vec<T, 2> w;
          w.v[0] = float_to_elem<T>(acc[i][j][hf * 2]);
          w.v[1] = float_to_elem<T>(acc[i][j][hf * 2 + 1]);
          *reinterpret_cast<Vec<T, 2>*>(s_out + m * kPixBytes + ((((kl >> 3) ^ m) & 7) << 4) + (kl & 7) * 2) = w;
        }
      }
  }
  __syncthreads();
  const bool vec_out = (reinterpret_cast<uintptr_t>(dst) & 15) == 0;  // (K % 8 == 0: every pixel's row too)
  for (int idx = tid; idx < m_valid * kChunks; idx += kThreads) {
    const int m = idx / kChunks, c = idx % kChunks;
    if (c0 + c * 8 >= d.k) continue;
    const int64_t o = out_at(m);
    if (o < 0) continue;
    const uint4 v = *reinterpret_cast<const uint4*>(s_out + m * kPixBytes + (((c ^ m) & 7) << 4));
    if (vec_out) {
      *reinterpret_cast<uint4*>(dst + o + c * 8) = v;
    } else {
      T e[8];
      memcpy(e, &v, 16);
#pragma unroll
      for (int x = 0; x < 8; ++x) dst[o + c * 8 + x] = e[x];
    }
  }
}

// Block: x = (image, tile row, tile column), y = 64-channel block; one tile a block.
template <typename T, int kWN>
__global__ void __launch_bounds__(kThreads, 4)
    grouped_mma_kernel(ConvDims d, GmPlan t, bool aligned /* x and w 16-byte aligned */, const T* __restrict__ src, const T* __restrict__ wei,
                       T* dst, DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
  constexpr int kWM = 8 / kWN;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* s_in = smem;                      // [ih][iw] pixels of 128 bytes, chunks swizzled
  unsigned char* s_w = smem + t.smem_in;           // [64 output channels][wstride units of 16 bytes]
  unsigned char* s_zero = s_w + t.smem_w;          // 16 bytes of zeros
  int* s_unit = reinterpret_cast<int*>(s_zero + 16);  // unit -> byte offset (tap, chunk); padding: -1

  int64_t n0;
  int p0, q0;
  gm_origin(t, int(blockIdx.x), n0, p0, q0);  // (fewer than 2^31 tiles: can_implement)
  const int c0 = blockIdx.y * kBlockC;  // first input = output channel of the block
  const int tid = threadIdx.x, cs = t.cs, octs = cs / 8;

  gm_stage_input(d, t, aligned, src, s_in, n0, p0, q0, c0);
  gm_stage_filters(d, t, aligned, wei, s_w, s_zero, s_unit, c0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  const int warp = tid / 32, lane = tid % 32;
  const int wm = warp / (8 / kWN), wn = warp % (8 / kWN);
  const bool active = wm * kWM < t.mtiles;
  const int n_base = wn * kWN * 8;          // the warp's first output channel in the block
  const int sgc = (n_base / cs) * octs;     // its super-group's first chunk in a staged pixel
  const int m_valid = gm_valid_pixels(d, t, n0, p0);

  float acc[kWM][kWN][4];
  if (active) {
    int arow[kWM];
#pragma unroll
    for (int i = 0; i < kWM; ++i)
      arow[i] = gm_arow(d, t, (wm * kWM + i) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, m_valid);
    const uint32_t in_addr = uint32_t(__cvta_generic_to_shared(s_in));
    const uint32_t zero_addr = uint32_t(__cvta_generic_to_shared(s_zero));
    const int b_row = n_base + (lane & 7) + ((lane >> 4) & 1) * 8, b_unit = (lane >> 3) & 1;
    const uint32_t w_addr = uint32_t(__cvta_generic_to_shared(s_w)) + uint32_t((b_row * t.wstride + b_unit) * 16);
    zero_fragments(acc);
    gm_multiply<T, kWN>(acc, t, arow, s_unit, in_addr, zero_addr, w_addr, sgc);
  }
  __syncthreads();  // every warp has read the input tile: its buffer takes the outputs
  gm_epilogue<T, kWN>(acc, active, d, t, epi, dst, s_in, n0, p0, q0, c0, wm, n_base);
}

}  // namespace
}  // namespace convkit::detail

#include "cuda/tc/grouped_mma_pipe.cuh"

namespace convkit::detail {
namespace {

// The kernels as variants: "tile" (one tile a block) and "pipe" (grouped_mma_pipe.cuh: persistent, the next
// tile in flight), where its two input tiles fit kPipeBudget.
//
// The heuristic's kernel: the persistent one where a group has 16 or more channels (filters of 18 KiB and
// more a block, staged once instead of once a tile) and its plan keeps the one-tile kernel's images a tile;
// the one-tile kernel elsewhere. Measured on ResNeXt-50's grouped layers (H200, bf16, batch 32, docs/perf.md
// 2026-12-04, since both share gm_epilogue): the persistent kernel 0.98-1.04x the one-tile kernel at 16 and
// 32 channels a group (512@28 stride 2, 512@14, 1024@7), 0.80-0.86x at 4 and 8 channels (128@56, 256@56
// stride 2, 256@28), and 0.69x at 1024@14 stride 2 (its two input tiles fit one image a tile where the
// one-tile kernel takes two).
bool heuristic_pipe(const Conv2dProblem& pb, const GmPlan& pipe, const GmPlan& tile) {
  return pipe.smem <= kPipeBudget && pb.c_per_group() >= 16 && pipe.nimg == tile.nimg;
}

std::vector<std::string> variants_of(const Conv2dProblem& pb) {
  const GmPlan pipe = plan_of(pb, 2, kPipeBudget);
  if (pipe.smem > kPipeBudget) return {"tile"};
  if (heuristic_pipe(pb, pipe, plan_of(pb))) return {"pipe", "tile"};
  return {"tile", "pipe"};
}

// The plan of the kernel a call runs: the named variant's ("tile" or "pipe"; run() has checked that it is
// offered) or, for "", the heuristic's. No strings or lists: the launch asks it on every call.
GmPlan chosen_plan(const Conv2dProblem& pb, const std::string& variant) {
  const GmPlan tile = plan_of(pb);
  if (variant == "tile") return tile;
  const GmPlan pipe = plan_of(pb, 2, kPipeBudget);
  if (variant == "pipe") return pipe;
  return heuristic_pipe(pb, pipe, tile) ? pipe : tile;
}

template <typename T, int kWN>
void launch_wn(const ConvCall& call, const GmPlan& t) {
  const Conv2dProblem& pb = call.problem;
  const ConvDims d = make_dims(pb);
  const unsigned cblocks = unsigned((pb.c + kBlockC - 1) / kBlockC);
  const bool aligned = reinterpret_cast<uintptr_t>(call.src.data) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(call.wei.data) % 16 == 0;
  const auto src = static_cast<const T*>(call.src.data);
  const auto wei = static_cast<const T*>(call.wei.data);
  const auto dst = static_cast<T*>(call.dst.data);
  const auto epi = DeviceEpilogue<T>::from(call.epilogue);
  const int64_t tiles = int64_t(t.tiles_n) * t.tiles_p * t.tiles_q;
  if (t.bufs == 2) {
    auto kernel = grouped_mma_pipe_kernel<T, kWN>;
    const void* kp = reinterpret_cast<const void*>(kernel);
    opt_in_dynamic_smem(kp, t.smem);
    // as many blocks as are resident at once, shared by the channel blocks
    const int64_t slots = int64_t(blocks_per_sm(kp, kThreads, t.smem)) * sm_count_of_current_device();
    const int64_t per_cblock = std::clamp<int64_t>((slots + cblocks - 1) / cblocks, 1, tiles);
    launch_pdl(kernel, dim3(unsigned(per_cblock), cblocks), dim3(kThreads), size_t(t.smem), as_stream(call.stream), d,
               t, aligned, src, wei, dst, epi);
    CK_LAUNCH("grouped_mma_pipe_kernel");
    return;
  }
  opt_in_dynamic_smem(reinterpret_cast<const void*>(grouped_mma_kernel<T, kWN>), t.smem);
  launch_pdl(grouped_mma_kernel<T, kWN>, dim3(unsigned(tiles), cblocks), dim3(kThreads), size_t(t.smem),
             as_stream(call.stream), d, t, aligned, src, wei, dst, epi);
  CK_LAUNCH("grouped_mma_kernel");
}

template <typename T>
void launch(const ConvCall& call) {
  if (call.problem.output_elems() == 0) return;
  const GmPlan t = chosen_plan(call.problem, call.variant);
  switch (t.kwn) {
    case 1: return launch_wn<T, 1>(call, t);
    case 2: return launch_wn<T, 2>(call, t);
    default: return launch_wn<T, 4>(call, t);
  }
}

class CudaGroupedMma final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_grouped_mma"; }
  std::string description() const override {
    return "grouped conv with 2-64 channels a group on tensor cores (mma.sync): a block stages 64 channels of "
           "whole groups with their halo once, each warp multiplies its own group only (one tile a block, or a "
           "persistent block with the next tile in flight); f16/bf16 NHWC, K = C";
  }
  Support can_implement(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (pb.groups < 2) return Support::no("it computes grouped convolutions only (groups > 1).");
    const int64_t cg = pb.c_per_group();
    if (cg < 2) return Support::no("one input channel a group is a depthwise layer (cuda_depthwise takes it).");
    if (pb.k_per_group() != cg)
      return Support::no("it needs as many output as input channels a group (K = C), as ResNeXt's layers have.");
    if (!(cg == 2 || cg == 4 || (cg % 8 == 0 && cg <= 64)))
      return Support::no("it takes 2, 4 or a multiple of 8 up to 64 channels a group (16-byte reduction units).");
    if (pb.c % 8 != 0) return Support::no("it needs C % 8 == 0 (16-byte chunks of a pixel).");
    if (cfg.layout != Layout::nhwc) return Support::no("it reads NHWC tensors only.");
    if (cfg.dtype == DType::f32) return Support::no("it computes f16/bf16 tensors only (fp32 accumulation).");
    if (Support s = dims_fit_int(pb); !s) return s;
    const GmPlan t = plan_of(pb);
    if (t.smem > kSmemBudget)
      return Support::no("the dilated filter extent is too large: the smallest tile needs " + std::to_string(t.smem) +
                         " bytes of shared memory (" + std::to_string(kSmemBudget) + " available).");
    if (int64_t(t.tiles_n) * t.tiles_p * t.tiles_q >= INT_MAX) return Support::no("more than 2^31 tiles (grid.x).");
    if ((pb.c + kBlockC - 1) / kBlockC > 65535) return Support::no("more than 65535 channel blocks (grid.y).");
    return Support::yes();
  }
  std::vector<std::string> variants(const Conv2dProblem& pb, const ConvConfig&) const override {
    return variants_of(pb);
  }
  std::string detail(const Conv2dProblem& pb, const ConvConfig&) const override {
    const GmPlan t = chosen_plan(pb, "");
    return "kernel " + std::string(t.bufs == 2 ? "pipe" : "tile") + ", " +
           (t.nimg > 1 ? std::to_string(t.nimg) + " images x " : std::string()) + std::to_string(t.tp) + "x" +
           std::to_string(t.tq) + " outputs x 64 channels a block, groups of " +
           std::to_string(pb.c_per_group()) + (pb.c_per_group() < 8 ? " merged to 8" : "") + ", " +
           std::to_string(t.steps) + " k16 steps, " + std::to_string(t.smem / 1024) + " KiB smem";
  }
  void run(const ConvCall& call) const override {
    if (Support ok = can_implement(call.problem, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + call.problem.to_string() + ": " + ok.reason);
    if (!call.variant.empty()) {
      const std::vector<std::string> vs = variants_of(call.problem);
      if (std::find(vs.begin(), vs.end(), call.variant) == vs.end())
        throw Error(StatusCode::invalid_problem, name() + " has no variant '" + call.variant + "' for " +
                                                     call.problem.to_string() + ".");
    }
    check_residual_overlap(call.epilogue.residual, call.dst.data,
                           size_t(call.problem.output_elems()) * dtype_size(call.config.dtype));
    switch (call.config.dtype) {
      case DType::f16: launch<__half>(call); break;
      case DType::bf16: launch<__nv_bfloat16>(call); break;
      case DType::f32: throw Error(StatusCode::unsupported, "cuda_grouped_mma computes f16/bf16 only.");
    }
  }
};

}  // namespace

const Algorithm* make_cuda_grouped_mma() {
  static CudaGroupedMma algo;
  return &algo;
}

}  // namespace convkit::detail
