// cuda_grouped_mma's persistent kernel (variant "pipe"): the one-tile kernel's multiply (grouped_mma.cu),
// with each block walking many tiles of one 64-channel block and the next tile's input in flight while it
// multiplies the current one.
//
// Adds over the one-tile kernel: there every block stages its 64 channels' filters and unit table, computes
// its A row addresses, waits for its whole input tile, multiplies and stores, so that a tile's load latency is
// hidden only by the other resident blocks and the per-block setup is paid on a tile of 40-150 mma a warp.
// Here a block stages its filters and unit table once, keeps its A row addresses in registers (every tile
// has the same geometry), and double-buffers the input tile by cp.async: the copy of tile i + gridDim.x runs
// during tile i's multiply and epilogue. The epilogue rounds each value once in the fragment layout and
// stages the tile's outputs in the input buffer it has just multiplied (128-byte pixels, 16-byte chunks
// XOR-swizzled with the pixel), then the block writes them out 16 bytes a thread, consecutive threads on
// consecutive chunks.
// Work mapping: grid (blocks a channel block, channel blocks), as many blocks as are resident at once; block
// b of channel block y takes tiles b, b + gridDim.x, ... in the one-tile kernel's order (image, tile row,
// tile column; the column fastest), so the resident blocks read neighbouring tiles whose halos meet in L2.
// Warps as in the one-tile kernel.
// Shared memory: two input tiles + the filters, plan_of(pb, 2, kPipeBudget) (at most 113 KB: two blocks an
// SM). nvcc -Xptxas -v (sm_90): 115-128 registers, no spills, under __launch_bounds__(256, 2); at 80
// registers (three blocks) the tile loop's live state spilled 100-400 bytes.
// measured (H200, 2026-12-04, bf16 batch 32): rnx50_g3x3_1024_7_g32 0.0167 ms (one-tile kernel 0.0202, cuDNN
// 0.0131), rnx50_g3x3_128_56_g32 0.0755 (0.0787, 0.0521); ncu on the latter: 16 warps an SM, 9.7 cycles
// between a warp's instructions, SM throughput 39%, DRAM 8%: bound by latency and instruction count, not by
// the input's arrival.
#pragma once

