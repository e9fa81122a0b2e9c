// The gradients of a depthwise convolution (groups = C, K = M*C for a channel multiplier M) as direct
// kernels: conv2d_backward_data and conv2d_backward_weight (convkit/backward.hpp) on CUDA, and through them
// the PyTorch extension's autograd.
//
// Adds over cuda_depthwise (the forward): the two transposed directions of the same sparse problem, so that
// a depthwise layer's backward does no work on the zeros an implicit GEMM would hold either.
//   data gradient: a gather. Input element (n, c, h, w) sums gz[n, c*M + m, p, q] * w[c*M + m, r, s] over
//     the taps whose output (p, q) lands on it: (h + pad_h - r*dil_h) a multiple of stride_h, and likewise
//     along W. Every stride, dilation and padding; no zero-stuffed copy of gz.
//   weight gradient: a reduction over N*P*Q per (channel, tap) in two kernels and a fixed order, so the
//     same inputs give the same bits on every call: the first writes one fp32 partial sum per pixel slice,
//     the second adds the slices in order and rounds once.
//
// Work mapping.
//   depthwise_dgrad_kernel, NHWC: a block = kThreads / lanes input pixels x lanes channel vectors of kVec
//     elements (16 bytes when M = 1, C % kVec == 0 and the pointers are aligned; else kVec = 1 and a thread
//     loops over its channel's M outputs); a warp's loads and stores are contiguous runs along C, and the
//     block's filter taps sit in shared memory as fp32 [tap][channel]. NCHW: one thread per input element,
//     consecutive threads along W.
//   depthwise_wgrad_rows_kernel (NHWC): a block = (output-row slice, channel block, chunk of kTaps taps); its
//     threads are lanes along the channels (vectors of kWgradVec, the vectors split evenly over the blocks)
//     x rows, each walking output rows (or column segments of them) along q with its tap pointers advanced by stride*C
//     and kTaps x kVec sums in registers; a fixed-shape tree in shared memory adds the rows, tap by tap.
//   depthwise_wgrad_tile_kernel (NHWC, multiplier 1, R <= 9, S of 3, 5 or 7; the rows kernel takes the rest):
//     a block walks output tiles (tp x tq pixels of one image, 64 channels), staging each tile's grad_out and
//     input halo once in shared memory (16-byte cp.async pieces, a thread's chunk fixed and its pixels stepped
//     without a division); a thread = (channel pair, filter row, tile-row phase) with a register
//     window of the row's S inputs along q (stride 1: one new load a pixel for S FMA pairs); the tile shape
//     from an instruction estimate, one wave of blocks (the occupancy calculator), each walking its tiles.
//   depthwise_wgrad_nchw_kernel: a block = (pixel slice, one channel, tap chunk); consecutive threads take
//     consecutive pixels, the same tree adds them.
//   depthwise_wgrad_reduce_kernel: 8 threads per (channel, tap) add the slices in a fixed interleave, then
//     the 8 sums in order.
// The slice count aims at ~4 blocks per SM (the tile kernel: the blocks an SM holds), so the bits depend on the
// problem and the device's SM count.
// nvcc -Xptxas -v (sm_90): dgrad 40-62 registers, wgrad tile 56-83, rows 82-120 (2 blocks an SM), nchw 47-48,
// reduce 32.
// measured (H200, 2026-12-02, batch 32, docs/perf.md): bf16 NHWC dgrad mbv2_dw3x3s2_144_56 0.0664 ms (0.78x
// cuDNN), wgrad mbv2_dw3x3_144_56 0.0474 ms (0.99x), mbv2_dw3x3_32_112 0.0579 (1.15x), cnxt 7x7 96@56 0.0900
// (0.93x), cnxt 7x7 768@7 0.0443 (0.48x); f32 NCHW wgrad cnxt 7x7 96@56 0.682 ms (0.96x, 2026-12-01).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <string>
#include <unordered_map>

#include "convkit/status.hpp"
#include "core/backward.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/epilogue.cuh"
#include "cuda/common/geometry.cuh"
#include "cuda/common/vec.cuh"

namespace convkit::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kTaps = 9;                // taps per weight-gradient pass (a 3x3 filter in one)
constexpr int kWgradVec = 4;            // channels per weight-gradient thread (NHWC, M = 1)
constexpr int64_t kSmemLimit = 48 * 1024;
constexpr int kTileC = 64;                // weight gradient, tile kernel: channels a block (32 pairs)
constexpr int kTileThreads = 32 * kTaps;  // 32 channel pairs x 9 groups (filter row, tile-row phase)
constexpr int64_t kTileSmem = 72 * 1024;  // the tile kernel's staged tiles (opted in above 48 KB)

// The tile kernel's output tile and staged input (tp x tq outputs of one image, ih x iw inputs).
struct WgTile {
  int tp = 0, tq = 0, ih = 0, iw = 0, tiles_p = 1, tiles_q = 1;
  int threads = 0;   // 32 x R x max(1, 9 / R)
  int64_t smem = 0;  // 0: the tile kernel does not apply
};

// The host's choice for one launch.
struct BwdPlan {
  int vec = 1;          // kVec
  int lanes = 1;        // channel vectors per block (1 in NCHW)
  bool smem_taps = false;
  int64_t smem = 0;     // dgrad: the taps in shared memory, bytes
  int64_t slices = 1, pix_per_slice = 0;  // wgrad
  int64_t cblocks = 1, tchunks = 1;       // wgrad
  int segs = 1;                           // wgrad, NHWC: column segments a row
  WgTile tile;                            // wgrad, NHWC, multiplier 1: the tile kernel's plan (smem > 0)
};

int elem_vec(DType t) { return t == DType::f32 ? 4 : 8; }

// decode_pixel's 64-bit case without a 64-bit division (a called routine, whose saved registers spill):
// the image from a double-precision estimate (inv_pq = 1 / (P*Q), from the host), corrected by one step
// either way: the image index is below 2^28, so the estimate is off by far less than one.
__device__ __forceinline__ PixelPos decode_pixel_wide(int64_t m, int64_t pq, double inv_pq, int Q) {
  PixelPos r;
  r.img = int64_t(double(m) * inv_pq);
  int64_t rest = m - r.img * pq;
  if (rest < 0) --r.img, rest += pq;
  if (rest >= pq) ++r.img, rest -= pq;
  r.p = int(rest) / Q;
  r.q = int(rest) - r.p * Q;
  return r;
}

