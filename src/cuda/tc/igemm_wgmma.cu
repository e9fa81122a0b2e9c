// cuda_igemm_wgmma: Hopper's warpgroup MMA (wgmma.mma_async) fed by a multi-stage pipeline into 128-byte-
// swizzled shared memory: activations gathered by cp.async (or by TMA where they are a plain matrix),
// weights by the tensor memory accelerator (TMA). fp16 / bf16 tensors, and fp32 tensors in tf32 math;
// fp32 accumulation; NHWC activations, KRSC weights; per-sample weights (conv2d_per_sample) too.
// sm_90a only: built as its own object with -gencode arch=compute_90a,code=sm_90a, and it runs only on
// devices of compute capability 9.0 (H100, H200).
//
// What it adds over cuda_igemm_mma (one idea: Hopper's own tensor-core path):
//  - wgmma.mma_async: a warpgroup (4 consecutive warps) multiplies a 64 x N x 32-byte tile (k16 for 16-bit
//    types, k8 for tf32) with both operands read by the tensor cores straight from shared memory through
//    64-bit matrix descriptors (no ldmatrix, no operand registers), and it is asynchronous: one group of
//    wgmmas stays in flight while the warps pass the next barrier and issue the next stage's loads
//    (wgmma.wait_group 1);
//  - shared memory in the layout wgmma reads with the 128-byte swizzle: rows of 128 bytes of k (64 16-bit
//    or 32 fp32 elements), 16-byte chunk c of row r stored at chunk c ^ (r % 8), 8-row atoms 1024 bytes
//    apart (the descriptor's stride); an instruction's k step is a 32-byte move of the start address;
//  - the weights, a plain [K][R*S*C] matrix, arrive by TMA: one thread issues one box copy per stage (the
//    tensor map's 128-byte swizzle is wgmma's) completing on an mbarrier; the im2col gather of the
//    activations is left to the threads, with one 64-bit window offset per stage shared by all their rows,
//    except for 1x1, stride-1, unpadded, one-group convolutions, whose activations are a plain [N*H*W][C]
//    matrix and come by TMA too, and for every convolution whose stages each lie in one filter tap
//    (C/groups % 64, tf32 % 32): those come by the TMA's im2col mode (one box per stage: BM output pixels'
//    window origins plus the tap's offsets, 128 bytes of channels, the padding as zeros);
//  - where both operands come by TMA, a second, warp-specialized kernel: a producer warpgroup (one thread)
//    keeps 4-8 stages loading on full/empty mbarriers, and the consumer warpgroups only multiply;
//  - persistent tiles (16-bit, one group, no split-K): one block per SM walks the output tiles, its
//    producer loading across tile boundaries, the output (and the residual) through shared memory by TMA, so
//    that a tile's epilogue overlaps the next tile's loads;
//  - 128-byte k stages instead of 64: half the barriers per multiply;
//  - the short epilogue (bias, relu) in registers, staged in the output type;
//  - tf32: wgmma would use fp32 operands as they are (the low 13 mantissa bits dropped: truncation); convkit's
//    tf32 rounds to nearest even (tf32_rne_bits; cuDNN's errors on Gaussian data match rounding, not
//    truncation: rel L2 2.9e-4 both, truncation would give 7.7e-4), so the weights are rounded once per call
//    into the workspace; the gathering kernel rounds each stage of activations in shared memory before it
//    is published, the warp-specialized one in registers (ldmatrix, then wgmma with A from registers);
//  - split-K where a grid of at most one wave would leave SMs idle: the splits of a tile wait for each other
//    (a cooperative launch) and each sums a share of the tile's rows (no reduce kernel); larger grids keep
//    cuda_igemm_mma's reduce kernel.
// Ordering: each thread's cp.async copies are made visible to the tensor cores (the async proxy) with
// fence.proxy.async.shared::cta before the barrier that publishes the stage; the TMA's mbarrier phase is
// awaited by every thread; a slot is refilled only after every warpgroup's wgmma.wait_group has retired the
// multiply that read it.
// The filter-tap walk, the general epilogue staged through shared memory, split-K's partials, its reduce
// kernel and its in-kernel sum are in igemm_tc.cuh (the first two shared with cuda_igemm_mma).
// Not here (cuda_igemm_mma runs them): C/groups % 8 != 0 (% 4 for tf32; the 3-channel stem: the general-C
// gather path), tensors not 16-byte aligned (run() hands them to cuda_igemm_mma).
//
// measured (H200, 2026-11-29, batch 32, tuned variants, vs cuDNN in the same process; docs/perf.md): see
// docs/kernels.md for the steps: cp.async for both operands 0.57x bf16 ResNet-50 geomean (the loader's 294
// instructions per warp per stage set the pace: 0.33 IPC); TMA weights and the lean gather 0.61x (seed000
// 0.650 -> 0.508 ms); the register epilogue 0.68x; 3-stage tiles at 2-3 blocks per SM 0.69x; activations of
// the 1x1 layers by TMA 0.70x -> 0.74x (heuristic variants). tf32 0.49x (cuda_igemm_mma) -> 0.62x.
// Sixth session (best tuned variant per layer): the im2col mode alone made the bf16 3x3 layers 14-22%
// faster (3x3 64@56 0.0345 -> 0.0302 ms, seed000 0.501 -> 0.460), 1x1 unchanged, tf32 +2%; with the
// warp-specialized tiles too: bf16 ResNet-50 0.74x -> 0.79x cuDNN, f16 0.72x -> 0.76x, tf32 0.62x -> 0.66x.
// The warp-specialized kernel wins on the deep-k late layers (tf32 3x3 256@14 0.0581 -> 0.0532 ms, bf16 1x1
// 2048->512@7 0.0172 -> 0.0147) and loses on the large-M early ones, where 2-3 gathering blocks per SM
// overlap one block's epilogue with another's loop (one warp-specialized block per SM cannot).
// NOTE: tf32's rounding instructions were never its cost (cvt.rna -> cvt.rn moved the layers by 1% at most),
// the pass over shared memory was: with the activations left unrounded (an experiment, wrong answers) the
// best variants got 12% faster (geomean), with the weights' rounding kernel gone too 21% (H200, seventh
// session). Rounding the activations in registers instead (the warp-specialized kernel's A from registers):
// tf32 ResNet-50 0.66x -> 0.72x cuDNN; 3x3 64@56 0.0679 -> 0.0527 ms, 3x3 256@14 0.0540 -> 0.0459.
// Split-K summed in the kernel (one wave, cooperative): tf32 1x1 2048->512@7 0.0393 -> 0.0331 ms (its
// reduce kernel alone took 9.2 us: ncu), 3x3 512@7 0.0521 -> 0.0453; tf32 ResNet-50 0.72x -> 0.75x.
// (The first version had the last split to arrive sum the whole tile: one SM reading four partial tiles,
// slower than the reduce kernel: bf16 3x3 512@7 0.0309 -> 0.0352 ms.)
// Tenth session, the persistent tiles (untuned picks): bf16 ResNet-50 0.78x -> 0.84x cuDNN; 1x1 64->256@56
// 0.0421 -> 0.0287 ms, 1x1 64->64@56 0.0167 -> 0.0136; fused conv + bias + relu + residual (1x1 64->256,
// PyTorch op vs 4 eager ops) 1.94x -> 2.91x.
// NOTE: tried and removed, "row windows" for stride-1 layers: per 128-byte channel slice one TMA box of
// whole padded input rows, each filter tap's A operand that window read from another starting row (the
// descriptor may start at any 128-byte row; its base-offset field must stay 0: the swizzle follows the
// address bits). L2 traffic fell (ncu, 3x3 64@56 bf16: L2 throughput 42% -> 16%) but every layer got slower
// (0.0346 -> 0.0497 ms there; 3x3 128@28 0.0276 -> 0.0331; 3x3 256@14 0.031 -> 0.042; tf32 alike), also
// with each window issued a whole slice ahead. The gathered kernel is latency-bound (ncu: SM 59%, L2 42%,
// DRAM 8%, 6 warps per scheduler), not L2-bound. A likely cause: an A operand that starts mid-atom makes
// every core matrix straddle two swizzle atoms (n64 tiles lost most: 0.70x, n128 ones 0.83x). Operands
// read by ldmatrix into registers (wgmma's RS form) would not care: cuda_conv_wgmma_halo does that (with a
// halo of whole rows and its filter bank resident), correct but no faster. docs/kernels.md has the table.
// NOTE: tried and removed (eighth session), swapped roles for 64 output channels: a 256x64 warp-specialized
// tile whose one consumer warpgroup multiplies the weights (wgmma's A, m64) by 256 pixels (B, n256) of the
// same im2col stages, the accumulators staged transposed for the epilogue. 3x3 64->64 at 56x56, bf16,
// batch 32: 0.0365 ms against 0.0295 for 128x64w12s4 (one block per SM: 128 accumulator registers per thread
// leave no room for a second).
#include <cuda.h>  // CUtensorMap (the driver's encoder is reached through the runtime: no -lcuda)
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/tc/igemm_tc.cuh"
#include "cuda/tc/splitk_reduce.cuh"
#include "cuda/tc/wgmma_common.cuh"

