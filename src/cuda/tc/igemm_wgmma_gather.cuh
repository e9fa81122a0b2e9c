// igemm_wgmma_gather.cuh: the gathering kernel of cuda_igemm_wgmma: activations gathered by cp.async (or one TMA box where
// they are a plain matrix or the im2col mode applies), weights by TMA, a multi-stage pipeline of 128-byte
// swizzled stages multiplied by wgmma.mma_async; split-K summed in the kernel or by a reduce kernel.
// Included once, by igemm_wgmma.cu, whose translation unit is built for sm_90a only; that file has the tiles,
// the plans and the launch table.
#pragma once

#include "cuda/common/launch.cuh"
#include "cuda/tc/igemm_tc.cuh"
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
  prefetch_l2_share(a.wei, filter_bytes<T>(a));  // (launch.cuh: a hint, safe before the wait)
  pdl_enter();  // (launch.cuh: before any global access)
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

}  // namespace
}  // namespace convkit::detail