// ---- data gradient ------------------------------------------------------------------------------------
template <typename T, int kVec, bool kNHWC>
__global__ void __launch_bounds__(kThreads)
    depthwise_dgrad_kernel(ConvDims d, int lanes, bool smem_taps, double inv_hw, const T* __restrict__ gz,
                           const T* __restrict__ wei, T* __restrict__ gx) {
  extern __shared__ float s_w[];  // NHWC with smem_taps: [R*S][lanes*kVec] (M == 1)
  const int RS = d.r * d.s, M = d.kg, tid = threadIdx.x;
  int64_t n;
  int h, w, c, lane = 0;
  if constexpr (kNHWC) {
    const int kb = lanes * kVec, c0 = blockIdx.y * kb;
    if (smem_taps) {
      for (int i = tid; i < RS * kb; i += blockDim.x) {
        const int cc = c0 + i % kb;
        s_w[i] = cc < d.c ? elem_to_float<T>(wei[int64_t(cc) * RS + i / kb]) : 0.0f;
      }
      __syncthreads();
    }
    lane = tid % lanes;
    const int rows = kThreads / lanes, row = tid / lanes;
    const int64_t pix = int64_t(blockIdx.x) * rows + row;
    c = c0 + lane * kVec;
    if (row >= rows || pix >= int64_t(d.n) * d.h * d.w || c >= d.c) return;
    const int64_t hw = int64_t(d.h) * d.w;
    const PixelPos pp = int64_t(d.n) * hw <= INT_MAX ? decode_pixel(pix, hw, d.w, true)
                                                      : decode_pixel_wide(pix, hw, inv_hw, d.w);
    n = pp.img, h = pp.p, w = pp.q;
  } else {
    // Block = (plane, run of kThreads pixels of it): every index fits 32 bits (a 64-bit division is a
    // called routine).
    const unsigned tiles = unsigned((d.h * d.w + kThreads - 1) / kThreads), plane = blockIdx.x / tiles;
    const int hw = int(blockIdx.x - plane * tiles) * kThreads + tid;
    if (hw >= d.h * d.w) return;
    h = hw / d.w, w = hw - h * d.w;
    n = plane / unsigned(d.c), c = int(plane - unsigned(n) * unsigned(d.c));
  }

  // The taps that land on (h, w). With dilation 1 along an axis they are r = (h + pad) mod stride and every
  // stride-th one after it, each one output row lower: one division per axis, none per tap, and no tap
  // visited in vain (a quarter of them at stride 2). Otherwise every tap, tested.
  const bool h_step = d.dil_h == 1, w_step = d.dil_w == 1;
  const int r_first = h_step ? (h + d.pad_h) % d.stride_h : 0, r_inc = h_step ? d.stride_h : 1;
  const int p_first = h_step ? (h + d.pad_h) / d.stride_h : 0;
  const int s_first = w_step ? (w + d.pad_w) % d.stride_w : 0, s_inc = w_step ? d.stride_w : 1;
  const int q_first = w_step ? (w + d.pad_w) / d.stride_w : 0;
  float acc[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) acc[e] = 0.0f;
  for (int r = r_first, pr = p_first; r < d.r; r += r_inc, --pr) {
    int p = pr;
    if (h_step) {
      if (p < 0) break;  // later taps only go further up
    } else {
      const int ph = h + d.pad_h - r * d.dil_h;
      if (ph < 0) break;
      p = d.stride_h == 1 ? ph : ph / d.stride_h;
      if (p * d.stride_h != ph) continue;
    }
    if (p >= d.p) continue;
    for (int s = s_first, qs = q_first; s < d.s; s += s_inc, --qs) {
      int q = qs;
      if (w_step) {
        if (q < 0) break;
      } else {
        const int qw = w + d.pad_w - s * d.dil_w;
        if (qw < 0) break;
        q = d.stride_w == 1 ? qw : qw / d.stride_w;
        if (q * d.stride_w != qw) continue;
      }
      if (q >= d.q) continue;
      const int rs = r * d.s + s;
      if constexpr (kNHWC && kVec > 1) {  // M == 1: channel c's one output is channel c
        float g[kVec];
        load_vec_f32<T, kVec>(gz + ((n * d.p + p) * d.q + q) * d.k + c, g);
        if (smem_taps) {
          const float* wp = s_w + rs * (lanes * kVec) + lane * kVec;
#pragma unroll
          for (int e = 0; e < kVec; e += 4) {
            const float4 w4 = *reinterpret_cast<const float4*>(wp + e);
            acc[e] = fmaf(g[e], w4.x, acc[e]), acc[e + 1] = fmaf(g[e + 1], w4.y, acc[e + 1]);
            acc[e + 2] = fmaf(g[e + 2], w4.z, acc[e + 2]), acc[e + 3] = fmaf(g[e + 3], w4.w, acc[e + 3]);
          }
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e)
            acc[e] = fmaf(g[e], elem_to_float<T>(wei[int64_t(c + e) * RS + rs]), acc[e]);
        }
      } else {
        for (int m = 0; m < M; ++m) {
          const int64_t k = int64_t(c) * M + m;
          const int64_t o = kNHWC ? ((n * d.p + p) * d.q + q) * d.k + k : ((n * d.k + k) * d.p + p) * d.q + q;
          acc[0] = fmaf(elem_to_float<T>(gz[o]), elem_to_float<T>(wei[k * RS + rs]), acc[0]);
        }
      }
    }
  }
  const int64_t o = kNHWC ? ((n * d.h + h) * d.w + w) * d.c + c : ((n * d.c + c) * d.h + h) * int64_t(d.w) + w;
  if constexpr (kVec == 1) {
    gx[o] = float_to_elem<T>(acc[0]);
  } else {
    Vec<T, kVec> out;
#pragma unroll
    for (int e = 0; e < kVec; ++e) out.v[e] = float_to_elem<T>(acc[e]);
    *reinterpret_cast<Vec<T, kVec>*>(gx + o) = out;
  }
}