namespace convkit::detail {
namespace {

// ---- the kernel ------------------------------------------------------------------------------------
// BM / 64 warpgroups; warpgroup w computes rows 64w..64w+63 of the BM x BN tile of one (batch entry, group,
// k split), as one wgmma of 64 x BN per 32 bytes of k (16 16-bit elements, 8 tf32).
// T: __half, __nv_bfloat16, or float (tf32 math: each stage rounded to tf32 in shared memory first).
// Batch entries: 1, or N with per-sample weights (entry b multiplies its image by weight rows b*K..).
// Grid: x = m tiles, y = n tiles, z = (batch entry * G + group) * splits + split.
template <int BM, int BN, int ST>
constexpr int smem_bytes() {
  return ST * (BM + BN) * kRowBytes + ST * 8 + kAtomBytes;  // + mbarriers, + the slack for rounding the base up
}
// The blocks per SM a tile is compiled for (__launch_bounds__): the 3-stage tiles exist to share an SM, so
// they ask for as many as their shared memory allows (at most 3; registers then <= 64K / that many blocks'
// threads); the 4-stage ones leave the register count to the compiler.
template <int BM, int BN, int ST>
constexpr int min_blocks() {
  return ST == 3 ? std::min(3, (227 * 1024) / smem_bytes<BM, BN, ST>()) : 1;
}

template <typename T, int BM, int BN, int kStages>
__global__ void __launch_bounds__(BM / 64 * 128, (min_blocks<BM, BN, kStages>())) igemm_wgmma_kernel(const TcArgs a, const __grid_constant__ CUtensorMap wmap,
                                                                     const __grid_constant__ CUtensorMap amap) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kThreads = BM / 64 * 128;
  constexpr bool kTf32 = std::is_same_v<T, float>;
  constexpr int kBke = bke_of(int(sizeof(T))), kCe = 16 / int(sizeof(T));  // k per stage, per chunk
  constexpr int WN = BN < 256 ? BN : 256, NB = BN / WN;
  constexpr int kRowsPerPass = kThreads / kChunks;
  constexpr int kAIters = BM / kRowsPerPass;
  constexpr int kAStage = BM * kRowBytes, kStageBytes = (BM + BN) * kRowBytes;
  constexpr uint32_t kBBytes = BN * kRowBytes;  // one stage of weights: one TMA box
  static_assert(kStages >= 3, "one stage multiplied, one retiring, at least one loading");
  static_assert(BM % kRowsPerPass == 0 && kRowsPerPass % 8 == 0, "whole loader passes");
  static_assert(BN % WN == 0 && (WN == 64 || WN == 128 || WN == 256), "wgmma n64, n128 or n256");

  // The swizzle atoms must start on 1024-byte boundaries: the base is rounded up (the host adds the slack).
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = uint32_t(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = (kAtomBytes - (raw & (kAtomBytes - 1))) & (kAtomBytes - 1);
  const uint32_t smem_base = raw + pad;
  unsigned char* smem = smem_raw + pad;

  const int tid = threadIdx.x, wg = tid / 128;

  const BlockPos pos = block_pos<BM, BN>(a);
  const int split = pos.split, g = pos.g, b = pos.b, n_block = pos.n_block;
  const int64_t m_block = pos.m_block;

  const T* src = static_cast<const T*>(a.src);

  const int kt0 = split * a.tiles_per_split;
  const int nk = min(a.num_k_tiles - kt0, a.tiles_per_split);  // >= 1: the host leaves no split empty

  // ---- loader: this thread fills chunk `chunk` of rows row0 + i*kRowsPerPass of A and B. Those rows are
  // all congruent mod 8, so the swizzled chunk position is one number.
  const int chunk = tid % kChunks;
  const int row0 = tid / kChunks;
  const uint32_t swz = uint32_t((chunk ^ (row0 & 7)) * 16);
  int64_t a_row[kAIters];  // the element offset of the row's window origin (0 for rows past M)
  int a_h0[kAIters], a_w0[kAIters];
  {
    int64_t base[kAIters];
    decode_a_rows<kAIters, kRowsPerPass>(a, m_block, row0, b, g, base, a_h0, a_w0);
#pragma unroll
    for (int i = 0; i < kAIters; ++i)
      a_row[i] = a_h0[i] == kFar ? 0 : base[i] + (int64_t(a_h0[i]) * a.W + a_w0[i]) * a.C;
  }
  TapWalk tw;
  tw.start(a, kt0 * kBke + chunk * kCe);
  // The weights: thread 0 issues one TMA box per stage (rows b*K + g*Kpg + n_block.., k from kt0*kBke); a
  // box row past the group's Kpg reads the next group's weights, which only feed output columns never
  // stored (b > 0 only with per-sample weights: the tensor map spans the N*K rows).
  const int b_row0 = (a.nb > 1 ? b * a.K : 0) + g * a.Kpg + n_block;
  // A by TMA (a.a_by_tma), as a matrix (1x1, stride 1, no padding, one group): rows b*Mb + m_block.. of the
  // [N*H*W][C] activation matrix (rows past the image belong to output rows never stored; past the tensor,
  // zeros). In im2col mode (a.a_im2col): the traversal from the window origin (i2c_w, i2c_h) of the block's
  // first output pixel in image i2c_n, channels from g*Cg; each stage adds its tap's offsets and channels.
  const bool a_tma = a.a_by_tma;
  const int a_row0 = int(int64_t(b) * a.Mb + m_block);  // (< 2^31: run() checks N*H*W)
  int i2c_w = 0, i2c_h = 0, i2c_n = 0;
  if (a.a_im2col) im2col_origin(a, int64_t(b) * a.Mb + m_block, i2c_w, i2c_h, i2c_n);
  const uint32_t bars = smem_base + kStages * kStageBytes;  // kStages mbarriers, 8 bytes each
  if (tid == 0) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wmap)) : "memory");
    if (a_tma) asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&amap)) : "memory");
    for (int s = 0; s < kStages; ++s) mbar_init(bars + 8 * s, 1);
    mbar_init_fence();
  }
  __syncthreads();

  // NOTE: the window offset of the tap is the same for every row of the thread (one 64-bit product per
  // stage); per row only the bounds test and one add remain: the loader's instructions, not the tensor
  // cores, set the pace of the first version (294 instructions per warp per stage at 128x256).
  auto load_stage = [&](int stage) {
    const int slot = stage % kStages;
    const uint32_t sA = smem_base + slot * kStageBytes, sB = sA + kAStage;
    if (tid == 0) {
      mbar_arrive_expect_tx(bars + 8 * slot, kBBytes + (a_tma ? uint32_t(kAStage) : 0u));
      tma_load_2d(sB, &wmap, (kt0 + stage) * kBke, b_row0, bars + 8 * slot);
      if (a.a_im2col)  // (thread 0's tap walk is the stage's: its chunk is 0)
        tma_load_im2col(sA, &amap, g * a.Cg + tw.c, i2c_w, i2c_h, i2c_n, uint16_t(tw.s * a.dil_w),
                        uint16_t(tw.r * a.dil_h), bars + 8 * slot);
      else if (a_tma)
        tma_load_2d(sA, &amap, (kt0 + stage) * kBke, a_row0, bars + 8 * slot);
    }
    if (a_tma) {
      if (a.a_im2col) tw.advance(a, kBke);
      return;
    }
    const bool k_ok = tw.r < a.R;  // k < Kg
    const int dh = tw.r * a.dil_h, dw = tw.s * a.dil_w;
    const int64_t tap = (int64_t(dh) * a.W + dw) * a.C + tw.c;
#pragma unroll
    for (int i = 0; i < kAIters; ++i) {
      const bool ok = k_ok && unsigned(a_h0[i] + dh) < unsigned(a.H) && unsigned(a_w0[i] + dw) < unsigned(a.W);
      cp_async16(sA + (row0 + i * kRowsPerPass) * kRowBytes + swz, src + (ok ? a_row[i] + tap : 0), ok);
    }
    tw.advance(a, kBke);
  };

  float acc[NB][WN / 2];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int e = 0; e < WN / 2; ++e) acc[nb][e] = 0.0f;

  // ---- the pipeline: kStages-2 stages loading ahead, one being multiplied, one retiring.
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < nk) load_stage(s);
    cp_async_commit();  // (possibly empty: keeps the group count uniform)
  }
  const uint32_t a_wg = uint32_t(wg) * 64 * kRowBytes;  // this warpgroup's 64 rows of A
  for (int kt = 0; kt < nk; ++kt) {
    const uint32_t sA = smem_base + (kt % kStages) * kStageBytes;
    const uint32_t bar = bars + 8 * (kt % kStages), parity = uint32_t(kt / kStages) & 1;
    cp_async_wait<kStages - 3>();  // this thread's copies of stage kt have landed ...
    if constexpr (kTf32) {
      // ... (tf32) are rounded in place (the weights were rounded once, before the launch; activations
      // that came by TMA are awaited first) ...
      // NOTE: the first version rounded the weights here too, each block its own copy of every stage,
      // with cvt.rna (ties away: 3 SASS instructions each, 14 per 16-byte chunk): tf32 ResNet-50 0.60x
      // cuDNN; weights rounded once per call 0.62x; cvt.rn (one F2FP) changed nothing measurable (header).
      if (a_tma) mbar_wait(bar, parity);
#pragma unroll
      for (int i = 0; i < kAIters; ++i) round_chunk_tf32(sA + (row0 + i * kRowsPerPass) * kRowBytes + swz);
    }
    if (kTf32 || !a_tma) fence_proxy_async();  // ... are visible to the tensor cores ...
    __syncthreads();               // ... and so are everyone's; every wgmma of stage kt-2 has retired
    {
      const int next = kt + kStages - 2;  // into the slot of stage kt-2
      if (next < nk) load_stage(next);
      cp_async_commit();
    }
    mbar_wait(bar, parity);  // and its weights (TMA; and its activations, if by TMA)
    // (returns when stage kt-1's multiply has retired; stage kt's may still run)
    multiply_stage<T, WN, NB>(acc, smem_desc(sA + a_wg), smem_desc(sA + kAStage));
  }
  wgmma_wait<0>();
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) fence_accumulators(acc[nb]);
  cp_async_wait<0>();
  __syncthreads();

  wgmma_epilogue<T, BM, BN, kStages * kStageBytes, kThreads>(a, acc, smem, m_block, n_block, b, g, split, tid,
                                                            [] { __syncthreads(); });