namespace convkit::detail {
namespace {

constexpr int64_t kPipeBudget = 113 * 1024;

template <typename T, int kWN>
__global__ void __launch_bounds__(kThreads, 2)
    grouped_mma_pipe_kernel(ConvDims d, GmPlan t, bool aligned /* x and w 16-byte aligned */, const T* __restrict__ src,
                            const T* __restrict__ wei, T* dst, DeviceEpilogue<T> epi) {
  constexpr int kWM = 8 / kWN;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* s_in = smem;                      // two buffers of [ih][iw] pixels of 128 bytes, chunks swizzled
  unsigned char* s_w = smem + 2 * t.smem_in;       // [64 output channels][wstride units of 16 bytes]
  unsigned char* s_zero = s_w + t.smem_w;          // 16 bytes of zeros
  int* s_unit = reinterpret_cast<int*>(s_zero + 16);

  const int ntiles = t.tiles_n * t.tiles_p * t.tiles_q;  // under 2^31 (can_implement)
  const int c0 = blockIdx.y * kBlockC;
  auto origin = [&](int tile, int64_t& n0, int& p0, int& q0) {
    q0 = (tile % t.tiles_q) * t.tq;
    tile /= t.tiles_q;
    p0 = (tile % t.tiles_p) * t.tp;
    n0 = int64_t(tile / t.tiles_p) * t.nimg;
  };

  int tile = int(blockIdx.x);
  int64_t n0;
  int p0, q0;
  gm_stage_filters(d, t, aligned, wei, s_w, s_zero, s_unit, c0);
  if (tile < ntiles) {
    origin(tile, n0, p0, q0);
    gm_stage_input(d, t, aligned, src, s_in, n0, p0, q0, c0);
  }
  cp_async_commit();

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, cs = t.cs, octs = cs / 8;
  const int wm = warp / (8 / kWN), wn = warp % (8 / kWN);
  const bool active = wm * kWM < t.mtiles;
  const int n_base = wn * kWN * 8;       // the warp's first output channel in the block
  const int sgc = (n_base / cs) * octs;  // its super-group's first chunk in a staged pixel
  int arow[kWM];
#pragma unroll
  for (int i = 0; i < kWM; ++i)
    arow[i] = gm_arow(d, t, (wm * kWM + i) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, t.nimg * t.tp * t.tq);
  const uint32_t in_addr = uint32_t(__cvta_generic_to_shared(s_in));
  const uint32_t zero_addr = uint32_t(__cvta_generic_to_shared(s_zero));
  const int b_row = n_base + (lane & 7) + ((lane >> 4) & 1) * 8, b_unit = (lane >> 3) & 1;
  const uint32_t w_addr = uint32_t(__cvta_generic_to_shared(s_w)) + uint32_t((b_row * t.wstride + b_unit) * 16);
  const bool rows = t.tq == d.q;  // a tile is whole output rows: pixel m at the tile's first + m * K

  // Output pixels a buffer holds as staged outputs (128 bytes a pixel): at least the tile's (ih >= tp, iw >= tq).
  const int out_rows = int(t.smem_in / kPixBytes);
  const bool vec_out = (reinterpret_cast<uintptr_t>(dst) & 15) == 0;  // (K % 8 == 0: every pixel's row too)

  for (int buf = 0; tile < ntiles; tile += int(gridDim.x), buf ^= 1) {
    const int next = tile + int(gridDim.x);
    if (next < ntiles) {  // into the other buffer, read by the previous tile (the barrier at the loop's end)
      origin(next, n0, p0, q0);
      gm_stage_input(d, t, aligned, src, s_in + (buf ^ 1) * t.smem_in, n0, p0, q0, c0);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this tile's group (and, the first time, the filters') has landed
    __syncthreads();
    unsigned char* s_out = s_in + buf * t.smem_in;  // this tile's input buffer, free once multiplied
    float acc[kWM][kWN][4];
    if (active) {
      zero_fragments(acc);
      gm_multiply<T, kWN>(acc, t, arow, s_unit, in_addr + uint32_t(buf * t.smem_in), zero_addr, w_addr, sgc);
    }
    __syncthreads();  // the buffer is read by every warp before it takes the outputs
    origin(tile, n0, p0, q0);
    const int m_valid = int(min(int64_t(t.nimg), int64_t(d.n) - n0)) * min(t.tp, d.p - p0) * t.tq;
    const int64_t first = ((n0 * d.p + p0) * d.q + q0) * d.k + c0;  // the tile's first output pixel's channel c0
    // Output pixel m of the tile -> its channel c0 in dst.
    auto out_at = [&](int m) -> int64_t {
      if (rows) return first + int64_t(m) * d.k;
      const int img = (m * t.img_mul) >> 16, mi = m - img * t.tp * t.tq;
      const int py = (mi * t.tq_mul) >> 16, px = mi - py * t.tq;
      return q0 + px >= d.q ? -1 : (((n0 + img) * d.p + p0 + py) * d.q + q0 + px) * d.k + c0;
    };
    if (active) {
      // C fragment: lane l holds rows l / 4 and l / 4 + 8, columns 2 * (l % 4) + 0, 1 of each 16 x 8 tile.
      // The epilogue in apply_epilogue's order (alpha, bias, beta * residual, activation), one rounding; the
      // two values a word into the staged pixel's 16-byte chunk of the n8 tile, chunks XOR-swizzled with
      // m % 8 (the 8 rows of a store on distinct banks).
#pragma unroll
      for (int i = 0; i < kWM; ++i)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int m = (wm * kWM + i) * 16 + lane / 4 + hf * 8;
          if (m >= out_rows) continue;
          int64_t o = -1;
          if (epi.residual && m < m_valid) o = out_at(m);
#pragma unroll
          for (int j = 0; j < kWN; ++j) {
            const int kl = n_base + j * 8 + 2 * (lane % 4);  // channel within the block
            float v[2];
#pragma unroll
            for (int e = 0; e < 2; ++e)
              v[e] = acc[i][j][hf * 2 + e] * epi.alpha +
                     (epi.bias && c0 + kl + e < d.k ? elem_to_float<T>(epi.bias[c0 + kl + e]) : 0.0f);
            if (o >= 0) {  // read before the copy below writes the pixel
              if (c0 + kl < d.k) v[0] += epi.beta * elem_to_float<T>(epi.residual[o + kl]);
              if (c0 + kl + 1 < d.k) v[1] += epi.beta * elem_to_float<T>(epi.residual[o + kl + 1]);
            }
            activate_all<2>(epi.activation, v);
            Vec<T, 2> w;
            w.v[0] = float_to_elem<T>(v[0]);
            w.v[1] = float_to_elem<T>(v[1]);
            *reinterpret_cast<Vec<T, 2>*>(s_out + m * kPixBytes + ((((kl >> 3) ^ m) & 7) << 4) + (kl & 7) * 2) = w;
          }
        }
    }
    __syncthreads();
    // The tile's outputs out, 16 bytes (8 channels of a pixel) a thread a step: consecutive threads write
    // consecutive chunks of a pixel and the next pixel's.
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
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }
  cp_async_wait<0>();  // (an empty group: nothing is left in flight when the block exits)
}

}  // namespace
}  // namespace convkit::detail