// ---- weight gradient ----------------------------------------------------------------------------------
// NCHW: a block = (pixel slice, one channel, chunk of kTaps taps); its threads stride over the slice's pixels
// (consecutive threads along W), each accumulating kTaps sums in registers.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    depthwise_wgrad_nchw_kernel(ConvDims d, int64_t slices, int64_t pix_per_slice, double inv_pq,
                                const T* __restrict__ x, const T* __restrict__ gz, float* __restrict__ partial) {
  __shared__ float red[kThreads];
  const int RS = d.r * d.s, M = d.kg, row = threadIdx.x;
  const int64_t slice = blockIdx.x % slices;
  const int k = int(blockIdx.x / slices), t0 = blockIdx.y * kTaps;
  const int nt = min(kTaps, RS - t0);
  const int c = k / M;  // the block's output channel and its input channel

  // The chunk's taps as input offsets from the window origin (a tap past the chunk never matches: its
  // row offset is out of every image).
  int dh[kTaps], dw[kTaps];
#pragma unroll
  for (int j = 0; j < kTaps; ++j) {
    const int rs = t0 + j;
    dh[j] = j < nt ? (rs / d.s) * d.dil_h : INT_MAX / 2;
    dw[j] = j < nt ? (rs % d.s) * d.dil_w : 0;
  }
  float acc[kTaps];
#pragma unroll
  for (int j = 0; j < kTaps; ++j) acc[j] = 0.0f;

  const int64_t npq = int64_t(d.n) * d.p * d.q, pq = int64_t(d.p) * d.q;
  const int64_t m_end = min(npq, (slice + 1) * pix_per_slice);
  const bool fits32 = npq <= INT_MAX;
  for (int64_t m = slice * pix_per_slice + row; m < m_end; m += kThreads) {
    const PixelPos pp = fits32 ? decode_pixel(m, pq, d.q, true) : decode_pixel_wide(m, pq, inv_pq, d.q);
    const int h0 = pp.p * d.stride_h - d.pad_h, w0 = pp.q * d.stride_w - d.pad_w;
    const float g = elem_to_float<T>(gz[((pp.img * d.k + k) * d.p + pp.p) * d.q + pp.q]);
#pragma unroll
    for (int j = 0; j < kTaps; ++j) {
      const int h = h0 + dh[j], w = w0 + dw[j];
      if (h < 0 || h >= d.h || w < 0 || w >= d.w) continue;
      acc[j] = fmaf(g, elem_to_float<T>(x[((pp.img * d.c + c) * d.h + h) * int64_t(d.w) + w]), acc[j]);
    }
  }

  // The block's threads added tap by tap in a tree of fixed shape (thread i takes thread i + span), then
  // thread 0 writes the slice's partial sums.
  for (int j = 0; j < nt; ++j) {
#pragma unroll
    for (int jj = 0; jj < kTaps; ++jj)
      if (jj == j) red[row] = acc[jj];
    __syncthreads();
    for (int span = 1; span < kThreads; span *= 2) {
      if (row % (2 * span) == 0) red[row] += red[row + span];
      __syncthreads();
    }
    if (row == 0) partial[(slice * d.k + k) * RS + t0 + j] = red[0];
    __syncthreads();
  }
}

// NHWC: a thread walks whole output rows (img, p) of its slice, along q with its tap pointers advanced by
// stride*C: no per-pixel division; a tap whose input row is outside the image is dropped for the whole row,
// and the column test runs only outside [q_lo, q_hi], where every tap of the chunk is inside the image.
// NOTE: the per-pixel form above decoded (img, p, q) and rebuilt nine 64-bit tap addresses per pixel:
// ncu on mbv2_dw3x3_144_56 (bf16) showed 35% SM and 9% memory throughput, instruction-bound at 222 us.
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads, 2)  // 2 blocks an SM; 3 (<= 80 registers) spilled
    depthwise_wgrad_rows_kernel(ConvDims d, int lanes, int64_t slices, int64_t items_per_slice, int segs,
                                const T* __restrict__ x, const T* __restrict__ gz, float* __restrict__ partial) {
  __shared__ float red[kThreads * kVec];
  const int RS = d.r * d.s, M = d.kg, tid = threadIdx.x;
  const int kb = lanes * kVec, rows = kThreads / lanes, row = tid / lanes, lane = tid % lanes;
  const int64_t slice = blockIdx.x % slices;
  const int k0 = int(blockIdx.x / slices) * kb, t0 = blockIdx.y * kTaps;
  const int nt = min(kTaps, RS - t0);
  const int k = k0 + lane * kVec, c = k / M;
  const bool active = row < rows && k < d.k;

  // tap j: input row h0 + dh[j], column q*stride - pad + dw[j]; toff[j] its offset in the image from
  // (h0, -pad) (cuda_backward_supports keeps the filter's extent times W*C below 2^31)
  // (dh, dw) live in shared memory: read once a row and at the row's ends only, they would hold 18 registers
  // and so do the offsets (a broadcast read a tap: in registers they spilled at 3 blocks an SM)
  __shared__ int s_dh[kTaps], s_dw[kTaps], s_toff[kTaps];
  if (tid < kTaps) {
    const int rs = t0 + tid;
    s_dh[tid] = tid < nt ? (rs / d.s) * d.dil_h : 0;
    s_dw[tid] = tid < nt ? (rs % d.s) * d.dil_w : 0;
    s_toff[tid] = (s_dh[tid] * d.w + s_dw[tid]) * d.c;
  }
  __syncthreads();
  int dw_min = INT_MAX, dw_max = INT_MIN;
  for (int j = 0; j < nt; ++j) dw_min = min(dw_min, s_dw[j]), dw_max = max(dw_max, s_dw[j]);
  // q in [q_lo, q_hi]: every tap's column q*stride - pad + dw inside [0, W)
  const int q_lo = max(0, (d.pad_w - dw_min + d.stride_w - 1) / d.stride_w);
  const int hi_num = d.w - 1 + d.pad_w - dw_max;
  const int q_hi = hi_num < 0 ? -1 : min(d.q - 1, hi_num / d.stride_w);

  float acc[kTaps][kVec];
#pragma unroll
  for (int j = 0; j < kTaps; ++j)
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[j][e] = 0.0f;

  // work item = (output row rr, column segment): segs segments of seg_len columns a row
  const int64_t items = int64_t(d.n) * d.p * segs;
  const int64_t it_end = min(items, (slice + 1) * items_per_slice);
  const int seg_len = (d.q + segs - 1) / segs;
  const int64_t step_q = int64_t(d.stride_w) * d.c;
  if (active)
    for (int64_t it = slice * items_per_slice + row; it < it_end; it += rows) {
      const int64_t rr = it / segs;
      const int q_begin = int(it - rr * segs) * seg_len, q_end = min(d.q, q_begin + seg_len);
      const int64_t img = rr / d.p;
      const int p = int(rr - img * d.p), h0 = p * d.stride_h - d.pad_h;
      unsigned live = 0;  // taps whose input row is inside the image
#pragma unroll
      for (int j = 0; j < kTaps; ++j) {
        const int h = h0 + s_dh[j];
        if (j < nt && h >= 0 && h < d.h) live |= 1u << j;
      }
      if (live == 0) continue;
      // (h0, column -pad): outside the image when h0 < 0 or pad > 0, but only live taps are read from it
      const T* xr = x + ((img * d.h + h0) * d.w - d.pad_w) * d.c + c;
      const T* gp = gz + rr * d.q * d.k + k;
#pragma unroll 1
      for (int q = q_begin; q < q_end; ++q) {
        float g[kVec];
        load_vec_f32<T, kVec>(gp + int64_t(q) * d.k, g);
        const bool inside = q >= q_lo && q <= q_hi;
        const int64_t qo = q * step_q;
        const int wq = q * d.stride_w - d.pad_w;
#pragma unroll
        for (int j = 0; j < kTaps; ++j) {
          if (!((live >> j) & 1u)) continue;
          if (!inside && (wq + s_dw[j] < 0 || wq + s_dw[j] >= d.w)) continue;
          float xv[kVec];
          load_vec_f32<T, kVec>(xr + (qo + s_toff[j]), xv);
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[j][e] = fmaf(g[e], xv[e], acc[j][e]);
        }
      }
    }

  float* mine = red + (row * lanes + lane) * kVec;
  for (int j = 0; j < nt; ++j) {
    if (row < rows) {
#pragma unroll
      for (int jj = 0; jj < kTaps; ++jj)
        if (jj == j) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) mine[e] = acc[jj][e];
        }
    }
    __syncthreads();
    for (int span = 1; span < rows; span *= 2) {
      if (row < rows && row % (2 * span) == 0 && row + span < rows) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) mine[e] += mine[span * kb + e];
      }
      __syncthreads();
    }
    if (row == 0)
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        if (k + e < d.k) partial[(slice * d.k + k + e) * RS + t0 + j] = mine[e];
    __syncthreads();
  }
}

