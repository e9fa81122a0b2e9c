// igemm_wgmma_ws.cuh: the warp-specialized kernel of cuda_igemm_wgmma: what it adds over the gathering kernel is a
// producer warpgroup that keeps every stage loading by TMA on full/empty mbarriers while the consumer
// warpgroups only multiply (both operands by TMA).
// Included once, by igemm_wgmma.cu, whose translation unit is built for sm_90a only; that file has the tiles,
// the plans and the launch table.
#pragma once

#include "cuda/common/launch.cuh"
#include "cuda/tc/igemm_tc.cuh"
#include "cuda/tc/wgmma_common.cuh"

namespace convkit::detail {
namespace {

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
  prefetch_l2_share(a.wei, filter_bytes<T>(a));  // (launch.cuh: a hint, safe before the wait)
  pdl_enter();  // (launch.cuh: before any global access)
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

}  // namespace
}  // namespace convkit::detail