#else
  // Built for sm_90a only (see CMakeLists.txt); can_implement keeps other devices away.
  __trap();
#endif
}

// ---- the warp-specialized kernel (activations by TMA) ---------------------------------------------------
// When both operands come by TMA (a.a_by_tma) no thread gathers anything, and the pipeline above wastes its
// depth: a slot is refilled only after a __syncthreads that follows every warpgroup's wait for the multiply
// before, so a 3-stage block keeps one stage loading while it multiplies (ncu: latency-bound), and several
// blocks per SM stand in for a deeper pipeline.
// Here one extra warpgroup (the producer; one of its threads works) issues the TMA loads of all kStages slots
// as fast as they free up, and the BM / 64 consumer warpgroups only wait and multiply.
// NOTE: not setmaxnreg (the producer's registers handed to the consumers): ptxas compiles the whole kernel
// within the launch bound's count anyway, and an increase the pool could not cover hung the first version
// (a kernel compiled for fewer registers than the bound frees too few). Two mbarriers per slot: `full` (the TMA's bytes
// landed: one arrival with the transaction count) and `empty` (every consumer warp's wgmma that read the slot
// has retired: BM / 64 * 4 arrivals, one per warp after its wgmma.wait_group). No __syncthreads in the k loop:
// kStages - 1 stages stay in flight. tf32: each consumer warpgroup rounds its own 64 rows of the activations
// in shared memory (then fence.proxy.async and a warpgroup barrier) before it multiplies them.
// One block per SM (4-8 stages fill the shared memory) or two; threads: BM / 64 * 128 + 128.
template <int BM, int BN, int ST>
constexpr int ws_smem_bytes() {
  return ST * (BM + BN) * kRowBytes + 2 * ST * 8 + kAtomBytes;  // + full and empty mbarriers, + the slack
}
// Two blocks per SM where the shared memory allows (a block's epilogue then overlaps the other's loop).
template <int BM, int BN, int ST>
constexpr int ws_min_blocks() {
  return (227 * 1024) / ws_smem_bytes<BM, BN, ST>() >= 2 ? 2 : 1;
}

template <typename T, int BM, int BN, int kStages>
__global__ void __launch_bounds__(BM / 64 * 128 + 128, (ws_min_blocks<BM, BN, kStages>())) igemm_wgmma_ws_kernel(const TcArgs a, const __grid_constant__ CUtensorMap wmap,
                                                                            const __grid_constant__ CUtensorMap amap) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kThreads = BM / 64 * 128;  // the consumers; the producer warpgroup is tid kThreads..+127
  constexpr int kConsumerWarps = kThreads / 32;
  constexpr bool kTf32 = std::is_same_v<T, float>;
  constexpr int kBke = bke_of(int(sizeof(T)));
  constexpr int WN = BN < 256 ? BN : 256, NB = BN / WN;
  constexpr int kAStage = BM * kRowBytes, kStageBytes = (BM + BN) * kRowBytes;
  static_assert(kStages >= 2, "one stage multiplied while the next loads");
  static_assert(BN % WN == 0 && (WN == 64 || WN == 128 || WN == 256), "wgmma n64, n128 or n256");

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = uint32_t(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = (kAtomBytes - (raw & (kAtomBytes - 1))) & (kAtomBytes - 1);
  const uint32_t smem_base = raw + pad;
  unsigned char* smem = smem_raw + pad;
  const uint32_t full = smem_base + kStages * kStageBytes, empty = full + 8 * kStages;

  const int tid = threadIdx.x, wg = tid / 128;
  const BlockPos pos = block_pos<BM, BN>(a);
  const int split = pos.split, g = pos.g, b = pos.b, n_block = pos.n_block;
  const int64_t m_block = pos.m_block;
  const int kt0 = split * a.tiles_per_split;
  const int nk = min(a.num_k_tiles - kt0, a.tiles_per_split);

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, kConsumerWarps);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (tid >= kThreads) {
    // ---- the producer: one thread issues every load.
    if (tid != kThreads) return;
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wmap)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&amap)) : "memory");
    TapWalk tw;
    tw.start(a, kt0 * kBke);
    const int b_row0 = (a.nb > 1 ? b * a.K : 0) + g * a.Kpg + n_block;
    const int a_row0 = int(int64_t(b) * a.Mb + m_block);
    int i2c_w = 0, i2c_h = 0, i2c_n = 0;
    if (a.a_im2col) im2col_origin(a, int64_t(b) * a.Mb + m_block, i2c_w, i2c_h, i2c_n);
    for (int kt = 0; kt < nk; ++kt) {
      const int slot = kt % kStages;
      if (kt >= kStages) mbar_wait(empty + 8 * slot, uint32_t((kt / kStages) - 1) & 1);
      const uint32_t sA = smem_base + slot * kStageBytes, bar = full + 8 * slot;
      mbar_arrive_expect_tx(bar, uint32_t(kStageBytes));
      tma_load_2d(sA + kAStage, &wmap, (kt0 + kt) * kBke, b_row0, bar);
      if (a.a_im2col) {
        tma_load_im2col(sA, &amap, g * a.Cg + tw.c, i2c_w, i2c_h, i2c_n, uint16_t(tw.s * a.dil_w),
                        uint16_t(tw.r * a.dil_h), bar);
        tw.advance(a, kBke);
      } else {
        tma_load_2d(sA, &amap, (kt0 + kt) * kBke, a_row0, bar);
      }
    }
    return;
  }

  // ---- the consumers.
  float acc[NB][WN / 2];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int e = 0; e < WN / 2; ++e) acc[nb][e] = 0.0f;
  const uint32_t a_wg = uint32_t(wg) * 64 * kRowBytes;
  // NOTE: a do-while (nk >= 1: the host leaves no split empty): with a loop that may run zero times, the
  // accumulators' zeroing on the skipping path made ptxas serialize every wgmma (warning C7515).
  int kt = 0;
  do {
    const int slot = kt % kStages;
    const uint32_t sA = smem_base + slot * kStageBytes;
    mbar_wait(full + 8 * slot, uint32_t(kt / kStages) & 1);
    // (returns when stage kt-1's multiply has retired: its slot may be refilled)
    if constexpr (kTf32)  // (the weights were rounded before the launch)
      multiply_stage_tf32_rs<WN, NB>(acc, sA + a_wg + uint32_t((tid >> 5) & 3) * 16 * kRowBytes,
                                     smem_desc(sA + kAStage), tid & 31);
    else
      multiply_stage<T, WN, NB>(acc, smem_desc(sA + a_wg), smem_desc(sA + kAStage));
    mbar_arrive_if(empty + 8 * ((kt + kStages - 1) % kStages), kt > 0 && (tid & 31) == 0);
  } while (++kt < nk);
  wgmma_wait<0>();
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) fence_accumulators(acc[nb]);
  // Every load was awaited: no TMA writes into the slots any more; once every consumer is here, none reads them.
  named_barrier(5, kThreads);
  wgmma_epilogue<T, BM, BN, kStages * kStageBytes, kThreads>(a, acc, smem, m_block, n_block, b, g, split, tid,
                                                            [] { named_barrier(5, kThreads); });
#else
  __trap();
#endif
}

// ---- the persistent kernel (activations and output by TMA) ------------------------------------------------
// What it adds to the warp-specialized kernel (one idea: a tile's epilogue overlapped with the next tile's
// loads and multiplies): one block per SM walks the output tiles (tile t = blockIdx.x, + gridDim.x, ...; n
// fastest, so that neighbouring blocks read the same activation rows while they are in L2); its producer
// thread keeps loading stages across the tiles' boundaries, and each consumer warpgroup writes its 64 rows
// of a finished tile into a staging buffer of shared memory, in the output tensor map's 128-byte swizzle (a
// warp's 32-bit writes fall on 32 banks), whence one of its threads stores them by TMA; the warpgroup goes
// straight on to the next tile, whose first stages have arrived meanwhile. Each warpgroup has two staging
// buffers, used by alternate tiles: a buffer is written again once the store from it two tiles before has
// read it (bulk wait_group.read 1, at the tile's start: in practice long done).
// Why: the 1x1 layers that widen the channels are output-bound (1x1 64->256 at 56x56 writes 4x what it
// reads), and the other kernels' blocks each stop for their epilogue's stores: 0.52x cuDNN there.
// Scope: 16-bit types, one group, no split-K (the planner offers its tiles only then); per-sample weights
// too (the tiles of image b after those of image b-1; the output map is 3-D, [N][P*Q][K], so that a tile's
// rows past its image are clipped). Epilogues (out_mode, chosen per launch: persistent_out_mode):
//  - 1, by TMA: alpha * conv (+ bias), none or relu;
//  - 2, by TMA with the residual: as 1, + beta * residual, the residual tile loaded by TMA into the staging
//    buffer at the tile's start (one thread; an mbarrier per buffer), read and overwritten in place by the
//    threads (each reads before it writes the same elements: residual may be dst), stored from there;
//  - 0, the general epilogue (the other activations; an output or residual the tensor maps cannot describe:
//    not 16-byte aligned, K % 8 != 0): fp32 staged in the warpgroup's staging area, stored by the threads
//    (store_output_tile), as the other kernels do.
template <int BN>
constexpr int persistent_staging_bytes() {  // one consumer warpgroup's: 64 rows
  return std::max(2 * 64 * BN * 2, 64 * (BN + 8) * 4);  // two 16-bit buffers, or the general epilogue's fp32 rows
}
template <int BM, int BN, int ST>
constexpr int persistent_smem_bytes() {  // + full, empty and (two per warpgroup) residual mbarriers
  return ST * (BM + BN) * kRowBytes + BM / 64 * persistent_staging_bytes<BN>() + (2 * ST + BM / 32) * 8 + kAtomBytes;
}