// NHWC, multiplier 1, R <= 9 and S = kS (3, 5 or 7): a block walks output tiles (tp x tq pixels of one image)
// of 64 channels, tile = blockIdx.x, += gridDim.x; for each it stages the tile's grad_out and the input it
// reaches (halo, zeros outside the image) once in shared memory in the tensor's dtype. A thread = (channel
// pair, group g of R x J, J = max(1, 9 / R)): filter row r = g % R over the tile rows g / R, + J, ..., with a
// window of the row's kS input values along q. Its kS x 2 sums stay in registers over all its tiles; at the
// end the J groups of each filter row add theirs in a fixed order: the block's slice partials.
// NOTE: with S a runtime bound (kS = 8 for S = 7, `if (sx == d.s - 1)` picking the window's new value) the
// window lived on the stack (24-64 bytes of local memory) and the kernel ran 1.1-1.7x slower than the rows
// kernel on the stride-1 layers (H200, 2026-12-02); S is exact here.
template <typename T, int kS>
__global__ void __launch_bounds__(kTileThreads)
    depthwise_wgrad_tile_kernel(ConvDims d, WgTile t, bool vec16, const T* __restrict__ x, const T* __restrict__ gz,
                                float* __restrict__ partial) {
  extern __shared__ __align__(16) unsigned char tile_smem[];
  constexpr int kE = int(16 / sizeof(T)), kChunks = kTileC / kE;
  T* s_g = reinterpret_cast<T*>(tile_smem);  // [tp * tq][64]
  T* s_x = s_g + t.tp * t.tq * kTileC;        // [ih * iw][64]
  const int tid = threadIdx.x, nthreads = blockDim.x, pair = tid % 32, slot = tid / 32, cl = 2 * pair;
  const int c0 = blockIdx.y * kTileC, R = d.r, J = nthreads / (32 * R);
  const bool slide = d.stride_w == 1 && d.dil_w == 1;
  const int64_t tiles = int64_t(d.n) * t.tiles_p * t.tiles_q;
  float acc[kS][2];  // the sums of (pair, filter row r, column s)
#pragma unroll
  for (int j = 0; j < kS; ++j) acc[j][0] = acc[j][1] = 0.0f;
  // Staging by cp.async (vec16): a thread's 16-byte chunk of the 64 channels is fixed (blockDim is a multiple
  // of kChunks) and its pixels advance by pstep with a carry, so no piece costs a division, and all of a
  // thread's pieces are in flight at once.
  const int ch = tid % kChunks, c = c0 + ch * kE, pstep = nthreads / kChunks, pix0 = tid / kChunks;
  const bool c_in_k = c < d.k, c_in_c = c < d.c;  // vec16: C % kE == 0, so a chunk is all in or all out
  const int gy0 = pix0 / t.tq, gx0 = pix0 - gy0 * t.tq, gdy = pstep / t.tq, gdx = pstep - gdy * t.tq;
  const int xy0 = pix0 / t.iw, xx0 = pix0 - xy0 * t.iw, xdy = pstep / t.iw, xdx = pstep - xdy * t.iw;

  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int tq_i = int(tile % t.tiles_q);
    const int tp_i = int((tile / t.tiles_q) % t.tiles_p);
    const int64_t n = tile / (int64_t(t.tiles_q) * t.tiles_p);
    const int p0 = tp_i * t.tp, q0 = tq_i * t.tq;
    const int h0 = p0 * d.stride_h - d.pad_h, w0 = q0 * d.stride_w - d.pad_w;
    __syncthreads();  // the previous tile's reads are done
    if (vec16) {  // 32-bit offsets inside one image (the plan's condition)
      const T* gz_n = gz + n * d.p * d.q * d.k;
      const T* x_n = x + n * d.h * d.w * d.c;
      for (int pix = pix0, y = gy0, xq = gx0; pix < t.tp * t.tq; pix += pstep) {
        const int p = p0 + y, q = q0 + xq;
        const bool ok = c_in_k && p < d.p && q < d.q;
        cp_async16_zfill(s_g + pix * kTileC + ch * kE, ok ? gz_n + ((p * d.q + q) * d.k + c) : gz, ok);
        xq += gdx, y += gdy;
        if (xq >= t.tq) xq -= t.tq, ++y;
      }
      for (int pix = pix0, y = xy0, xw = xx0; pix < t.ih * t.iw; pix += pstep) {
        const int h = h0 + y, w = w0 + xw;
        const bool ok = c_in_c && h >= 0 && h < d.h && w >= 0 && w < d.w;
        cp_async16_zfill(s_x + pix * kTileC + ch * kE, ok ? x_n + ((h * d.w + w) * d.c + c) : x, ok);
        xw += xdx, y += xdy;
        if (xw >= t.iw) xw -= t.iw, ++y;
      }
      cp_async_commit();
      cp_async_wait<0>();
    } else {  // a pointer or C off the 16-byte vector: element by element, consecutive threads along C
      const T zero = float_to_elem<T>(0.0f);
      for (int u = tid; u < t.tp * t.tq * kTileC; u += nthreads) {
        const int cc = u % kTileC, pix = u / kTileC, py = pix / t.tq, p = p0 + py, q = q0 + pix - py * t.tq;
        const int k = c0 + cc;
        s_g[pix * kTileC + cc] = p < d.p && q < d.q && k < d.k ? gz[((n * d.p + p) * d.q + q) * d.k + k] : zero;
      }
      for (int u = tid; u < t.ih * t.iw * kTileC; u += nthreads) {
        const int cc = u % kTileC, pix = u / kTileC, y = pix / t.iw, h = h0 + y, w = w0 + pix - y * t.iw;
        const int k = c0 + cc;
        s_x[pix * kTileC + cc] =
            h >= 0 && h < d.h && w >= 0 && w < d.w && k < d.c ? x[((n * d.h + h) * d.w + w) * d.c + k] : zero;
      }
    }
    __syncthreads();
    // group g = slot: filter row r = g % R, tile rows py = g / R, + J, ...; along q a window of the row's kS
    // input values: at stride 1 and dilation 1 the next pixel reuses kS - 1 of them (one new load).
    const int r = slot % R, tp_eff = min(t.tp, d.p - p0), tq_eff = min(t.tq, d.q - q0);
    for (int py = slot / R; py < tp_eff; py += J) {
      const T* gp = s_g + py * t.tq * kTileC + cl;
      const T* xp = s_x + (py * d.stride_h + r * d.dil_h) * t.iw * kTileC + cl;
      if (slide) {
        float xw[kS][2];
#pragma unroll
        for (int sx = 0; sx < kS - 1; ++sx) load_vec_f32<T, 2>(xp + sx * kTileC, xw[sx]);
        for (int qx = 0; qx < tq_eff; ++qx) {
          float g2[2];
          load_vec_f32<T, 2>(gp + qx * kTileC, g2);
          load_vec_f32<T, 2>(xp + (qx + kS - 1) * kTileC, xw[kS - 1]);
#pragma unroll
          for (int sx = 0; sx < kS; ++sx) {
            acc[sx][0] = fmaf(g2[0], xw[sx][0], acc[sx][0]);
            acc[sx][1] = fmaf(g2[1], xw[sx][1], acc[sx][1]);
          }
#pragma unroll
          for (int sx = 0; sx < kS - 1; ++sx) xw[sx][0] = xw[sx + 1][0], xw[sx][1] = xw[sx + 1][1];
        }
      } else {
        const int xstep = d.stride_w * kTileC, dstep = d.dil_w * kTileC;
        for (int qx = 0; qx < tq_eff; ++qx) {
          float g2[2];
          load_vec_f32<T, 2>(gp + qx * kTileC, g2);
#pragma unroll
          for (int sx = 0; sx < kS; ++sx) {
            float x2[2];
            load_vec_f32<T, 2>(xp + qx * xstep + sx * dstep, x2);
            acc[sx][0] = fmaf(g2[0], x2[0], acc[sx][0]);
            acc[sx][1] = fmaf(g2[1], x2[1], acc[sx][1]);
          }
        }
      }
    }
  }
  // The J groups of each filter row add their sums in group order (fixed), then write the slice's partials.
  __syncthreads();
  float* s_red = reinterpret_cast<float*>(tile_smem);  // [slot][kS][64] fp32, over the staged tiles
