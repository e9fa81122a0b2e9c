// cuda_depthwise's TMA kernel: NHWC depthwise (M = 1) whose input tiles arrive by the tensor-memory-access
// engine, several tiles ahead, while the block's threads do nothing but FMAs from shared memory.
//
// Adds over the rows kernel (depthwise_rows.cuh): there every thread issues its share of the cp.async
// pieces of each step (addresses, bounds tests, zero fills) and the profile found the kernel bound by
// instruction issue, with the FMAs a small part of it. Here one thread issues one TMA copy a tile: the
// engine computes the addresses, and fills the padding (coordinates outside the image) with zeros, so the
// other threads' instructions are the tile's shared-memory loads, the bf16/f16 unpacking and the FMAs. The
// block is persistent: it takes tiles blockIdx.x, blockIdx.x + gridDim.x, ... and keeps `stages` of them
// in flight on mbarriers, so the copies never wait for a block to start; thread 0 refills a stage once a
// block barrier says every warp has read it.
//
// Work mapping: a tile = one image x chunk_ch channels x (kPw * wr * nsub) output rows x (kQt * wc) output
// columns; its box is the input rows and columns those outputs read (halo included). A group of `lanes`
// threads at patch position (wq, wrow) owns nsub patches of kPw x kQt outputs (rows wrow, wrow + wr, ...);
// its thread l owns channels l * kCl .. + kCl - 1 of each. Two mappings of channels to groups:
// - chunks (kPix = 32 * kCl * sizeof(T)): a group is a warp and a tile kCb = 32 * kCl channels (kCl = 2 for
//   16-bit types where C is a multiple of 64, else 1), so each shared-memory load of a warp is one pixel's
//   64 or 128 bytes (one wavefront, conflict-free for any stride) and each store one contiguous run; the
//   load offsets are immediates. kCl = 1 keeps the last chunk from idling most of its lanes where C is off
//   64 (C = 144: 64 + 64 + 16) for one more load a channel.
// - whole pixels (kPix = 0, the "/px" variants): a tile holds all C channels (or an equal part of C past
//   256 channels, a box row's limit), a group is C / kCl threads (two channels a lane for any 16-bit C) and
//   may straddle warps (a load of such a warp touches two pixels: up to two wavefronts). No lane works on
//   channels past C, and a thread's taps never change.
// - whole pixels one channel a lane (the "/px/c1" variants, 7x7 stride 1): 16-bit lanes hold 49 taps instead
//   of 98, which leaves registers for 4 x 4 outputs a thread instead of 2 x 2 (a window of 100 loads for 16
//   outputs instead of 64 for 4: the 2 x 2 patch kept the shared-memory pipe as busy as the FMAs).
// A thread reads each input row of its window once: kCols pixels, each feeding up to kQt * kK FMAs from
// registers; the kK x kK taps of its channels stay in registers (reloaded when its tile's channels change).
// Its outputs lie at 32-bit offsets from its first: stored under a predicate a row and a column.
// Square 3x3, 5x5 or 7x7 filters, the same stride (1 or 2) both ways, dilation 1, any padding; C * element
// size a multiple of 16 bytes (the tensor map's strides); one image's output under 2^31 elements.
// nvcc -Xptxas -v (sm_90): 48-104 registers with one channel a lane, 73-150 with two (7x7); the stack frames
// some instances have are listed in tests/local_memory_allowed.txt.
// measured (H100, 2026-12-05, batch 32, NHWC, cuDNN in the same process, docs/perf.md): tma/256/s2/px bf16
// mbv2_dw3x3_144_56 0.0308 ms (chunks, tma/256/s2/c2: 0.0464; cuDNN 0.0383), mbv2_dw3x3s2_96_112 0.0443
// (rows kernel 0.0593; 0.0512); tma/256/s2/px/c1 bf16 cnxt_dw7x7_96_56 0.0431 (/px 0.0525; 0.0724),
// cnxt_dw7x7_192_28 0.0259 (/px 0.0314; 0.0465); f32 effb0_dw5x5_240_28 0.0278 (chunks 0.0320; 0.0472).
#pragma once

#include "cuda/common/launch.cuh"
#include "cuda/common/tma.cuh"

