// cuda_depthwise's tensor-core kernel: NHWC depthwise (M = 1) in f16/bf16 on mma.sync m16n8k16, two filter
// taps a multiply, fp32 accumulators.
//
// Adds over the rows kernel (depthwise_rows.cuh): that one is bound by instruction issue (ncu: 0.70 warps
// issued a scheduler a cycle, DRAM 27% of peak), since every output takes R*S FFMAs plus the unpacking of
// its 16-bit inputs, their shared-memory loads and their addressing. Here one mma does the work of 256 such
// FMAs. The reduction axis k of a multiply is two taps x 8 channels: A[m][k] is the input pixel of output m
// under tap 2j + k / 8, channel k % 8 (ldmatrix gathers the 16 rows of each tap from the staged tile, any
// stride and dilation), and B[k][n] is that tap's weight of channel n where k % 8 = n, zero elsewhere (a
// block-diagonal B: 16 of its 128 entries are non-zero, which costs tensor-core cycles the layer has to
// spare and no instructions). The 16-bit inputs go to the multiplier as they are: no unpacking.
//
// Work mapping: a block = one image x a column of `steps` tp x tq output tiles down the image x a chunk of ncb
// channel blocks of 8, the next tile's cp.async in flight while this one's multiplies run (two buffers); warp = channel block
// cb (fastest) x pixel group mg of wm; the tile's tp*tq output pixels, row-major, are cut into m-tiles of
// 16 and warp mg takes m-tiles mg, mg + wm, ... (at most kMmaTiles). A warp's 16 x 8 accumulator tile holds
// 16 pixels x 8 channels; lane l stores channels 2*(l%4), +1 of pixels l/4 and l/4 + 8.
// Shared memory: two buffers of the input tile with its halo, [ncb][pitch][8] in T (one 16-byte row a pixel, so ldmatrix's
// 8 rows of consecutive pixels fall in 8 different bank groups), brought in by 16-byte cp.async with zero
// fill outside the image; pitch = ih*iw rounded up to 8, plus 8 / ncb, so the 8 pieces one cp.async
// wavefront writes (ncb channel blocks x 8 / ncb pixels) also land in different bank groups.
// Square filters of kK = 3, 5 or 7, any stride, dilation and padding that fit the shared-memory budget;
// C a multiple of 8; one image's input and output under 2^31 elements (32-bit offsets inside an image).
// nvcc -Xptxas -v (sm_90): 104 (3x3), 122 (5x5), 157 (7x7) registers, no spills.
// measured (H200, 2026-12-03, bf16 NHWC batch 32, mma/128/s4): mbv2_dw3x3_144_56 0.0497 ms (the rows kernel
// 0.0378, cuDNN 0.0356), effb0_dw5x5_240_28 0.0354 (0.0339, 0.0321); 3x3 144@56 stride 3 0.0294 (the general
// kernel 0.0626, cuDNN 0.100); 25% occupancy by registers, latency-bound (ncu: 0.59 warps issued a scheduler
// a cycle, DRAM 13% of peak).
#pragma once

#include "cuda/common/launch.cuh"
#include "cuda/tc/mma_sync.cuh"