#pragma unroll
  for (int sx = 0; sx < kS; ++sx) {
    s_red[(slot * kS + sx) * kTileC + cl] = acc[sx][0];
    s_red[(slot * kS + sx) * kTileC + cl + 1] = acc[sx][1];
  }
  __syncthreads();
  for (int i = tid; i < R * kS * kTileC; i += nthreads) {
    const int c = i % kTileC, rs = i / kTileC, r = rs / kS, k = c0 + c;
    float v = 0.0f;
    for (int j = 0; j < J; ++j) v += s_red[((j * R + r) * kS + rs - r * kS) * kTileC + c];
    if (k < d.k) partial[(int64_t(blockIdx.x) * d.k + k) * (R * kS) + rs] = v;
  }
}

// gw[k, tap] = the slices' partial sums added in a fixed order, rounded once: a block = 32 consecutive
// (k, tap) x 8 threads each, thread g adding slices g, g + 8, ... in order, then the 8 sums in order.
// NOTE: one thread per (k, tap) walking every slice serially ran 6 blocks for 1296 outputs: 31 us (ncu).
template <typename T>
__global__ void __launch_bounds__(256)
    depthwise_wgrad_reduce_kernel(int64_t krs, int64_t slices, const float* __restrict__ partial,
                                  T* __restrict__ gw) {
  __shared__ float red[8][33];
  const int lane = threadIdx.x % 32, g = threadIdx.x / 32;
  const int64_t i = int64_t(blockIdx.x) * 32 + lane;
  float acc = 0.0f;
  if (i < krs)
    for (int64_t s = g; s < slices; s += 8) acc += partial[s * krs + i];
  red[g][lane] = acc;
  __syncthreads();
  if (g == 0 && i < krs) {
    float t = red[0][lane];
#pragma unroll
    for (int j = 1; j < 8; ++j) t += red[j][lane];
    gw[i] = float_to_elem<T>(t);
  }
}

