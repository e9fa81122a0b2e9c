// cuda_grouped_mma's persistent kernel (variant "pipe"): the one-tile kernel's multiply (grouped_mma.cu),
// with each block walking many tiles of one 64-channel block and the next tile's input in flight while it
// multiplies the current one.
//
// Adds over the one-tile kernel: there every block stages its 64 channels' filters and unit table, computes
// its A row addresses, waits for its whole input tile, multiplies and stores, so that a tile's load latency is
// hidden only by the other resident blocks and the per-block setup is paid on a tile of 40-150 mma a warp.
// Here a block stages its filters and unit table once, keeps its A row addresses in registers (every tile
// has the same geometry), and double-buffers the input tile by cp.async: the copy of tile i + gridDim.x runs
// during tile i's multiply and epilogue. The epilogue is the one-tile kernel's (gm_epilogue: the outputs
// staged in the input buffer just multiplied, then written 16 bytes a thread).
// Work mapping: grid (blocks a channel block, channel blocks), as many blocks as are resident at once; block
// b of channel block y takes tiles b, b + gridDim.x, ... in the one-tile kernel's order (image, tile row,
// tile column; the column fastest), so the resident blocks read neighbouring tiles whose halos meet in L2.
// Warps as in the one-tile kernel.
// Shared memory: two input tiles + the filters, plan_of(pb, 2, kPipeBudget) (at most 113 KB: two blocks an
// SM). nvcc -Xptxas -v (sm_90): 115-128 registers (a 16-byte stack frame at kWN = 2 and 4), under __launch_bounds__(256, 2); at 80
// registers (three blocks) the tile loop's live state spilled 100-400 bytes.
// measured (H200, 2026-12-04, bf16 batch 32): rnx50_g3x3_1024_7_g32 0.0167 ms (one-tile kernel 0.0202, cuDNN
// 0.0131), rnx50_g3x3_128_56_g32 0.0755 (0.0787, 0.0521); ncu on the latter: 16 warps an SM, 9.7 cycles
// between a warp's instructions, SM throughput 39%, DRAM 8%: bound by latency and instruction count, not by
// the input's arrival.
#pragma once

#include "cuda/common/launch.cuh"

namespace convkit::detail {
namespace {

constexpr int64_t kPipeBudget = 113 * 1024;

template <typename T, int kWN>
__global__ void __launch_bounds__(kThreads, 2)
    grouped_mma_pipe_kernel(ConvDims d, GmPlan t, bool aligned /* x and w 16-byte aligned */, const T* __restrict__ src,
                            const T* __restrict__ wei, T* dst, DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
  constexpr int kWM = 8 / kWN;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* s_in = smem;                      // two buffers of [ih][iw] pixels of 128 bytes, chunks swizzled
  unsigned char* s_w = smem + 2 * t.smem_in;       // [64 output channels][wstride units of 16 bytes]
  unsigned char* s_zero = s_w + t.smem_w;          // 16 bytes of zeros
  int* s_unit = reinterpret_cast<int*>(s_zero + 16);

  const int ntiles = t.tiles_n * t.tiles_p * t.tiles_q;  // under 2^31 (can_implement)
  const int c0 = blockIdx.y * kBlockC;

  int tile = int(blockIdx.x);
  int64_t n0;
  int p0, q0;
  gm_stage_filters(d, t, aligned, wei, s_w, s_zero, s_unit, c0);
  if (tile < ntiles) {
    gm_origin(t, tile, n0, p0, q0);
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

  for (int buf = 0; tile < ntiles; tile += int(gridDim.x), buf ^= 1) {
    const int next = tile + int(gridDim.x);
    if (next < ntiles) {  // into the other buffer, read by the previous tile (the barrier at the loop's end)
      gm_origin(t, next, n0, p0, q0);
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
    gm_origin(t, tile, n0, p0, q0);
    gm_epilogue<T, kWN>(acc, active, d, t, epi, dst, s_out, n0, p0, q0, c0, wm, n_base);
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }
  cp_async_wait<0>();  // (an empty group: nothing is left in flight when the block exits)
}

}  // namespace
}  // namespace convkit::detail