namespace convkit::detail {
namespace {

constexpr int kMmaTiles = 4;  // m-tiles of 16 output pixels a warp at most (its accumulators: 16 fp32)

// The tile of one launch, chosen on the host (plan_mma in depthwise.cu).
struct DwMma {
  int ncb = 1, wm = 1;  // channel blocks of 8 a block; warps along the pixels per channel block
  int tp = 1, tq = 1;   // output tile
  int ih = 1, iw = 1;   // staged input tile (halo included)
  int pitch = 8;        // staged pixels a channel block (ih * iw, padded)
  int mtiles = 1;       // m-tiles of the output tile: ceil(tp * tq / 16)
  int tiles_p = 1, tiles_q = 1, chunks = 1;  // chunks: of ncb * 8 channels
  int steps = 1, walks = 1;                   // tiles a block walks down the image; walks = ceil(tiles_p / steps)
  int64_t smem = 0;
  int threads = 0;
};

template <typename T, int kK>
__global__ void __launch_bounds__(256) depthwise_nhwc_mma_kernel(ConvDims d, DwMma t, const T* __restrict__ src,
                                                                const T* __restrict__ wei, T* dst, DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
  constexpr int kTaps = kK * kK, kPairs = (kTaps + 1) / 2;
  extern __shared__ float4 smem4[];
  T* s_in = reinterpret_cast<T*>(smem4);  // [2][ncb][pitch][8]
  const int buf_elems = t.ncb * t.pitch * 8;
  // Block b = ((n * walks + walk) * tiles_q + tile column) * chunks + channel chunk: the chunks of one tile
  // run side by side, so the pieces of one pixel's channels are read from DRAM at about the same time.
  int64_t b = blockIdx.x;
  const int chunk = int(b % t.chunks);
  b /= t.chunks;
  const int tq_i = int(b % t.tiles_q);
  b /= t.tiles_q;
  const int walk = int(b % t.walks);
  const int64_t n = b / t.walks;
  const int q0 = tq_i * t.tq, c0 = chunk * t.ncb * 8;
  const int tile0 = walk * t.steps, nsteps = min(t.steps, t.tiles_p - tile0);
  const int w0 = q0 * d.stride_w - d.pad_w;
  const int tid = threadIdx.x;
  const T* src_n = src + n * d.h * d.w * d.c;

  // Tile `step` of the walk into buffer step % 2, as one cp.async group: piece i = (pixel i / ncb, channel
  // block i % ncb), so neighbouring threads read neighbouring 16-byte pieces of one pixel. The threads are a
  // multiple of ncb, so a thread's channel block is fixed and its pixels step by threads / ncb: (y, x)
  // advance by (dy, dx) with a carry, no division per piece.
  const int l_cb = tid % t.ncb, pstep = int(blockDim.x) / t.ncb, u0 = tid / t.ncb;
  const int y0 = u0 / t.iw, x0 = u0 - y0 * t.iw, dy = pstep / t.iw, dx = pstep - dy * t.iw;
  const int l_c = c0 + l_cb * 8;
  const bool c_ok = l_c < d.c;
  auto issue_tile = [&](int step) {
    const int h0 = (tile0 + step) * t.tp * d.stride_h - d.pad_h;
    T* buf = s_in + (step & 1) * buf_elems + l_cb * t.pitch * 8;
    for (int y = y0, x = x0; y < t.ih;) {
      const int h = h0 + y, w = w0 + x;
      const bool ok = c_ok && h >= 0 && h < d.h && w >= 0 && w < d.w;
      cp_async16_zfill(buf + (y * t.iw + x) * 8, ok ? src_n + (h * d.w + w) * d.c + l_c : src, ok);
      x += dx, y += dy;
      if (x >= t.iw) x -= t.iw, ++y;
    }
    cp_async_commit();
  };
  issue_tile(0);

  const int warp = tid / 32, lane = tid % 32, cb = warp % t.ncb, mg = warp / t.ncb;
  const int c = c0 + cb * 8;
  const bool live = c < d.c && mg < t.wm;
  // B of pair j while the tile is in flight: lane l holds B[k][n = l/4] for k = 2*(l%4) + {0, 1} (b[0], tap
  // 2j) and 8 + the same (b[1], tap 2j + 1); the entry is that tap's weight where k % 8 == n, which is
  // the lanes with l/8 == l%4, in the low half for even n and the high half for odd n.
  uint32_t bf[kPairs][2];
  {
    const int nch = lane >> 2;
    const bool diag = live && (lane >> 3) == (lane & 3);
    const uint16_t* wp = reinterpret_cast<const uint16_t*>(wei) + int64_t(c + nch) * kTaps;
#pragma unroll
    for (int j = 0; j < kPairs; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int tap = 2 * j + h;
        const uint32_t bits = diag && tap < kTaps ? uint32_t(wp[tap]) : 0u;
        bf[j][h] = nch & 1 ? bits << 16 : bits;
      }
  }
  // The lane's ldmatrix row: pixel m = l%8 + 8 * ((l/8) % 2) of each m-tile, under tap 2j + l/16; and the
  // pixels it stores: l/4 and l/4 + 8 of each m-tile, channels kc, kc + 1. Both the same for every tile.
  const int m_lane = (lane & 7) + ((lane >> 3) & 1) * 8, hi_tap = lane >> 4;
  const int npix_out = t.tp * t.tq;
  const int g = lane >> 2, kc = c + 2 * (lane & 3);
  // oy_of: (output row << 16) | output column within the tile of each stored pixel (tq < 2^16)
  int base[kMmaTiles], oy_of[kMmaTiles][2];
  int my_tiles = 0;
#pragma unroll
  for (int i = 0; i < kMmaTiles; ++i) {
    const int mt = mg + i * t.wm;
    if (mt < t.mtiles) my_tiles = i + 1;
    int po = mt * 16 + m_lane;
    if (po >= npix_out) po = 0;  // past the tile: any staged pixel, its result is not stored
    const int oy = po / t.tq, ox = po - oy * t.tq;
    base[i] = oy * d.stride_h * t.iw + ox * d.stride_w;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int pst = mt * 16 + g + hh * 8;
      const int oy = pst / t.tq;
      oy_of[i][hh] = pst < npix_out ? (oy << 16) | (pst - oy * t.tq) : INT_MAX;  // past the tile: never stored
    }
  }
  const int row_step = d.dil_h * t.iw, col_step = d.dil_w;
  const uint32_t s_cb = uint32_t(__cvta_generic_to_shared(s_in)) + uint32_t(cb * t.pitch) * 16u;
  float bias[2] = {0.0f, 0.0f};
  if (epi.bias && live) bias[0] = elem_to_float<T>(epi.bias[kc]), bias[1] = elem_to_float<T>(epi.bias[kc + 1]);
  T* dst_n = dst + n * d.p * d.q * d.k;
  const T* res_n = epi.residual ? epi.residual + n * d.p * d.q * d.k : nullptr;