// ---- host side -----------------------------------------------------------------------------------------
BwdPlan plan_dgrad(const Conv2dProblem& pb, const ConvConfig& cfg, bool vec_ok) {
  BwdPlan t;
  if (cfg.layout == Layout::nchw) return t;
  const int v = elem_vec(cfg.dtype);
  t.vec = vec_ok && pb.k_per_group() == 1 && pb.c % v == 0 ? v : 1;
  t.lanes = int(std::min<int64_t>(32, (pb.c + t.vec - 1) / t.vec));
  if (t.vec > 1) {
    int64_t lanes = t.lanes;
    while (lanes > 1 && pb.r * pb.s * lanes * t.vec * 4 > kSmemLimit) lanes /= 2;
    t.lanes = int(lanes);
    t.smem = pb.r * pb.s * lanes * t.vec * 4;
    t.smem_taps = t.smem <= kSmemLimit;
    if (!t.smem_taps) t.smem = 0;
  }
  return t;
}

// The tile kernel for S (3, 5 or 7), and how many of its blocks an SM holds at this block size and staging.
template <typename T>
auto tile_kernel(int s) {
  return s == 3 ? depthwise_wgrad_tile_kernel<T, 3> : s == 5 ? depthwise_wgrad_tile_kernel<T, 5>
                                                             : depthwise_wgrad_tile_kernel<T, 7>;
}

int tile_blocks_per_sm(DType dt, int s, int threads, int64_t smem) {
  const void* k = dt == DType::f32   ? reinterpret_cast<const void*>(tile_kernel<float>(s))
                  : dt == DType::f16 ? reinterpret_cast<const void*>(tile_kernel<__half>(s))
                                     : reinterpret_cast<const void*>(tile_kernel<__nv_bfloat16>(s));
  if (smem > 48 * 1024) opt_in_dynamic_smem(k, kTileSmem);
  return blocks_per_sm(k, threads, smem);
}

BwdPlan choose_wgrad(const Conv2dProblem& pb, const ConvConfig& cfg, bool vec_ok) {
  BwdPlan t;
  const bool nhwc = cfg.layout == Layout::nhwc;
  if (nhwc) {
    // NOTE: 4 channels a thread in every dtype (8-byte loads of 16-bit tensors): with 8, the 72 sums took
    // 128 registers and spilled. Lanes split the channel vectors evenly over the fewest blocks of <= 32
    // lanes (K = 144: 2 blocks of 18, not 32 + 4 whose 28 idle lanes walked the rows all the same).
    t.vec = vec_ok && pb.k_per_group() == 1 && pb.k % kWgradVec == 0 ? kWgradVec : 1;
    const int64_t vectors = (pb.k + t.vec - 1) / t.vec;
    const int64_t blocks = (vectors + 31) / 32;
    t.lanes = int((vectors + blocks - 1) / blocks);
  }
  // (one image's input and grad_out under 2^31 elements: the tile kernel's staging offsets are 32-bit)
  if (nhwc && pb.k_per_group() == 1 && pb.r <= kTaps && (pb.s == 3 || pb.s == 5 || pb.s == 7) &&
      pb.h * pb.w * pb.c < INT_MAX && pb.p() * pb.q() * pb.k < INT_MAX) {
    // The tile kernel. Tile shape: the (tp, tq) whose staged tiles fit 72 KB and whose estimated time is
    // least: the tiles a block walks (one wave of the blocks an SM holds at that staging size) times the
    // per-thread instructions of a tile: staging ~6 a 16-byte chunk (the halo makes small tiles dear), the
    // row walks ceil(tp / J) rows a thread of (S - 1) x 4 to start the window and ~(6 + 3S) a pixel step
    // (4 + 4S off stride 1), ~200 a tile. Slices: that wave, by the occupancy calculator.
    WgTile& w = t.tile;
    const int64_t es = dtype_size(cfg.dtype), J = std::max<int64_t>(1, kTaps / pb.r);
    w.threads = int(32 * pb.r * J);
    auto rows_in = [&](int64_t tp) { return (tp - 1) * pb.stride_h + (pb.r - 1) * pb.dilation_h + 1; };
    auto cols_in = [&](int64_t tq) { return (tq - 1) * pb.stride_w + (pb.s - 1) * pb.dilation_w + 1; };
    const bool slide = pb.stride_w == 1 && pb.dilation_w == 1;
    const double step = slide ? 6.0 + 3.0 * pb.s : 4.0 + 4.0 * pb.s;
    const int64_t sms = sm_count_of_current_device(), cblocks = (pb.k + kTileC - 1) / kTileC;
    const int64_t sm_smem = smem_per_sm_of_current_device();
    double best = 0.0;
    for (int64_t tq = 1; tq <= std::min<int64_t>(pb.q(), 64); ++tq)
      for (int64_t tp = 1; tp <= std::min<int64_t>(pb.p(), 64); ++tp) {
        const int64_t staged = tp * tq + rows_in(tp) * cols_in(tq), bytes = staged * kTileC * es;
        if (bytes > kTileSmem) break;
        const int64_t tiles = pb.n * ((pb.p() + tp - 1) / tp) * ((pb.q() + tq - 1) / tq);
        // blocks an SM holds: shared memory (1 KB reserved a block), threads, ~56 registers a thread
        const int64_t per_sm = std::max<int64_t>(
            1, std::min({sm_smem / (bytes + 1024), int64_t(2048 / w.threads), int64_t(65536 / (w.threads * 56))}));
        const int64_t slots = std::max<int64_t>(1, per_sm * sms / cblocks);
        const double tile = 6.0 * double(staged * (kTileC * es / 16)) / w.threads +
                            double((tp + J - 1) / J) * (4.0 * (pb.s - 1) + step * double(tq)) + 200.0;
        const double cost = double((tiles + slots - 1) / slots) * tile;
        if (best == 0.0 || cost < best) best = cost, w.tp = int(tp), w.tq = int(tq);
      }
    if (w.tp >= 1) {
      w.ih = int(rows_in(w.tp));
      w.iw = int(cols_in(w.tq));
      // the closing reduction reuses the staging area: [R x J groups][S][64] fp32
      w.smem = std::max<int64_t>((int64_t(w.tp) * w.tq + int64_t(w.ih) * w.iw) * kTileC * es,
                                 int64_t(w.threads / 32) * pb.s * kTileC * 4);
      w.tiles_p = int((pb.p() + w.tp - 1) / w.tp);
      w.tiles_q = int((pb.q() + w.tq - 1) / w.tq);
      const int64_t tiles = pb.n * w.tiles_p * w.tiles_q;
      const int64_t resident = int64_t(tile_blocks_per_sm(cfg.dtype, int(pb.s), w.threads, w.smem)) * sms;
      t.cblocks = cblocks;
      t.slices = std::max<int64_t>(1, std::min<int64_t>(tiles, resident / cblocks));
      t.vec = int(16 / es);
      return t;
    }
    w = WgTile{};
  }
  const int64_t kb = int64_t(t.lanes) * t.vec, rows = kThreads / t.lanes;
  t.cblocks = (pb.k + kb - 1) / kb;
  t.tchunks = (pb.r * pb.s + kTaps - 1) / kTaps;
  const int64_t per_slice_blocks = t.cblocks * t.tchunks;
  const int64_t want = std::max<int64_t>(1, (4 * int64_t(sm_count_of_current_device()) + per_slice_blocks - 1) /
                                                per_slice_blocks);
  // NHWC slices hold (output row, column segment) items, at least one a thread: rows are cut into segments
  // of at least 8 columns until there are enough items for `want` slices (C = 32 at 112x112 had 112 blocks
  // of whole rows on 132 SMs). NCHW slices hold pixels, at least 8 a thread.
  if (nhwc) {
    const int64_t np = pb.n * pb.p(), need = want * rows;
    t.segs = int(std::clamp<int64_t>((need + np - 1) / np, 1, std::max<int64_t>(1, pb.q() / 8)));
  }
  const int64_t items = nhwc ? pb.n * pb.p() * t.segs : pb.n * pb.p() * pb.q();
  const int64_t most = std::max<int64_t>(1, items / ((nhwc ? 1 : 8) * rows));
  t.slices = std::min(want, most);
  t.pix_per_slice = std::max<int64_t>(1, (items + t.slices - 1) / t.slices);
  t.slices = std::max<int64_t>(1, (items + t.pix_per_slice - 1) / t.pix_per_slice);
  return t;
}