template <typename T, int BM, int BN, int kStages>
__global__ void __launch_bounds__(BM / 64 * 128 + 128, 1)
    igemm_wgmma_persistent_kernel(const TcArgs a, const __grid_constant__ CUtensorMap wmap,
                                  const __grid_constant__ CUtensorMap amap, const __grid_constant__ CUtensorMap omap,
                                  const __grid_constant__ CUtensorMap rmap, const int out_mode) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(sizeof(T) == 2, "16-bit types (the TMA store's boxes are 64 elements of 128 bytes)");
  static_assert(BN == 64 || BN == 128, "one wgmma n block");
  constexpr int kThreads = BM / 64 * 128;  // the consumers; the producer warpgroup is tid kThreads..+127
  constexpr int kConsumerWarps = kThreads / 32;
  constexpr int kBke = bke_of(2);
  constexpr int kAStage = BM * kRowBytes, kStageBytes = (BM + BN) * kRowBytes;
  constexpr int kStaging = persistent_staging_bytes<BN>();
  constexpr int kBox = 64 * 128;  // one TMA store box: 64 rows x 64 16-bit columns
  constexpr int kBuf = BN / 64 * kBox;  // one staging buffer: 64 rows x BN
  static_assert(kStaging % kAtomBytes == 0 && 2 * kBuf <= kStaging, "two buffers per staging area, atom-aligned");

  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = uint32_t(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = (kAtomBytes - (raw & (kAtomBytes - 1))) & (kAtomBytes - 1);
  const uint32_t smem_base = raw + pad;
  unsigned char* smem = smem_raw + pad;
  const uint32_t staging = smem_base + kStages * kStageBytes;
  const uint32_t full = staging + BM / 64 * kStaging, empty = full + 8 * kStages;
  const uint32_t res_full = empty + 8 * kStages;  // warpgroup w, buffer u: res_full + 8 * (2w + u)

  const int tid = threadIdx.x, wg = tid / 128;
  const int tiles_n = (a.Kpg + BN - 1) / BN;
  const int64_t tiles_b = (a.Mb + BM - 1) / BM * tiles_n;  // per batch entry
  const int64_t num_tiles = tiles_b * a.nb;                // (the host launches at most this many blocks)
  const int nk = a.num_k_tiles;
  // Tile t: batch entry b (per-sample weights; else 0), rows m_block.., columns n_block.. (n fastest).
  auto tile_at = [&](int64_t t, int& b, int64_t& m_block, int& n_block) {
    b = int(t / tiles_b);
    const int64_t r = t - int64_t(b) * tiles_b;
    m_block = r / tiles_n * BM;
    n_block = int(r % tiles_n) * BN;
  };

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, kConsumerWarps);
    }
    for (int s = 0; s < BM / 32; ++s) mbar_init(res_full + 8 * s, 1);
    mbar_init_fence();
  }
  __syncthreads();

  // The slots are used in turn across tiles: (slot, phase) counts the uses, phase = the round's parity.
  int slot = 0;
  uint32_t phase = 0;
  auto next_slot = [&] {
    slot = slot + 1 == kStages ? 0 : slot + 1;
    phase ^= slot == 0 ? 1u : 0u;
  };

  if (tid >= kThreads) {
    // ---- the producer: one thread issues every load of every tile.
    if (tid != kThreads) return;
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wmap)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&amap)) : "memory");
    bool wrapped = false;  // every slot used once: from then on a slot is refilled after its release
    for (int64_t t = blockIdx.x; t < num_tiles; t += gridDim.x) {
      int b, n_block;
      int64_t m_block;
      tile_at(t, b, m_block, n_block);
      const int b_row0 = b * a.K + n_block;  // (b > 0 only with per-sample weights: the map spans N*K rows)
      const int64_t a_row0 = int64_t(b) * a.Mb + m_block;
      TapWalk tw;
      tw.start(a, 0);
      int i2c_w = 0, i2c_h = 0, i2c_n = 0;
      if (a.a_im2col) im2col_origin(a, a_row0, i2c_w, i2c_h, i2c_n);
      for (int kt = 0; kt < nk; ++kt) {
        if (wrapped) mbar_wait(empty + 8 * slot, phase ^ 1u);
        const uint32_t sA = smem_base + slot * kStageBytes, bar = full + 8 * slot;
        mbar_arrive_expect_tx(bar, uint32_t(kStageBytes));
        tma_load_2d(sA + kAStage, &wmap, kt * kBke, b_row0, bar);
        if (a.a_im2col) {
          tma_load_im2col(sA, &amap, tw.c, i2c_w, i2c_h, i2c_n, uint16_t(tw.s * a.dil_w), uint16_t(tw.r * a.dil_h),
                          bar);
          tw.advance(a, kBke);
        } else {
          tma_load_2d(sA, &amap, kt * kBke, int(a_row0), bar);  // (a matrix of < 2^31 rows: a_load_of)
        }
        next_slot();
        wrapped = wrapped || slot == 0;
      }
    }
    return;
  }

  // ---- the consumers.
  const int lt = tid & 127;  // the thread's place in its warpgroup
  const int wq = lt >> 5, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
  const uint32_t a_wg = uint32_t(wg) * 64 * kRowBytes;
  const uint32_t area = staging + uint32_t(wg) * kStaging;  // this warpgroup's staging area
  const T* bias = static_cast<const T*>(a.bias);
  const bool relu = a.act == Activation::relu;
  int tl = 0;  // the block's tiles so far: buffer tl & 1, its residual barrier's parity (tl >> 1) & 1
  for (int64_t t = blockIdx.x; t < num_tiles; t += gridDim.x, ++tl) {
    int b, n_block;
    int64_t m_block;
    tile_at(t, b, m_block, n_block);
    const uint32_t buf = area + uint32_t(tl & 1) * kBuf, rbar = res_full + 8 * uint32_t(2 * wg + (tl & 1));
    const int row0 = int(m_block) + wg * 64;  // (out_mode > 0: Mb < 2^31)
    if (out_mode > 0 && lt == 0) {
      bulk_wait_read<1>();  // the store from this buffer (two tiles ago) has read it
      if (out_mode == 2) {
        mbar_arrive_expect_tx(rbar, uint32_t(kBuf));
#pragma unroll
        for (int box = 0; box < BN / 64; ++box) tma_load_3d(buf + box * kBox, &rmap, n_block + box * 64, row0, b, rbar);
      }
    }
    float acc[1][BN / 2];
#pragma unroll
    for (int e = 0; e < BN / 2; ++e) acc[0][e] = 0.0f;
    int kt = 0, prev = 0;
    do {  // (nk >= 1; a do-while, as in the warp-specialized kernel)
      const uint32_t sA = smem_base + slot * kStageBytes;
      mbar_wait(full + 8 * slot, phase);
      multiply_stage<T, BN, 1>(acc, smem_desc(sA + a_wg), smem_desc(sA + kAStage));
      mbar_arrive_if(empty + 8 * prev, kt > 0 && lane == 0);  // (the stage before has retired)
      prev = slot;
      next_slot();
    } while (++kt < nk);
    wgmma_wait<0>();
    fence_accumulators(acc[0]);
    mbar_arrive_if(empty + 8 * prev, lane == 0);

    if (out_mode > 0) {
      if (out_mode == 2)
        mbar_wait(rbar, uint32_t(tl >> 1) & 1);  // the residual tile is in the buffer
      else
        named_barrier(1 + wg, 128);  // (thread 0's wait above covers the whole warpgroup)
      // NOTE: at k = 64 (1x1 64->256) these instructions are most of a tile's and set its pace: everything
      // that does not change per pair outside the pair loop (alpha, the bias row, the addresses), one load
      // per bias pair, one conversion per output pair, a swizzled address by one XOR.
      if (a.alpha != 1.0f) {
#pragma unroll
        for (int e = 0; e < BN / 2; ++e) acc[0][e] *= a.alpha;  // (apply_epilogue: alpha * conv, then the rest)
      }
      // Row r of a box is 128 bytes, its chunk c at ((c ^ r % 8) << 4): this thread's chunk address is
      // row_addr ^ (c << 4), row_addr holding r % 8 = gq in bits 4-6 and the thread's column pair in bits 2-3.
      const uint32_t row_addr = buf + uint32_t(wq * 16 + gq) * kRowBytes + uint32_t(gq << 4) + uint32_t(tq * 4);
      const T* bias_row = bias == nullptr ? nullptr : bias + int64_t(b) * a.bias_b_stride + n_block + tq * 2;
      auto write_tile = [&](auto with_residual) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          float2 bj = make_float2(0.0f, 0.0f);  // (K % 8 == 0: a pair lies inside K or past it)
          if (bias_row != nullptr && n_block + j * 8 < a.Kpg)
            bj = unpack2<T>(*reinterpret_cast<const uint32_t*>(bias_row + j * 8));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t addr =
                ((row_addr + uint32_t(h * 8 * kRowBytes)) ^ uint32_t((j % 8) << 4)) + uint32_t(j / 8 * kBox);
            float y0 = acc[0][4 * j + 2 * h] + bj.x, y1 = acc[0][4 * j + 2 * h + 1] + bj.y;
            if constexpr (decltype(with_residual)::value) {  // (read before this thread writes the same pair)
              const float2 r = unpack2<T>(lds32(addr));
              y0 += a.beta * r.x, y1 += a.beta * r.y;
            }
            if (relu) y0 = fmaxf(y0, 0.0f), y1 = fmaxf(y1, 0.0f);
            sts32(addr, pack2<T>(y0, y1));
          }
        }
      };
      if (out_mode == 2)
        write_tile(std::true_type{});
      else
        write_tile(std::false_type{});
      fence_proxy_async();  // (the writes, visible to the TMA)
      named_barrier(1 + wg, 128);
      if (lt == 0) {
#pragma unroll
        for (int box = 0; box < BN / 64; ++box)
          if (n_block + box * 64 < a.K) tma_store_3d(&omap, buf + box * kBox, n_block + box * 64, row0, b);
        bulk_commit();
      }
    } else {
      constexpr int CS = BN + 8;  // (as wgmma_epilogue's general form)
      float* ctile = reinterpret_cast<float*>(smem + (area - smem_base));
      named_barrier(1 + wg, 128);  // (every thread of the warpgroup is done with the last tile's)
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int col = j * 8 + tq * 2, r = wq * 16 + gq;
        *reinterpret_cast<float2*>(&ctile[r * CS + col]) = make_float2(acc[0][4 * j], acc[0][4 * j + 1]);
        *reinterpret_cast<float2*>(&ctile[(r + 8) * CS + col]) = make_float2(acc[0][4 * j + 2], acc[0][4 * j + 3]);
      }
      named_barrier(1 + wg, 128);
      store_output_tile<T, 64, BN, 128>(a, ctile, CS, m_block + wg * 64, n_block, b, 0, 0, lt, false);
    }
  }
  if (out_mode > 0 && lt == 0) bulk_wait_all<0>();  // (the last stores complete before the block retires)