namespace convkit::detail {
namespace {

constexpr int kTmaMaxStages = 4;

// The tiling of one launch, chosen on the host (plan_tma in depthwise.cu).
struct DwTma {
  int wc = 1, wr = 1;           // thread groups across the tile's columns and down its rows
  int cl = 1;                   // channels a lane (kCl)
  int lanes = 32;               // threads of a group: a warp (chunks of 32 * kCl channels) or chunk_ch / kCl
                                // (whole pixels: the "/px" variants)
  int chunk_ch = 32;            // channels a tile (the box's first dimension)
  int pix = 64;                 // bytes a staged pixel: chunk_ch * sizeof(T) (the kernel's kPix where not 0)
  int px = 0;                   // whole pixels (kPix = 0) or chunks of 32 * kCl channels
  int nsub = 1;                 // row groups a thread group takes in a tile (kPw rows each, wr groups apart)
  int iw = 1, ih = 1;           // the box: input columns and rows of a tile
  int stages = 3;               // tiles in flight a block
  int chunks = 1, tiles_q = 1, tiles_p = 1;
  int tile_q = 1, tile_p = 1;   // output columns and rows of a tile
  int box_bytes = 0;             // one tile's copy: what its mbarrier waits for
  int stage_bytes = 0;          // a stage's stride: box_bytes rounded up to 128 (a TMA destination's alignment)
  int items = 0;                // tiles: N * chunks * tiles_q * tiles_p (under 2^31)
  int64_t smem = 0;
  int threads = 32;
  FastDiv div_p, div_q, div_n;  // tiles_p, tiles_q and N as divisors (the tile decode)
};

// A lane's kCl channels of one pixel, kCl * sizeof(T) bytes: one 16-bit value, two packed in a 32-bit word, or
// one fp32. LaneBits is their size as an integer; unpack_lane turns them into fp32.
template <typename T, int kCl>
using LaneBits = std::conditional_t<sizeof(T) * kCl == 4, uint32_t, unsigned short>;

template <typename T, int kCl>
__device__ __forceinline__ void unpack_lane(LaneBits<T, kCl> v, float (&x)[kCl]) {
  static_assert(sizeof(T) * kCl == sizeof(v), "one 16-bit value or 4 bytes a lane");
  if constexpr (kCl == 1 && sizeof(T) == 4) {
    x[0] = __uint_as_float(v);
  } else if constexpr (kCl == 1) {
    T h;
    memcpy(&h, &v, 2);
    x[0] = elem_to_float<T>(h);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    x[0] = __uint_as_float(v << 16);  // a bf16 is the top half of an fp32 (exact)
    x[1] = __uint_as_float(v & 0xffff0000u);
  } else {
    __half2 h;
    memcpy(&h, &v, 4);
    const float2 f = __half22float2(h);
    x[0] = f.x, x[1] = f.y;
  }
}

// The lane's channels at p (global memory).
template <typename T, int kCl>
__device__ __forceinline__ void load_lane(const void* p, float (&x)[kCl]) {
  unpack_lane<T, kCl>(*static_cast<const LaneBits<T, kCl>*>(p), x);
}

// The same from shared memory at a 32-bit shared-window address (ld.shared: the address stays an integer
// sum, which ptxas folds into the load's register + uniform register + immediate operand).
template <typename T, int kCl>
__device__ __forceinline__ void load_lane_shared(uint32_t a, float (&x)[kCl]) {
  LaneBits<T, kCl> v;
  if constexpr (sizeof(v) == 4)
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
  else
    asm volatile("ld.shared.b16 %0, [%1];" : "=h"(v) : "r"(a) : "memory");
  unpack_lane<T, kCl>(v, x);
}

// A lane's kCl values rounded to T and stored at p, a global address (st.global: p comes through
// opaque_ptr, which hides its address space from the compiler).
template <typename T, int kCl>
__device__ __forceinline__ void store_lane(T* p, const float (&a)[kCl]) {
  Vec<T, kCl> v;
#pragma unroll
  for (int e = 0; e < kCl; ++e) v.v[e] = float_to_elem<T>(a[e]);
  if constexpr (sizeof(v) == 4) {
    uint32_t u;
    memcpy(&u, &v, 4);
    asm volatile("st.global.b32 [%0], %1;" ::"l"(p), "r"(u) : "memory");
  } else {
    static_assert(sizeof(v) == 2, "one 16-bit value or 4 bytes a lane");
    unsigned short u;
    memcpy(&u, &v, 2);
    asm volatile("st.global.b16 [%0], %1;" ::"l"(p), "h"(u) : "memory");
  }
}

// p, hidden from the compiler's reassociation: an address p + off with off a 32-bit value becomes one
// multiply-add (not the 64-bit offset first + off, rescaled and added to the array's base, at every access).
template <typename P>
__device__ __forceinline__ P* opaque_ptr(P* p) {
  asm("" : "+l"(p));
  return p;
}

// The persistent tile walk both TMA kernels share (this file's and depthwise_tma_nchw.cuh's). A block takes tiles
// blockIdx.x, blockIdx.x + gridDim.x, ... and keeps `stages` of them in flight, each on its own mbarrier.

// Tile `item` -> (chunk, image, tile row, tile column), the tile row fastest: the tiles in flight across the grid
// at one time are neighbours, whose halos meet in L2.
struct DwTile {
  int chunk, n, tp, tq;
};
__device__ __forceinline__ DwTile decode_tile(const FastDiv& div_p, const FastDiv& div_q, const FastDiv& div_n, int item) {
  DwTile tile;
  uint32_t r, u = div_p.divmod(uint32_t(item), r);
  tile.tp = int(r);
  u = div_q.divmod(u, r);
  tile.tq = int(r);
  tile.chunk = int(div_n.divmod(u, r));
  tile.n = int(r);
  return tile;
}

// Thread 0 initialises the block's `stages` barriers (at s_full, 8 bytes apart) and issues its first tiles with
// issue(item, stage); the whole block then waits until the barriers exist.
template <typename Issue>
__device__ __forceinline__ void tma_tiles_start(uint32_t s_full, int stages, int items, Issue& issue) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(s_full + 8 * s, 1);
    mbar_init_fence();
    for (int s = 0; s < stages; ++s)
      if (int64_t(blockIdx.x) + int64_t(s) * gridDim.x < items) issue(int(blockIdx.x + s * gridDim.x), s);
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them
}

// After the block's last read of tile `item` in `stage`: once every warp has read it (the barrier), thread 0
// refills the stage with the tile `stages` ahead (the refill then overlaps the block's stores), and the block
// moves to the next stage (the parity flips on wrapping).
// NOTE: refilled by the last warp to release it, with no barrier: no faster (docs/perf.md, 2026-12-05).
template <typename Issue>
__device__ __forceinline__ void tma_tiles_release(int item, int& stage, uint32_t& parity, int stages, int items,
                                                  Issue& issue) {
  __syncthreads();
  if (threadIdx.x == 0 && int64_t(item) + int64_t(stages) * gridDim.x < items) issue(item + stages * int(gridDim.x), stage);
  if (++stage == stages) stage = 0, parity ^= 1u;
}

template <typename T, int kK, int kU, int kPw, int kQt, int kCl, int kPix>
__global__ void __launch_bounds__(256) depthwise_nhwc_tma_kernel(const __grid_constant__ CUtensorMap map, ConvDims d,
                                                                DwTma t, const T* __restrict__ wei, T* dst,
                                                                DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int pix = kPix ? kPix : t.pix;  // bytes a staged pixel: constant (the loads' offsets immediates) or not
  constexpr int kRows = (kPw - 1) * kU + kK, kCols = (kQt - 1) * kU + kK;  // a thread's input window
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t full[kTmaMaxStages];
  const uint32_t s_tiles = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t s_full = uint32_t(__cvta_generic_to_shared(full));
  // The thread's group (a patch position in every tile) and its lane in the group (its channels).
  const int grp = int(threadIdx.x) / t.lanes, lane = int(threadIdx.x) - grp * t.lanes;
  const int wq = grp % t.wc, wrow = grp / t.wc;

  auto issue = [&](int item, int stage) {
    const DwTile tile = decode_tile(t.div_p, t.div_q, t.div_n, item);
    const uint32_t bar = s_full + 8 * stage;
    mbar_arrive_expect_tx(bar, uint32_t(t.box_bytes));  // NOTE: the copy's bytes, not the stage's stride
    tma_load_4d(s_tiles + uint32_t(stage * t.stage_bytes), &map, tile.chunk * t.chunk_ch,
                tile.tq * t.tile_q * kU - d.pad_w, tile.tp * t.tile_p * kU - d.pad_h, tile.n, bar);
  };
  tma_tiles_start(s_full, t.stages, t.items, issue);

  float w[kK][kK][kCl], bias[kCl];
  int loaded_chunk = -1;
  int stage = 0;
  uint32_t parity = 0;
  for (int item = int(blockIdx.x); item < t.items; item += int(gridDim.x)) {
    const auto [chunk, n, tp, tq] = decode_tile(t.div_p, t.div_q, t.div_n, item);
    const int c = chunk * t.chunk_ch + lane * kCl;  // the lane's first channel (C is a multiple of kCl)
    if (chunk != loaded_chunk) {             // the taps and bias of the lane's channels, fp32
      loaded_chunk = chunk;
#pragma unroll
      for (int e = 0; e < kCl; ++e) {
        const bool ok = c + e < d.k;
#pragma unroll
        for (int r = 0; r < kK; ++r)
#pragma unroll
          for (int s = 0; s < kK; ++s)
            w[r][s][e] = ok ? elem_to_float<T>(wei[int64_t(c + e) * (kK * kK) + r * kK + s]) : 0.0f;
        bias[e] = ok && epi.bias ? elem_to_float<T>(epi.bias[c + e]) : 0.0f;
      }
    }
    mbar_wait(s_full + 8 * stage, parity);
    const int64_t img = int64_t(n) * d.p * d.q * d.k;  // one image's output is under 2^31 elements
    const int q0 = tq * t.tile_q + wq * kQt;
    for (int sub = 0; sub < t.nsub; ++sub) {
      // Row group g of the tile (kPw output rows): the thread's window is input rows g * kPw * kU + (0 ..
      // kRows-1), columns wq * kQt * kU + (0 .. kCols-1).
      const int g = wrow + sub * t.wr;
      // (The thread's part of the address hidden from the compiler, which would otherwise fold it into one
      // multiply a load with the window's offsets.)
      uint32_t tile = s_tiles + uint32_t(stage * t.stage_bytes + ((g * kPw * kU) * t.iw + wq * kQt * kU) * pix +
                                         lane * kCl * int(sizeof(T)));
      asm("" : "+r"(tile));
      float acc[kPw][kQt][kCl];
#pragma unroll
      for (int i = 0; i < kPw; ++i)
#pragma unroll
        for (int j = 0; j < kQt; ++j)
#pragma unroll
          for (int e = 0; e < kCl; ++e) acc[i][j][e] = 0.0f;
#pragma unroll
      for (int ir = 0; ir < kRows; ++ir) {
        float x[kCols][kCl];
#pragma unroll
        for (int jj = 0; jj < kCols; ++jj) load_lane_shared<T, kCl>(tile + uint32_t((ir * t.iw + jj) * pix), x[jj]);
#pragma unroll
        for (int i = 0; i < kPw; ++i) {
          const int r = ir - i * kU;  // the filter row that input row ir is for output row i
          if (r < 0 || r >= kK) continue;
#pragma unroll
          for (int j = 0; j < kQt; ++j)
#pragma unroll
            for (int s = 0; s < kK; ++s)
#pragma unroll
              for (int e = 0; e < kCl; ++e) acc[i][j][e] = fmaf(x[j * kU + s][e], w[r][s][e], acc[i][j][e]);
        }
      }
      if (sub == t.nsub - 1) tma_tiles_release(item, stage, parity, t.stages, t.items, issue);

      // The epilogue in apply_epilogue's order (alpha, bias, beta * residual, activation), one rounding. The
      // thread's outputs are at fixed offsets from its first (rows q * k apart, columns k; 32-bit, inside one
      // image): a predicate a row and a column, and one multiply-add an address.
      const int p0 = tp * t.tile_p + g * kPw;
      if (c >= d.k) continue;
      const int64_t first = img + (int64_t(p0) * d.q + q0) * d.k + c;
      const int row_k = d.q * d.k;
      bool row_ok[kPw], col_ok[kQt];
#pragma unroll
      for (int i = 0; i < kPw; ++i) row_ok[i] = p0 + i < d.p;
#pragma unroll
      for (int j = 0; j < kQt; ++j) col_ok[j] = q0 + j < d.q;
#pragma unroll
      for (int i = 0; i < kPw; ++i)
#pragma unroll
        for (int j = 0; j < kQt; ++j)
#pragma unroll
          for (int e = 0; e < kCl; ++e) acc[i][j][e] = acc[i][j][e] * epi.alpha + bias[e];
      if (epi.residual) {
        const T* res = opaque_ptr(epi.residual + first);
#pragma unroll
        for (int i = 0; i < kPw; ++i)
#pragma unroll
          for (int j = 0; j < kQt; ++j)
            if (row_ok[i] && col_ok[j]) {
              float rv[kCl];
              load_lane<T, kCl>(res + (uint32_t(i * row_k) + uint32_t(j * d.k)), rv);  // read before the store
#pragma unroll
              for (int e = 0; e < kCl; ++e) acc[i][j][e] += epi.beta * rv[e];
            }
      }
      // NOTE: a row at a time (32 values at once went to local memory).
#pragma unroll
      for (int i = 0; i < kPw; ++i) activate_all<kQt * kCl, float>(epi.activation, &acc[i][0][0]);
      T* out = opaque_ptr(dst + first);
#pragma unroll
      for (int i = 0; i < kPw; ++i)
#pragma unroll
        for (int j = 0; j < kQt; ++j)
          if (row_ok[i] && col_ok[j]) store_lane<T, kCl>(out + (uint32_t(i * row_k) + uint32_t(j * d.k)), acc[i][j]);
    }
  }
#endif
}

}  // namespace
}  // namespace convkit::detail