// choose_wgrad's answer, remembered per device and request: the tile search and the occupancy query cost
// tens of microseconds of host time, and one weight gradient asks for its plan several times (workspace,
// launch, dispatch log). Bounded: cleared past 4096 entries.
BwdPlan plan_wgrad(const Conv2dProblem& pb, const ConvConfig& cfg, bool vec_ok) {
  int dev = 0;
  CK_CUDA(cudaGetDevice(&dev));
  const std::string key = pb.to_string() + '|' + to_string(cfg.dtype) + '|' + to_string(cfg.layout) +
                          (vec_ok ? "|v|" : "|s|") + std::to_string(dev);
  static std::mutex mu;
  static std::unordered_map<std::string, BwdPlan> memo;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
  }
  const BwdPlan t = choose_wgrad(pb, cfg, vec_ok);
  std::lock_guard<std::mutex> lock(mu);
  if (memo.size() >= 4096) memo.clear();
  memo.emplace(key, t);
  return t;
}

template <typename T>
void dgrad(const Conv2dProblem& pb, const ConvConfig& cfg, const T* gz, const T* wei, T* gx, cudaStream_t st) {
  const ConvDims d = make_dims(pb);
  const BwdPlan t = plan_dgrad(pb, cfg, aligned16(gz) && aligned16(gx));
  constexpr int kV = int(16 / sizeof(T));
  if (cfg.layout == Layout::nchw) {
    const int64_t blocks = pb.n * pb.c * ((pb.h * pb.w + kThreads - 1) / kThreads);
    depthwise_dgrad_kernel<T, 1, false><<<unsigned(blocks), kThreads, 0, st>>>(d, 1, false, 0.0, gz, wei, gx);
  } else {
    const int64_t rows = kThreads / t.lanes, pixels = pb.n * pb.h * pb.w;
    const double inv_hw = 1.0 / double(pb.h * pb.w);
    const dim3 grid(unsigned((pixels + rows - 1) / rows), unsigned((pb.c + t.lanes * t.vec - 1) / (t.lanes * t.vec)));
    if (t.vec > 1)
      depthwise_dgrad_kernel<T, kV, true><<<grid, kThreads, t.smem, st>>>(d, t.lanes, t.smem_taps, inv_hw, gz, wei, gx);
    else
      depthwise_dgrad_kernel<T, 1, true><<<grid, kThreads, 0, st>>>(d, t.lanes, false, inv_hw, gz, wei, gx);
  }
  CK_LAUNCH("depthwise_dgrad_kernel");
}