#else
  __trap();
#endif
}

// tf32: the weights rounded once per call, into the workspace (the kernel's TMA reads them from there).
__global__ void __launch_bounds__(256) round_to_tf32_kernel(const uint4* __restrict__ in, uint4* __restrict__ out,
                                                            int64_t n4) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = in[i];
    out[i] = make_uint4(tf32_rne_bits(v.x), tf32_rne_bits(v.y), tf32_rne_bits(v.z), tf32_rne_bits(v.w));
  }
#endif
}

// ---- tiles and plans -------------------------------------------------------------------------------

PFN_cuTensorMapEncodeIm2col_v12000 im2col_map_encoder() {
  static const auto fn = driver_function<PFN_cuTensorMapEncodeIm2col_v12000>("cuTensorMapEncodeIm2col");
  return fn;
}
// of one stage's k x box_rows rows, 128-byte swizzle (the layout the threads' gather writes).
CUtensorMap activation_map(const TcArgs& a, DType dt, int box_rows) {
  CUtensorMap map;
  const int es = int(dtype_size(dt));
  const cuuint64_t dims[2] = {cuuint64_t(a.C), cuuint64_t(a.Mtot)};
  const cuuint64_t strides[1] = {cuuint64_t(a.C) * es};  // (C*es % 16 == 0, see can_implement)
  const cuuint32_t box[2] = {cuuint32_t(bke_of(es)), cuuint32_t(box_rows)};
  const cuuint32_t estrides[2] = {1, 1};
  const CUtensorMapDataType type = dt == DType::f16    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : dt == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUresult r = tensor_map_encoder()(&map, type, 2, const_cast<void*>(a.src), dims, strides, box, estrides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(StatusCode::cuda_error, "cuda_igemm_wgmma: cuTensorMapEncodeTiled failed (CUresult " +
                                            std::to_string(int(r)) + ") for the activations [" +
                                            std::to_string(a.Mtot) + "][" + std::to_string(a.C) + "].");
  return map;
}

// The output (or the residual, of the same shape) of the persistent tiles as the 3-D tensor [nb][Mb][K] (one
// group, 16-bit; nb = N with per-sample weights, else 1), boxes of 64 rows x 64 channels (128 bytes) of one
// batch entry in the 128-byte swizzle (the staging buffers' layout): a box's rows past its image are
// neither written nor read (zeros).
CUtensorMap output_map(const TcArgs& a, DType dt, const void* data, const char* what) {
  CUtensorMap map;
  const cuuint64_t dims[3] = {cuuint64_t(a.K), cuuint64_t(a.Mb), cuuint64_t(a.nb)};
  const cuuint64_t strides[2] = {cuuint64_t(a.K) * 2, cuuint64_t(a.Mb) * a.K * 2};  // (K % 8 == 0: persistent_out_mode)
  const cuuint32_t box[3] = {64, 64, 1};
  const cuuint32_t estrides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(
      &map, dt == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
      const_cast<void*>(data), dims, strides, box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(StatusCode::cuda_error, std::string("cuda_igemm_wgmma: cuTensorMapEncodeTiled failed (CUresult ") +
                                            std::to_string(int(r)) + ") for the " + what + " [" +
                                            std::to_string(a.nb) + "][" + std::to_string(a.Mb) + "][" +
                                            std::to_string(a.K) + "].");
  return map;
}
// The persistent kernel's epilogue (its out_mode): 1 (by TMA) or 2 (by TMA, the residual too) where the
// activation is none or relu and the tensor maps can describe the output and the residual (16-byte aligned,
// K % 8 == 0, 32-bit row coordinates; the bias 4-byte aligned); else 0 (the threads store, as the other
// kernels).
int persistent_out_mode(const TcArgs& a) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if ((a.act != Activation::none && a.act != Activation::relu) || a.K % 8 != 0 || !aligned(a.dst) || a.Mb > INT_MAX ||
      reinterpret_cast<uintptr_t>(a.bias) % 4 != 0)  // (the bias read in pairs)
    return 0;
  if (a.residual == nullptr) return 1;
  return aligned(a.residual) ? 2 : 0;
}

// The activations of any other convolution whose stages each lie inside one filter tap (C/groups a multiple
// of one stage's 128 bytes of k) as the 4-D tensor [N][H][W][C] in the TMA's im2col mode: boxes of box_rows
// output pixels x 128 bytes of channels. The pixel box is where the traversal's window origins lie (the
// first output pixel's origin is -pad, the last one's (P-1)*stride - pad: the upper corner is that minus
// H-1), the element strides are the convolution's, and a load adds its tap's offsets (r*dil, s*dil).
// Corners are listed innermost dimension first (W, then H), as the dimensions.
CUtensorMap im2col_map(const TcArgs& a, DType dt, int box_rows) {
  CUtensorMap map;
  const int es = int(dtype_size(dt));
  const int64_t n_img = a.Mtot / a.PQ, P = a.PQ / a.Q;
  const cuuint64_t dims[4] = {cuuint64_t(a.C), cuuint64_t(a.W), cuuint64_t(a.H), cuuint64_t(n_img)};
  const cuuint64_t strides[3] = {cuuint64_t(a.C) * es, cuuint64_t(a.W) * a.C * es, cuuint64_t(a.H) * a.W * a.C * es};
  const int lower[2] = {-a.pad_w, -a.pad_h};
  const int upper[2] = {(a.Q - 1) * a.stride_w - a.pad_w - (a.W - 1), int(P - 1) * a.stride_h - a.pad_h - (a.H - 1)};
  const cuuint32_t estrides[4] = {1, cuuint32_t(a.stride_w), cuuint32_t(a.stride_h), 1};
  const CUtensorMapDataType type = dt == DType::f16    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                   : dt == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUresult r = im2col_map_encoder()(&map, type, 4, const_cast<void*>(a.src), dims, strides, lower, upper,
                                          cuuint32_t(bke_of(es)), cuuint32_t(box_rows), estrides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(StatusCode::cuda_error, "cuda_igemm_wgmma: cuTensorMapEncodeIm2col failed (CUresult " +
                                            std::to_string(int(r)) + ") for the activations [" +
                                            std::to_string(n_img) + "][" + std::to_string(a.H) + "][" +
                                            std::to_string(a.W) + "][" + std::to_string(a.C) + "].");
  return map;
}

// How A reaches shared memory (TcArgs::a_by_tma, a_im2col).
//  - as a plain matrix, by TMA: 1x1, stride 1, no padding, one group, fewer than 2^31 pixels (32-bit box
//    coordinates);
//  - by the TMA's im2col mode: every stage inside one filter tap (C/groups % 64 for 16-bit types, % 32 for
//    tf32), and the geometry inside what the tensor map encodes: pixel-box corners in [-128, 127], strides
//    <= 8, tap offsets below 128 (this kernel's limit; the PTX offsets are 16-bit), 32-bit coordinates;
//  - gathered by the threads (cp.async) otherwise.
// CONVKIT_WGMMA_A_TMA=0 turns both TMA forms off, CONVKIT_WGMMA_IM2COL=0 the second (for comparisons).
enum class ALoad { gather, matrix, im2col };
ALoad a_load_of(const Conv2dProblem& p, DType dt) {
  static const bool tma_on = [] {
    const char* e = std::getenv("CONVKIT_WGMMA_A_TMA");
    return e == nullptr || std::string(e) != "0";
  }();
  static const bool im2col_on = [] {
    const char* e = std::getenv("CONVKIT_WGMMA_IM2COL");
    return e == nullptr || std::string(e) != "0";
  }();
  if (!tma_on) return ALoad::gather;
  if (p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0 && p.groups == 1 &&
      p.n * p.h * p.w < (int64_t(1) << 31))
    return ALoad::matrix;
  if (!im2col_on || p.c_per_group() % bke_of(int(dtype_size(dt))) != 0) return ALoad::gather;
  auto corner_ok = [](int64_t v) { return v >= -128 && v <= 127; };
  const int64_t up_w = (p.q() - 1) * p.stride_w - p.pad_w - (p.w - 1);
  const int64_t up_h = (p.p() - 1) * p.stride_h - p.pad_h - (p.h - 1);
  if (!corner_ok(-p.pad_w) || !corner_ok(-p.pad_h) || !corner_ok(up_w) || !corner_ok(up_h)) return ALoad::gather;
  if (p.stride_h > 8 || p.stride_w > 8) return ALoad::gather;
  if ((p.r - 1) * p.dilation_h > 127 || (p.s - 1) * p.dilation_w > 127) return ALoad::gather;
  if (p.n > INT_MAX || p.c > INT_MAX) return ALoad::gather;
  return ALoad::im2col;
}
bool a_by_tma(const Conv2dProblem& p, DType dt) { return a_load_of(p, dt) != ALoad::gather; }
void set_a_load(TcArgs& a, const Conv2dProblem& p, DType dt) {
  const ALoad l = a_load_of(p, dt);
  a.a_by_tma = l != ALoad::gather;
  a.a_im2col = l == ALoad::im2col;
}

// A kernel of the table: the gathering one (kWs false) or the warp-specialized one, its threads and its
// dynamic shared memory.
using KernelFn = void (*)(const TcArgs, const CUtensorMap, const CUtensorMap);
template <typename T, int BM, int BN, int ST, bool kWs>
constexpr KernelFn kernel_fn() {
  if constexpr (kWs)
    return igemm_wgmma_ws_kernel<T, BM, BN, ST>;
  else
    return igemm_wgmma_kernel<T, BM, BN, ST>;
}
template <typename T, int BM, int BN, int ST, bool kWs>
struct KernelOf {
  static constexpr KernelFn fn = kernel_fn<T, BM, BN, ST, kWs>();
  static constexpr int threads = BM / 64 * 128 + (kWs ? 128 : 0);
  static constexpr int smem = kWs ? ws_smem_bytes<BM, BN, ST>() : smem_bytes<BM, BN, ST>();
};

template <typename T, int BM, int BN, int ST, bool kWs>
void prepare_kernel() {
  using K = KernelOf<T, BM, BN, ST, kWs>;
  static std::atomic<bool> done{false};
  if (!done.load(std::memory_order_acquire)) {
    CK_CUDA(cudaFuncSetAttribute(K::fn, cudaFuncAttributeMaxDynamicSharedMemorySize, K::smem));
    done.store(true, std::memory_order_release);
  }
}

template <typename T, int BM, int BN, int ST, bool kWs>
void launch_tile(const TcArgs& a, dim3 grid, cudaStream_t stream, bool /*aligned: always, see run()*/) {
  using K = KernelOf<T, BM, BN, ST, kWs>;
  prepare_kernel<T, BM, BN, ST, kWs>();
  const DType dt = std::is_same_v<T, __half> ? DType::f16 : std::is_same_v<T, float> ? DType::f32 : DType::bf16;
  const CUtensorMap map = weight_map(a, dt, BN);
  const CUtensorMap amap = a.a_im2col   ? im2col_map(a, dt, BM)
                           : a.a_by_tma ? activation_map(a, dt, BM)
                                        : map;  // (unread unless a_by_tma)
  if (a.tile_counts == nullptr) {
    K::fn<<<grid, K::threads, K::smem, stream>>>(a, map, amap);
    return;
  }
  // Split-K summed in the kernel: the splits of a tile wait for each other, so every block must be resident
  // at once (a cooperative launch refuses a grid that cannot be).
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(unsigned(K::threads));
  cfg.dynamicSmemBytes = size_t(K::smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CK_CUDA(cudaLaunchKernelEx(&cfg, K::fn, a, map, amap));
}

// A persistent tile: one block per SM (at most one per output tile), each walking the tiles; the planner
// hands it grids of one group and one split (grid.z = the batch entries).
template <typename T, int BM, int BN, int ST>
void launch_persistent_tile(const TcArgs& a, dim3 grid, cudaStream_t stream, bool /*aligned*/) {
  constexpr auto fn = igemm_wgmma_persistent_kernel<T, BM, BN, ST>;
  constexpr int threads = BM / 64 * 128 + 128, smem = persistent_smem_bytes<BM, BN, ST>();
  static std::atomic<bool> prepared{false};
  if (!prepared.load(std::memory_order_acquire)) {
    CK_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    prepared.store(true, std::memory_order_release);
  }
  const DType dt = std::is_same_v<T, __half> ? DType::f16 : DType::bf16;
  const CUtensorMap map = weight_map(a, dt, BN);
  const CUtensorMap amap = a.a_im2col ? im2col_map(a, dt, BM) : activation_map(a, dt, BM);
  const int out_mode = persistent_out_mode(a);
  const CUtensorMap omap = out_mode > 0 ? output_map(a, dt, a.dst, "output") : map;  // (unread in mode 0)
  const CUtensorMap rmap = out_mode == 2 ? output_map(a, dt, a.residual, "residual") : map;  // (only in mode 2)
  // CONVKIT_WGMMA_PERSISTENT_BLOCKS=n caps the grid (the GPU check runs the tensor-core sweeps with 1: one
  // block then walks every tile of a problem, its slots and staging areas reused across tiles).
  static const int cap = [] {
    const char* e = std::getenv("CONVKIT_WGMMA_PERSISTENT_BLOCKS");
    return e != nullptr && std::atoi(e) > 0 ? std::atoi(e) : INT_MAX;
  }();
  const int64_t tiles = int64_t(grid.x) * grid.y * grid.z;
  const unsigned blocks = unsigned(std::min<int64_t>({tiles, sm_count_of_current_device(), cap}));
  fn<<<blocks, threads, smem, stream>>>(a, map, amap, omap, rmap, out_mode);
}
int one_block_per_sm() { return 1; }

template <typename T, int BM, int BN, int ST, bool kWs>
int blocks_per_sm_of_tile() {
  using K = KernelOf<T, BM, BN, ST, kWs>;
  static std::atomic<int> cached{0};
  int n = cached.load(std::memory_order_relaxed);
  if (n == 0) {
    prepare_kernel<T, BM, BN, ST, kWs>();
    CK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, K::fn, K::threads, K::smem));
    n = std::max(n, 1);
    cached.store(n, std::memory_order_relaxed);
  }
  return n;
}

constexpr int kNumGatherTiles = 8;  // the first tiles of the table: the gathering kernel's
constexpr int kNumTiles = 13;       // then the warp-specialized and persistent kernels' (activations by TMA only)
// The tiles of T's table: after the gathering and warp-specialized ones, 128x256 warp-specialized for tf32,
// the two persistent tiles for 16-bit types.
// NOTE: 128x256 warp-specialized in 16-bit types spilled 32 bytes (the short epilogue's registers on top of
// 128 accumulators within 168 registers), as did 256x128 (640 threads: at most 96 registers each); neither
// is built.
template <typename T>
constexpr int num_tiles() {
  return std::is_same_v<T, float> ? kNumTiles - 1 : kNumTiles;
}
// The table's last two entries: (tf32) 128x256 warp-specialized and a copy of it, never offered; (16-bit)
// the persistent tiles, a wave being one tile per SM.
// NOTE: the persistent tiles' costs are a least-squares fit (relative error) to `convkit tune --verbose` on
// bf16 ResNet-50 (H200, 2026-11-30, tenth session; median error 6-10%); with them the picks are within 1.4%
// of the best measured variant (geomean; the picks without these tiles: 15% slower than that best).
template <typename T>
Tile extra_tile(int i) {
  if constexpr (std::is_same_v<T, float>)
    return {128, 256, 12, 7.51, 0.89 * 0.8, launch_tile<T, 128, 256, 4, true>, blocks_per_sm_of_tile<T, 128, 256, 4, true>, 4};
  else if (i == 0)
    return {128, 128, 12, 2.03, 0.518, launch_persistent_tile<T, 128, 128, 4>, one_block_per_sm, 4, true};
  else
    return {128, 64, 12, 0.99, 0.397, launch_persistent_tile<T, 128, 64, 6>, one_block_per_sm, 6, true};
}

template <typename T>
const std::array<Tile, kNumTiles>& tiles() {
  // 1, 2 or 4 warpgroups of 64 rows. 4 stages: one block per SM (128x256, 256x128, 128x128), two (128x64,
  // 64x128) or three (64x64). 3 stages (one load ahead), compiled for two 128x128 or three 128x64 blocks
  // per SM (__launch_bounds__: <= 128 and <= 85 registers): a block's epilogue and pipeline fill overlap
  // another's multiplies. They win on most layers with k <= 1152 (bf16 ResNet-50: 0.68x -> 0.69x cuDNN
  // for this kernel alone, 1x1 64->64 at 56x56 0.0207 -> 0.0165 ms).
  // NOTE: 3 stages for 128x128 once ran 33% slower (3x3 256@14): without the register bound the compiler
  // used more than 128 registers, so the second block never fitted.
  // NOTE: wave_us and slice_us (per 128-byte k stage) are a least-squares fit (relative error) of 191 bf16
  // timings of every variant on the ResNet-50 and seed layers (H200, 2026-11-29, `convkit tune --verbose`;
  // median error 6-12% per tile; the picks are within 2% of the best measured variant in geomean). tf32 and
  // f16 use the same costs.
  // NOTE: tf32 on the warp-specialized tiles rounds the activations in registers (multiply_stage_tf32_rs):
  // their per-slice cost is 0.8x the 16-bit fit in tf32 (grid search, as tile_set()'s split costs).
  constexpr double kWsTf32 = std::is_same_v<T, float> ? 0.8 : 1.0;
  static const std::array<Tile, kNumTiles> t = {{
      {128, 128, 8, 5.28, 0.564, launch_tile<T, 128, 128, 4, false>, blocks_per_sm_of_tile<T, 128, 128, 4, false>},
      {128, 256, 8, 7.51, 0.955, launch_tile<T, 128, 256, 4, false>, blocks_per_sm_of_tile<T, 128, 256, 4, false>},
      {256, 128, 16, 7.36, 1.075, launch_tile<T, 256, 128, 4, false>, blocks_per_sm_of_tile<T, 256, 128, 4, false>},
      {128, 64, 8, 5.55, 0.638, launch_tile<T, 128, 64, 4, false>, blocks_per_sm_of_tile<T, 128, 64, 4, false>},
      {64, 128, 4, 5.24, 0.558, launch_tile<T, 64, 128, 4, false>, blocks_per_sm_of_tile<T, 64, 128, 4, false>},
      {64, 64, 4, 4.12, 0.612, launch_tile<T, 64, 64, 4, false>, blocks_per_sm_of_tile<T, 64, 64, 4, false>},
      {128, 128, 8, 6.84, 1.056, launch_tile<T, 128, 128, 3, false>, blocks_per_sm_of_tile<T, 128, 128, 3, false>, 3},
      {128, 64, 8, 6.44, 1.116, launch_tile<T, 128, 64, 3, false>, blocks_per_sm_of_tile<T, 128, 64, 3, false>, 3},
      // Warp-specialized (w = consumer warps + the producer warpgroup's 4): 8, 6 and 4 stages fill one SM's shared memory;
      // 4 stages of 128x64 leave room for a second block.
      // NOTE: their costs are fitted the same way to the bf16 and f16 timings of `convkit tune --verbose`
      // (H200, 2026-11-29, sixth session; median error 9-14%); 128x256w12s4 (tf32 only) has the gathering
      // 128x256's wave part and its slice part times the two kernels' measured tf32 ratio (0.93). The picks are
      // within 2% of the best measured variant (geomean, ResNet-50 bf16, f16 and tf32).
      {128, 64, 12, 2.69, 0.420 * kWsTf32, launch_tile<T, 128, 64, 8, true>, blocks_per_sm_of_tile<T, 128, 64, 8, true>, 8},
      {128, 128, 12, 5.03, 0.495 * kWsTf32, launch_tile<T, 128, 128, 6, true>, blocks_per_sm_of_tile<T, 128, 128, 6, true>, 6},
      {128, 64, 12, 3.66, 0.687 * kWsTf32, launch_tile<T, 128, 64, 4, true>, blocks_per_sm_of_tile<T, 128, 64, 4, true>, 4},
      extra_tile<T>(0),
      extra_tile<T>(1),
  }};
  return t;
}

// The tiles a problem may use: the warp-specialized ones only where A comes by TMA (ws).
// CONVKIT_WGMMA_WS=0 leaves them out (for comparisons).
bool ws_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("CONVKIT_WGMMA_WS");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}
template <typename T>
TileSet tile_set(bool ws) {
  ws = ws && ws_enabled();
  // Split-K: the reduce kernel's costs as cuda_igemm_mma's; summed inside the kernel (one wave at most): 100
  // us per 10^9 outputs x splits and 12 us, chosen (grid search) for the picks against `convkit tune
  // --verbose` on ResNet-50 (H200, 2026-11-29, seventh session): within 1.2% (tf32), 0.5% (bf16, f16) of the
  // best measured variant, geomean. Splits rarely win on this card: the fixed part mostly says so.
  // A last wave under 10% full is charged its fraction: per-sample 3x3 64->64 at 56x56, N = 32 (25 tiles of
  // 128 per image, 800 blocks: 3 waves of 2 x 132 and 8 stragglers) measured 128x64w12s4 at 0.0335 ms and
  // 64x64w4 at 0.0378, which the whole-wave rule chose; no ResNet-50 pick changes.
  return {tiles<T>().data(), ws ? num_tiles<T>() : kNumGatherTiles, kRowBytes, "cuda_igemm_wgmma", "CONVKIT_WGMMA_VARIANT",
          260.0, 8.7, 100.0, 12.0, 0.1};
}

