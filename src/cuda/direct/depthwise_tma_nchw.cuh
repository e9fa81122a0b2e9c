// cuda_depthwise's NCHW TMA kernel: fp32 NCHW depthwise (M = 1) whose input tiles arrive by the
// tensor-memory-access engine, several tiles ahead, as in the NHWC TMA kernel (depthwise_tma.cuh).
//
// Adds over the NCHW window kernel (depthwise_nchw_window_kernel in depthwise.cu): there each block stages its
// tile with cp.async, waits, then computes (no copy in flight while it computes, one tile a block) and a thread
// reads its window one scalar at a time. Here the blocks are persistent with `stages` tiles in flight on
// mbarriers (thread 0 issues one copy a tile; the engine fills the padding with zeros), and a thread's outputs
// are kQt = 4 consecutive columns of kPw rows, so that one window row is kVec 16-byte shared-memory loads
// feeding up to kQt * kK FMAs each value.
//
// Work mapping: a tile = one image x cb channels x tile_p output rows x tile_q output columns. Thread
// (channel ch, row group wy, column group wx), wx fastest (a warp's loads are consecutive 16-byte pieces of
// one or two rows), owns kPw x kQt outputs of channel chunk * cb + ch at rows (wy + sub * ty) * kPw, sub <
// nsub, columns wx * kQt. Two ways to stage a tile:
// - tiles: a box of cb channels x ih rows x iw columns (iw a multiple of 4: every staged row 16-byte aligned)
//   around the tile, its halo and padding included (coordinates outside the image arrive as zeros): W must be
//   a multiple of 4 (a tensor map's row stride is a multiple of 16 bytes), and the box's first column a
//   multiple of 4 too (an innermost coordinate off 16 bytes is an illegal instruction), so the box starts
//   kOff = tma_nchw_off(kK) columns left of the tile's window, and the padding must be (kK - 1) / 2 modulo 4
//   (every "same" padding);
// - planes (kPlane, for images up to 256 pixels whose rows are not: 14x14, 7x7): a tile is cb whole channel
//   planes, one contiguous run of the tensor (in units of g planes whose bytes are a multiple of 16); the
//   padding is a predicate on each load.
// Where a tile is whole planes and Q is not a multiple of 4 (7 and 14 columns, whose rows are not 16-byte
// aligned), a thread's outputs go to one of two shared-memory buffers (alpha and bias applied) and after the
// tile's barrier the block stores them as one contiguous run of the output, consecutive threads on consecutive
// 16-byte pieces, adding the residual and applying the activation on the way (store_planes). Stored by each
// thread instead, a warp's store of one of its 4 columns touches a sector every 4 floats.
// Square 3x3, 5x5 or 7x7 filters, the same stride (1 or 2) both ways, dilation 1; fp32 only (16-bit NCHW stays
// on the window and general kernels).
// nvcc -Xptxas -v (sm_90, no stack frames): 64-108 registers on tiles, 73-128 on planes.
// measured (H100, 2026-12-05, f32 NCHW batch 32, the heuristic's variant, cuDNN in the same process, docs/perf.md):
// mbv2_dw3x3_144_56 0.0510 ms (tma/256/s2/nchw, 1.63x cuDNN; the window kernel 0.159), cnxt_dw7x7_96_56 0.0505
// (6.63x), mbv2_dw3x3_960_7 0.0118 (tma/64/s4/nchw, staged stores, 1.59x).
#pragma once

#include "cuda/common/launch.cuh"
#include "cuda/direct/depthwise_tma.cuh"  // the shared tile walk, kTmaMaxStages