template <typename T>
void wgrad(const Conv2dProblem& pb, const ConvConfig& cfg, const T* x, const T* gz, T* gw, float* partial,
           cudaStream_t st) {
  const ConvDims d = make_dims(pb);
  const BwdPlan t = plan_wgrad(pb, cfg, aligned16(x) && aligned16(gz));
  constexpr int kV = kWgradVec;
  const dim3 grid(unsigned(t.slices * t.cblocks), unsigned(t.tchunks));
  const double inv_pq = 1.0 / double(pb.p() * pb.q());
  if (cfg.layout == Layout::nchw) {
    depthwise_wgrad_nchw_kernel<T><<<grid, kThreads, 0, st>>>(d, t.slices, t.pix_per_slice, inv_pq, x, gz, partial);
    CK_LAUNCH("depthwise_wgrad_nchw_kernel");
  } else if (t.tile.smem > 0) {
    const bool vec16 = aligned16(x) && aligned16(gz) && pb.c % (16 / int64_t(sizeof(T))) == 0;
    const dim3 tgrid(unsigned(t.slices), unsigned(t.cblocks));
    auto kernel = tile_kernel<T>(int(pb.s));
    if (t.tile.smem > 48 * 1024) opt_in_dynamic_smem(reinterpret_cast<const void*>(kernel), kTileSmem);
    kernel<<<tgrid, unsigned(t.tile.threads), t.tile.smem, st>>>(d, t.tile, vec16, x, gz, partial);
    CK_LAUNCH("depthwise_wgrad_tile_kernel");
  } else {
    if (t.vec > 1)
      depthwise_wgrad_rows_kernel<T, kV><<<grid, kThreads, 0, st>>>(d, t.lanes, t.slices, t.pix_per_slice, t.segs, x, gz,
                                                                     partial);
    else
      depthwise_wgrad_rows_kernel<T, 1><<<grid, kThreads, 0, st>>>(d, t.lanes, t.slices, t.pix_per_slice, t.segs, x, gz,
                                                                    partial);
    CK_LAUNCH("depthwise_wgrad_rows_kernel");
  }
  const int64_t krs = pb.k * pb.r * pb.s;
  depthwise_wgrad_reduce_kernel<T><<<unsigned((krs + 31) / 32), 256, 0, st>>>(krs, t.slices, partial, gw);
  CK_LAUNCH("depthwise_wgrad_reduce_kernel");
}

}  // namespace

Support cuda_backward_supports(const Conv2dProblem& pb, const ConvConfig& cfg) {
  if (!cuda_present()) return Support::no("no CUDA device is present on this machine.");
  if (pb.groups != pb.c || pb.c_per_group() != 1)
    return Support::no("the CUDA gradient kernels compute depthwise convolutions only (groups = C).");
  if (cfg.dtype == DType::f32 && cfg.math == MathMode::tf32)
    return Support::no("the CUDA gradient kernels compute in strict fp32.");
  if (Support s = dims_fit_int(pb); !s) return s;
  // The largest grid.x: NCHW's (plane, pixel run) blocks, or NHWC's pixel blocks of the scalar plan (the
  // fewest pixels a block).
  const int64_t rows = kThreads / std::min<int64_t>(32, pb.c);
  const int64_t blocks = std::max(pb.n * pb.c * ((pb.h * pb.w + kThreads - 1) / kThreads),
                                  (pb.n * pb.h * pb.w + rows - 1) / rows);
  if (blocks >= INT_MAX || pb.k * pb.r * pb.s >= INT_MAX)
    return Support::no("the problem needs more than 2^31 blocks or filter elements.");
  if ((pb.r * pb.s + kTaps - 1) / kTaps > 65535) return Support::no("the filter has more than 589815 taps.");
  if ((((pb.r - 1) * pb.dilation_h + 1) * pb.w + (pb.s - 1) * pb.dilation_w + 1) * pb.c >= INT_MAX)
    return Support::no("the dilated filter's extent times W*C reaches 2^31 elements (32-bit tap offsets).");
  if ((pb.c + 31) / 32 > 65535) return Support::no("more than 65535 blocks of 32 channels (grid.y).");
  return Support::yes();
}

std::string cuda_backward_kernel_name(const Conv2dProblem& pb, const ConvConfig& cfg, bool weight) {
  const BwdPlan t = weight ? plan_wgrad(pb, cfg, true) : plan_dgrad(pb, cfg, true);
  std::string s = weight ? std::string(cfg.layout == Layout::nchw ? "depthwise_wgrad_nchw_kernel"
                                       : t.tile.smem > 0           ? "depthwise_wgrad_tile_kernel"
                                                                   : "depthwise_wgrad_rows_kernel") +
                               " + depthwise_wgrad_reduce_kernel"
                         : std::string("depthwise_dgrad_kernel");
  s += std::string(" (") + to_string(cfg.layout) + ", " + std::to_string(t.vec) + "-element vectors";
  if (weight) s += ", " + std::to_string(t.slices) + (cfg.layout == Layout::nhwc ? " row" : " pixel") + " slices";
  return s + "; 1-element vectors where a pointer is misaligned)";
}

void cuda_depthwise_backward_data(const Conv2dProblem& pb, const ConvConfig& cfg, const void* gz, const void* wei,
                                  void* gx, void* stream) {
  cudaStream_t st = as_stream(stream);
  switch (cfg.dtype) {
    case DType::f32: return dgrad<float>(pb, cfg, static_cast<const float*>(gz), static_cast<const float*>(wei),
                                          static_cast<float*>(gx), st);
    case DType::f16: return dgrad<__half>(pb, cfg, static_cast<const __half*>(gz), static_cast<const __half*>(wei),
                                           static_cast<__half*>(gx), st);
    case DType::bf16:
      return dgrad<__nv_bfloat16>(pb, cfg, static_cast<const __nv_bfloat16*>(gz),
                                  static_cast<const __nv_bfloat16*>(wei), static_cast<__nv_bfloat16*>(gx), st);
  }
}

size_t cuda_depthwise_backward_weight_workspace(const Conv2dProblem& pb, const ConvConfig& cfg) {
  const BwdPlan t = plan_wgrad(pb, cfg, true);
  // The vector plan's slice count bounds the scalar one's (same rows or more per block, same pixels).
  const BwdPlan s = plan_wgrad(pb, cfg, false);
  return size_t(std::max(t.slices, s.slices) * pb.k * pb.r * pb.s) * sizeof(float);
}

void cuda_depthwise_backward_weight(const Conv2dProblem& pb, const ConvConfig& cfg, const void* x, const void* gz,
                                    void* gw, void* workspace, void* stream) {
  cudaStream_t st = as_stream(stream);
  auto* partial = static_cast<float*>(workspace);
  switch (cfg.dtype) {
    case DType::f32: return wgrad<float>(pb, cfg, static_cast<const float*>(x), static_cast<const float*>(gz),
                                          static_cast<float*>(gw), partial, st);
    case DType::f16: return wgrad<__half>(pb, cfg, static_cast<const __half*>(x), static_cast<const __half*>(gz),
                                           static_cast<__half*>(gw), partial, st);
    case DType::bf16:
      return wgrad<__nv_bfloat16>(pb, cfg, static_cast<const __nv_bfloat16*>(x),
                                  static_cast<const __nv_bfloat16*>(gz), static_cast<__nv_bfloat16*>(gw), partial, st);
  }
}

}  // namespace convkit::detail