Plan plan_uncached(DType dt, const Shape& s, bool ws, int sms, const std::string& variant) {
  switch (dt) {
    case DType::f16: return choose_plan(tile_set<__half>(ws), s, sms, variant);
    case DType::bf16: return choose_plan(tile_set<__nv_bfloat16>(ws), s, sms, variant);
    case DType::f32: break;
  }
  return choose_plan(tile_set<float>(ws), s, sms, variant);
}
// The plan of a (problem shape, variant), remembered per thread (the last 8): one call of the PyTorch op asks
// for it two or three times (workspace size, then run), each a walk over every tile and split count.
Plan plan_of(DType dt, const Shape& s, bool ws, const std::string& variant) {
  const int sms = sm_count_of_current_device();
  const char* forced = variant.empty() ? std::getenv("CONVKIT_WGMMA_VARIANT") : nullptr;  // (choose_plan's)
  const std::string_view want = forced != nullptr ? std::string_view(forced) : std::string_view(variant);
  struct Entry {
    DType dt;
    Shape s;
    bool ws, forced;
    int sms;
    std::string variant;
    Plan plan;
  };
  thread_local std::array<Entry, 8> memo{};
  thread_local int next = 0;
  for (const Entry& e : memo)
    if (e.plan.tile != nullptr && e.dt == dt && e.ws == ws && e.sms == sms && e.forced == (forced != nullptr) &&
        e.s.Mb == s.Mb && e.s.n == s.n && e.s.G == s.G && e.s.nb == s.nb && e.s.k == s.k && e.s.K == s.K &&
        e.s.es == s.es && e.variant == want)
      return e.plan;
  const Plan p = plan_uncached(dt, s, ws, sms, variant);  // (throws for an unknown variant: nothing stored)
  memo[size_t(next)] = Entry{dt, s, ws, forced != nullptr, sms, std::string(want), p};
  next = (next + 1) % int(memo.size());
  return p;
}