namespace convkit::detail {
namespace {

// The tiling of one launch, chosen on the host (plan_tma_nchw in depthwise.cu).
struct DwTmaNchw {
  int plane = 0;                // 1: whole planes (kPlane), 0: tiles with their halo
  int g = 1;                    // planes: planes a box row (g * H * W * 4 bytes a multiple of 16)
  int tx = 1, ty = 1;           // threads across a tile's columns (kQt outputs each) and down its rows (kPw)
  int cb = 1;                   // channels a tile
  int nsub = 1;                 // row groups a thread takes in a tile (kPw rows each, ty groups apart)
  int iw = 1, ih = 1;           // a staged channel: columns (the row pitch, in elements) and rows
  int tile_q = 1, tile_p = 1;   // output columns and rows of a tile
  int chunks = 1, tiles_q = 1, tiles_p = 1;
  int stages = 2;
  int box_bytes = 0;            // one tile's copy: what its mbarrier waits for
  int stage_bytes = 0;          // a stage's stride: box_bytes rounded up to 128 (a TMA destination's alignment)
  int out_bytes = 0;            // staged outputs: one of the two output buffers (cb * P * Q floats, rounded up to
                                // 16 bytes) after the stages; 0: each thread stores its own outputs
  int items = 0;                // tiles: N * chunks * tiles_q * tiles_p (under 2^31)
  int64_t smem = 0;
  int threads = 32;
  FastDiv div_p, div_q, div_n;  // tiles_p, tiles_q and N as divisors (the tile decode)
};

// Tiles: the columns a box starts left of its first window (the padding (kK - 1) / 2 rounded up to 4).
constexpr int tma_nchw_off(int k) { return (4 - ((k - 1) / 2) % 4) % 4; }

// Staged outputs: a tile's cb whole output planes are one contiguous run of dst, `count` floats from `first`,
// staged (alpha and bias applied) at `out`. The block stores the run with consecutive threads on consecutive
// 16-byte pieces, the residual and the activation applied on the way (where the thread stores: a residual
// that is dst is read before it is written).
__device__ __forceinline__ void store_planes(const DeviceEpilogue<float>& epi, const float* out,
                                             float* dst, int64_t first, int count) {
  int done = 0;
  if ((first & 3) == 0) {  // (dst and the residual are 16-byte aligned: the launch checks)
    const float4* o4 = reinterpret_cast<const float4*>(out);
    for (int v = int(threadIdx.x); v < count / 4; v += int(blockDim.x)) {
      const float4 a = o4[v];
      float r[4] = {a.x, a.y, a.z, a.w};
      if (epi.residual) {
        const float4 rv = *reinterpret_cast<const float4*>(epi.residual + first + 4 * v);
        r[0] += epi.beta * rv.x, r[1] += epi.beta * rv.y, r[2] += epi.beta * rv.z, r[3] += epi.beta * rv.w;
      }
      activate_all<4, float>(epi.activation, r);
      *reinterpret_cast<float4*>(dst + first + 4 * v) = make_float4(r[0], r[1], r[2], r[3]);
    }
    done = count / 4 * 4;
  }
  for (int e = done + int(threadIdx.x); e < count; e += int(blockDim.x)) {
    float r[1] = {out[e]};
    if (epi.residual) r[0] += epi.beta * epi.residual[first + e];
    activate_all<1, float>(epi.activation, r);
    dst[first + e] = r[0];
  }
}

template <int kK, int kU, int kPw, bool kPlane>
__global__ void __launch_bounds__(256) depthwise_nchw_tma_kernel(const __grid_constant__ CUtensorMap map, ConvDims d,
                                                                DwTmaNchw t, const float* __restrict__ wei, float* dst,
                                                                DeviceEpilogue<float> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kQt = 4;
  constexpr int kRows = (kPw - 1) * kU + kK, kCols = (kQt - 1) * kU + kK;  // a thread's input window
  constexpr int kOff = kPlane ? 0 : tma_nchw_off(kK);  // a window's first column in its first 16 bytes
  constexpr int kVec = (kOff + kCols + 3) / 4;           // 16-byte loads a window row (tiles)
  // (Tiles at stride 1 are never staged: "same" padding there gives Q = W, a multiple of 4.)
  constexpr bool kStaged = kPlane || kU > 1;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t full[kTmaMaxStages];
  const uint32_t s_tiles = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t s_full = uint32_t(__cvta_generic_to_shared(full));
  const int per_ch = t.tx * t.ty;
  const int ch = int(threadIdx.x) / per_ch, rem = int(threadIdx.x) - ch * per_ch;
  const int wy = rem / t.tx, wx = rem - wy * t.tx;

  auto issue = [&](int item, int stage) {
    const DwTile tile = decode_tile(t.div_p, t.div_q, t.div_n, item);
    const uint32_t bar = s_full + 8 * stage;
    mbar_arrive_expect_tx(bar, uint32_t(t.box_bytes));  // NOTE: the copy's bytes, not the stage's stride
    const uint32_t dst_s = s_tiles + uint32_t(stage * t.stage_bytes);
    if constexpr (kPlane)
      tma_load_4d(dst_s, &map, 0, tile.chunk * (t.cb / t.g), tile.n, 0, bar);
    else
      tma_load_4d(dst_s, &map, tile.tq * t.tile_q * kU - d.pad_w - kOff, tile.tp * t.tile_p * kU - d.pad_h,
                  tile.chunk * t.cb, tile.n, bar);
  };
  tma_tiles_start(s_full, t.stages, t.items, issue);

  float w[kK][kK], bias = 0.0f;
  int loaded_chunk = -1;
  int stage = 0, obuf = 0;
  uint32_t parity = 0;
  const int ch_elems = t.ih * t.iw;  // a staged channel (planes: ih = H, iw = W)
  for (int item = int(blockIdx.x); item < t.items; item += int(gridDim.x)) {
    const auto [chunk, n, tp, tq] = decode_tile(t.div_p, t.div_q, t.div_n, item);
    const int c = chunk * t.cb + ch;
    const bool c_ok = ch < t.cb && c < d.k;
    if (chunk != loaded_chunk) {  // the channel's taps and bias
      loaded_chunk = chunk;
#pragma unroll
      for (int r = 0; r < kK; ++r)
#pragma unroll
        for (int s = 0; s < kK; ++s) w[r][s] = c_ok ? wei[int64_t(c) * (kK * kK) + r * kK + s] : 0.0f;
      bias = c_ok && epi.bias ? epi.bias[c] : 0.0f;
    }
    mbar_wait(s_full + 8 * stage, parity);
    const int q0 = tq * t.tile_q + wx * kQt;
    for (int sub = 0; sub < t.nsub; ++sub) {
      const int grp = wy + sub * t.ty;  // the thread's row group in the tile
      const int p0 = tp * t.tile_p + grp * kPw;
      float acc[kPw][kQt];
#pragma unroll
      for (int i = 0; i < kPw; ++i)
#pragma unroll
        for (int j = 0; j < kQt; ++j) acc[i][j] = 0.0f;
      if (c_ok) {
        // The window's first staged element: tiles, row grp * kPw * kU and column kOff + wx * kQt * kU of the
        // box (x[kOff] on); planes, input row p0 * kU - pad_h and column q0 * kU - pad_w of the plane (maybe
        // outside it).
        const int row0 = kPlane ? p0 * kU - d.pad_h : grp * kPw * kU;
        const int col0 = kPlane ? q0 * kU - d.pad_w : wx * kQt * kU;
        const float* tile = reinterpret_cast<const float*>(smem + stage * t.stage_bytes) + ch * ch_elems;
#pragma unroll
        for (int ir = 0; ir < kRows; ++ir) {
          float x[kVec * 4];
          if constexpr (kPlane) {
            const bool row_ok = row0 + ir >= 0 && row0 + ir < d.h;
#pragma unroll
            for (int jj = 0; jj < kCols; ++jj) {
              const int col = col0 + jj;
              x[jj] = row_ok && col >= 0 && col < d.w ? tile[(row0 + ir) * d.w + col] : 0.0f;
            }
          } else {
            const float4* v = reinterpret_cast<const float4*>(tile + (row0 + ir) * t.iw + col0);
#pragma unroll
            for (int u = 0; u < kVec; ++u) {
              const float4 f = v[u];
              x[4 * u] = f.x, x[4 * u + 1] = f.y, x[4 * u + 2] = f.z, x[4 * u + 3] = f.w;
            }
          }
#pragma unroll
          for (int i = 0; i < kPw; ++i) {
            const int r = ir - i * kU;  // the filter row that input row ir is for output row i
            if (r < 0 || r >= kK) continue;
#pragma unroll
            for (int j = 0; j < kQt; ++j)
#pragma unroll
              for (int s = 0; s < kK; ++s) acc[i][j] = fmaf(x[kOff + j * kU + s], w[r][s], acc[i][j]);
          }
        }
      }
      if (kStaged && t.out_bytes) {  // staged: alpha and bias here, the rest as the tile's run is stored
        float* out = reinterpret_cast<float*>(smem + t.stages * t.stage_bytes + obuf * t.out_bytes);
        const int pl = grp * kPw, ql = wx * kQt;  // (the tile is whole planes: tp = tq = 0)
#pragma unroll
        for (int i = 0; i < kPw; ++i)
#pragma unroll
          for (int j = 0; j < kQt; ++j)
            if (c_ok && pl + i < d.p && ql + j < d.q) out[(ch * d.p + pl + i) * d.q + ql + j] = acc[i][j] * epi.alpha + bias;
        if (sub == t.nsub - 1) {
          tma_tiles_release(item, stage, parity, t.stages, t.items, issue);  // (its barrier: every output staged)
          store_planes(epi, out, dst, (int64_t(n) * d.k + chunk * t.cb) * d.p * d.q,
                       min(t.cb, d.k - chunk * t.cb) * d.p * d.q);
          obuf ^= 1;  // the next tile's outputs go to the other buffer while slower threads still read this one
        }
        continue;
      }
      if (sub == t.nsub - 1) tma_tiles_release(item, stage, parity, t.stages, t.items, issue);
      if (!c_ok || q0 >= d.q) continue;
      // The epilogue in apply_epilogue's order (alpha, bias, beta * residual, activation), one rounding; a row's
      // four outputs as one 16-byte access where Q is a multiple of 4 (each row's start 16-byte aligned).
      const bool vec = (d.q & 3) == 0;
      const int64_t plane = (int64_t(n) * d.k + c) * d.p;
#pragma unroll
      for (int i = 0; i < kPw; ++i) {
        const int p = p0 + i;
        if (p >= d.p) break;
        const int64_t o = (plane + p) * d.q + q0;
#pragma unroll
        for (int j = 0; j < kQt; ++j) acc[i][j] = acc[i][j] * epi.alpha + bias;
        if (epi.residual) {
          if (vec) {
            const float4 rv = *reinterpret_cast<const float4*>(epi.residual + o);  // read before the store
            acc[i][0] += epi.beta * rv.x, acc[i][1] += epi.beta * rv.y;
            acc[i][2] += epi.beta * rv.z, acc[i][3] += epi.beta * rv.w;
          } else {
#pragma unroll
            for (int j = 0; j < kQt; ++j)
              if (q0 + j < d.q) acc[i][j] += epi.beta * epi.residual[o + j];
          }
        }
        activate_all<kQt, float>(epi.activation, acc[i]);
        if (vec) {
          *reinterpret_cast<float4*>(dst + o) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        } else {
#pragma unroll
          for (int j = 0; j < kQt; ++j)
            if (q0 + j < d.q) dst[o + j] = acc[i][j];
        }
      }
    }
  }
#endif
}

}  // namespace
}  // namespace convkit::detail