  for (int step = 0; step < nsteps; ++step) {
    // The next tile into the other buffer (everyone finished reading it at the barrier that ended the
    // previous step); an empty group past the last, so the wait below stays uniform.
    if (step + 1 < nsteps) issue_tile(step + 1);
    else cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    float acc[kMmaTiles][4];
#pragma unroll
    for (int i = 0; i < kMmaTiles; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;
    if (live) {
      // NOTE: the steps are opaque to the compiler here, so it forms each ldmatrix address in the loop (two
      // integer ops) instead of keeping all kPairs * kMmaTiles of them live across the walk (125-244
      // registers that way).
      int rs = row_step, cs = col_step;
      asm volatile("" : "+r"(rs), "+r"(cs));
      const uint32_t s_buf = s_cb + uint32_t((step & 1) * buf_elems) * 2u;
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        // The lane's tap (the last pair's second tap, past the filter, reads tap kTaps - 1 against zeros).
        constexpr int kLast = kTaps - 1;
        const int t_lo = 2 * j, t_hi = 2 * j + 1 < kTaps ? 2 * j + 1 : kLast;
        const int off_lo = (t_lo / kK) * rs + (t_lo % kK) * cs;
        const int off_hi = (t_hi / kK) * rs + (t_hi % kK) * cs;
        const int off = hi_tap ? off_hi : off_lo;
#pragma unroll
        for (int i = 0; i < kMmaTiles; ++i)
          if (i < my_tiles) {
            uint32_t a[4];
            ldmatrix_x4(a, s_buf + uint32_t(base[i] + off) * 16u);
            Mma<T>::run(acc[i], a, bf[j]);
          }
      }
    }
    __syncthreads();  // this buffer is free for the tile after next
    if (!live) continue;

    // The epilogue in apply_epilogue's order, its activation chosen once for the thread's values.
    const int p0 = (tile0 + step) * t.tp;
    int off_out[kMmaTiles][2];
#pragma unroll
    for (int i = 0; i < kMmaTiles; ++i)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int p = p0 + (oy_of[i][hh] >> 16), q = q0 + (oy_of[i][hh] & 0xffff);
        off_out[i][hh] = i < my_tiles && oy_of[i][hh] != INT_MAX && p < d.p && q < d.q ? (p * d.q + q) * d.k + kc : -1;
      }
#pragma unroll
    for (int i = 0; i < kMmaTiles; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[i][e] = acc[i][e] * epi.alpha;
        if (epi.bias) acc[i][e] += bias[e & 1];
      }
    if (res_n) {
#pragma unroll
      for (int i = 0; i < kMmaTiles; ++i)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          if (off_out[i][hh] >= 0) {
            const Vec<T, 2> rv = *reinterpret_cast<const Vec<T, 2>*>(res_n + off_out[i][hh]);  // read before the store
            acc[i][2 * hh] += epi.beta * elem_to_float<T>(rv.v[0]);
            acc[i][2 * hh + 1] += epi.beta * elem_to_float<T>(rv.v[1]);
          }
    }
    // (The activation a tile of 4 values at a time: over all 16 at once its temporaries took ~40 registers
    // more, live across the walk.)
#pragma unroll
    for (int i = 0; i < kMmaTiles; ++i) {
      activate_all<4, float>(epi.activation, acc[i]);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        if (off_out[i][hh] >= 0) {
          Vec<T, 2> out;
          out.v[0] = float_to_elem<T>(acc[i][2 * hh]);
          out.v[1] = float_to_elem<T>(acc[i][2 * hh + 1]);
          *reinterpret_cast<Vec<T, 2>*>(dst_n + off_out[i][hh]) = out;
        }
    }
  }
  cp_async_wait<0>();  // no copy outlives the block's shared memory
}

}  // namespace
}  // namespace convkit::detail