std::vector<Plan> all_plans(DType dt, const Shape& s, bool ws) {
  const int sms = sm_count_of_current_device();
  switch (dt) {
    case DType::f16: return candidate_plans(tile_set<__half>(ws), s, sms);
    case DType::bf16: return candidate_plans(tile_set<__nv_bfloat16>(ws), s, sms);
    case DType::f32: break;
  }
  return candidate_plans(tile_set<float>(ws), s, sms);
}

// The workspace: the split-K partials, the split-K tile counts (one int per output tile, where the kernel
// sums the splits), then (tf32) the weights rounded to tf32, each at the first 256-byte boundary after what
// comes before (whatever the workspace's own alignment: 256 bytes of slack each).
size_t tile_counts_bytes(const Plan& plan) {
  return plan.sums_in_kernel ? size_t(plan.blocks / plan.splits) * sizeof(int) : 0;
}
size_t total_workspace(const Conv2dProblem& p, DType dt, const Plan& plan) {
  size_t n = plan.ws_bytes;
  if (plan.sums_in_kernel) n += 256 + tile_counts_bytes(plan);
  if (dt == DType::f32) n += 256 + size_t(p.k) * size_t(p.gemm_k()) * sizeof(float);
  return n;
}
void* align_up_256(uintptr_t v) { return reinterpret_cast<void*>((v + 255) / 256 * 256); }
int* tile_counts_of(void* workspace, const Plan& plan) {
  return static_cast<int*>(align_up_256(reinterpret_cast<uintptr_t>(workspace) + plan.ws_bytes));
}
void* tf32_weights_of(void* workspace, const Plan& plan) {
  if (!plan.sums_in_kernel) return align_up_256(reinterpret_cast<uintptr_t>(workspace) + plan.ws_bytes);
  return align_up_256(reinterpret_cast<uintptr_t>(tile_counts_of(workspace, plan)) + tile_counts_bytes(plan));
}


// Per-sample weights (conv2d_per_sample): one launch over the batch, grid.z walks the samples, the weights'
// tensor map spans all N*K filter rows.
void run_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei, const TensorView& dst,
                    const Epilogue& e, void* stream) {
  // NOTE: never split k here (as cuda_igemm_mma's per-sample mode): the batch already gives N times the
  // blocks of one image, and a per-sample call has no workspace.
  const DType dt = src.dtype;
  const Shape s = shape_of(p, dt, true);
  const bool ws = a_by_tma(p, dt);
  Plan plan = plan_of(dt, s, ws, "");
  if (plan.splits > 1) plan = plan_of(dt, s, ws, plan.tile->name() + "/k1");
  check_residual_overlap(e.residual, dst.data, dst.bytes());
  TcArgs a = make_tc_args(p, true, src, wei, dst, e, 1, plan.num_k_tiles, plan.num_k_tiles, nullptr,
                          bke_of(int(dtype_size(dt))));
  set_a_load(a, p, dt);
  const Tile& t = *plan.tile;
  const dim3 grid(unsigned(ceil_div(a.Mb, t.bm)), unsigned(ceil_div(a.Kpg, t.bn)), unsigned(int64_t(a.nb) * a.G));
  t.launch(a, grid, as_stream(stream), true);
  CK_LAUNCH("igemm_wgmma_kernel (per-sample)");
}

class CudaIgemmWgmma final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_igemm_wgmma"; }
  std::string description() const override {
    return "Hopper tensor-core implicit GEMM: wgmma.mma_async from 128-byte-swizzled shared memory, weights by "
           "TMA, activations by TMA (im2col mode; 1x1 as a matrix) or cp.async, 3-8 stages, warp-specialized "
           "variants, split-K, fused epilogue (f16/bf16, tf32; NHWC; sm_90a)";
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (Support ok = require_tensor_core_config(cfg); !ok) return ok;
    // NOTE: C < 8 (the 3-channel stem) once ran here too, input and weights copied with 8 channels first:
    // 0.157 ms on the batch-32 stem in f16 and bf16, the same as cuda_igemm_mma's element gather (2.7x the
    // multiplies, every 16-byte chunk from another pixel), for 25 MiB of workspace. Not kept.
    if (p.c_per_group() % (16 / int(dtype_size(cfg.dtype))) != 0)
      return Support::no(cfg.dtype == DType::f32
                             ? "C/groups must be a multiple of 4 for tf32 (16-byte chunks inside one filter tap); "
                               "cuda_igemm_mma's general-C path runs the others."
                             : "C/groups must be a multiple of 8 (16-byte chunks inside one filter tap); "
                               "cuda_igemm_mma's general-C path runs the others.");
    if (Support ok = tc_limits(p); !ok) return ok;
    if (!cuda_present()) return Support::yes();  // (the device check needs a device; available() says no)
    return require_sm90();
  }
  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    return variant_workspace_bytes(p, cfg, "");
  }
  size_t variant_workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg, const std::string& v) const override {
    if (!cuda_present() || !can_implement(p, cfg)) return 0;
    return total_workspace(p, cfg.dtype, plan_of(cfg.dtype, shape_of(p, cfg.dtype, false), a_by_tma(p, cfg.dtype), v));
  }
  std::vector<std::string> variants(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!cuda_present() || !can_implement(p, cfg)) return {};
    const Shape s = shape_of(p, cfg.dtype, false);
    const bool ws = a_by_tma(p, cfg.dtype);
    const Plan chosen = plan_of(cfg.dtype, s, ws, "");
    std::vector<Plan> all = all_plans(cfg.dtype, s, ws);
    std::sort(all.begin(), all.end(), [](const Plan& x, const Plan& y) { return x.model_us < y.model_us; });
    // The heuristic's choice, then the best-modelled other plans: 14 in all (the tuner's limit is 24 over
    // every algorithm), so that the warp-specialized tiles and the gathering ones are both timed.
    // The persistent tiles always among them (their model is the newest: let the tuner judge).
    std::vector<std::string> out{chosen.variant()};
    auto add = [&](const Plan& q) {
      if (out.size() < 14 && std::find(out.begin(), out.end(), q.variant()) == out.end()) out.push_back(q.variant());
    };
    for (const Plan& q : all)
      if (q.tile->persistent) add(q);
    for (const Plan& q : all) add(q);
    return out;
  }
  std::string detail(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!cuda_present() || !can_implement(p, cfg)) return {};
    const Plan plan = plan_of(cfg.dtype, shape_of(p, cfg.dtype, false), a_by_tma(p, cfg.dtype), "");
    std::string d = "tile " + plan.tile->name();
    if (plan.splits > 1)
      d += ", split-K " + std::to_string(plan.splits) + " (partials " +
           std::to_string((plan.ws_bytes + (1 << 20) - 1) >> 20) + " MiB" +
           (plan.sums_in_kernel ? ", summed in the kernel)" : ", then a reduce kernel)");
    if (const ALoad l = a_load_of(p, cfg.dtype); l != ALoad::gather)
      d += l == ALoad::im2col ? ", activations by TMA (im2col mode)" : ", activations by TMA";
    if (cfg.dtype == DType::f32) d += ", weights rounded to tf32 first";
    return d + ", " + std::to_string(plan.blocks) + " blocks on " + std::to_string(sm_count_of_current_device()) + " SMs";
  }
  // TMA and cp.async read whole 16-byte chunks: the input and the weight must start on a 16-byte boundary
  // (a view into a larger buffer may not). Per-sample weights: f16/bf16, grid.z walks the samples.
  Support accepts(const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops) const override {
    if (ops.operand_align() < 16)
      return Support::no("TMA and cp.async need the input and the weight 16-byte aligned (" + ops.to_string() +
                         "); cuda_igemm_mma's gather path takes them.");
    if (!ops.per_sample) return Support::yes();
    if (cfg.dtype != DType::f16 && cfg.dtype != DType::bf16)
      return Support::no("its per-sample-weights mode computes f16 and bf16 only.");
    if (p.n * p.groups > 65535) return Support::no("per-sample weights: N*groups passes 65535 (grid.z).");
    if (int64_t(p.n) * p.k > INT_MAX) return Support::no("per-sample weights: N*K passes 2^31 (the tensor map's row).");
    return Support::yes();
  }
  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    if (Support ok = accepts(pb, call.config, Operands::of(call.src, call.wei, call.dst, call.epilogue, call.per_sample)); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    if (call.per_sample) {
      run_per_sample(pb, call.src, call.wei, call.dst, call.epilogue, call.stream);
      return;
    }
    const DType dt = call.config.dtype;
    const Plan plan = plan_of(dt, shape_of(pb, dt, false), a_by_tma(pb, dt), call.variant);  // (an unknown variant throws here)
    check_residual_overlap(call.epilogue.residual, call.dst.data, call.dst.bytes());
    const size_t need = total_workspace(pb, dt, plan);
    if (need > 0 && (call.workspace == nullptr || call.workspace_bytes < need))
      throw Error(StatusCode::invalid_tensor, name() + " needs " + std::to_string(need) +
                                                  " bytes of workspace (split-K partials, tf32-rounded weights) "
                                                  "but was given " +
                                                  std::to_string(call.workspace == nullptr ? 0 : call.workspace_bytes) +
                                                  ".");
    TcArgs a = make_tc_args(pb, false, call.src, call.wei, call.dst, call.epilogue, plan.splits,
                            plan.tiles_per_split, plan.num_k_tiles, call.workspace, bke_of(int(dtype_size(dt))));
    set_a_load(a, pb, dt);
    const cudaStream_t stream = as_stream(call.stream);
    if (!tc_operands_aligned(a, dt))  // (accepts() refuses these; the planner then takes cuda_igemm_mma)
      throw Error(StatusCode::unsupported, name() + ": the input and the weight must be 16-byte aligned.");
    if (dt == DType::f32) {
      // tf32: the weights rounded to tf32 once, into the workspace after the partials (the kernel rounds
      // the activations itself, stage by stage in shared memory).
      // NOTE: a pass over the weights per call (at most 9.4 MB in ResNet-50) instead of every block
      // rounding its own copy of every weight stage.
      void* rounded = tf32_weights_of(call.workspace, plan);
      const int64_t n4 = int64_t(pb.k) * pb.gemm_k() / 4;  // (C/groups % 4 == 0)
      const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(n4, 256), 132 * 8));
      round_to_tf32_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint4*>(a.wei),
                                                                      static_cast<uint4*>(rounded), n4);
      CK_LAUNCH("round_to_tf32_kernel");
      a.wei = rounded;
    }
    const Tile& t = *plan.tile;
    if (plan.sums_in_kernel) {
      // Split-K summed by the splits themselves (one wave: every block resident): each output tile's
      // arrival count starts at zero.
      // NOTE: instead of a reduce kernel after the launch: 1x1 2048->512 at 7x7 (tf32, 5 splits) spent
      // 9.2 us of 36 in the reduce (ncu, H200).
      a.tile_counts = tile_counts_of(call.workspace, plan);
      CK_CUDA(cudaMemsetAsync(a.tile_counts, 0, tile_counts_bytes(plan), stream));
    }
    const dim3 grid(unsigned(ceil_div(a.Mb, t.bm)), unsigned(ceil_div(a.Kpg, t.bn)),
                    unsigned(int64_t(a.nb) * a.G * plan.splits));
    t.launch(a, grid, stream, true);
    CK_LAUNCH("igemm_wgmma_kernel");
    if (plan.splits > 1 && !plan.sums_in_kernel) launch_splitk_reduce(a, dt, stream);
  }
};

}  // namespace

const Algorithm* make_cuda_igemm_wgmma() {
  static CudaIgemmWgmma algo;
  return &algo;
}

}  // namespace convkit::detail
