// igemm_wgmma_persistent.cuh: the persistent kernel of cuda_igemm_wgmma: what it adds over the warp-specialized kernel is one
// block per SM walking the output tiles, the output (and residual) through shared memory by TMA, so that a
// tile's epilogue overlaps the next tile's loads.
// Included once, by igemm_wgmma.cu, whose translation unit is built for sm_90a only; that file has the tiles,
// the plans and the launch table.
#pragma once

#include "cuda/common/launch.cuh"
#include "cuda/tc/igemm_tc.cuh"
#include "cuda/tc/wgmma_common.cuh"

namespace convkit::detail {
namespace {

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
// Tiles of 16, 32, 96 and 144 columns (n16, n32 and n48 wgmma blocks) cover a narrow layer's whole K in one
// column tile, so no column past K is multiplied, activated or staged: bf16 batch 32, H100, 1x1 24 -> 144 at
// 56x56 + ReLU6 0.0398 ms on 128x144 against 0.0533 on the wave model's tile; 256-row tiles (four consumer
// warpgroups) for the narrowest layers of many pixels: 32 -> 16 at 112x112 0.0370 on 256x16 against 0.0507 on
// 128x32 (docs/perf.md, 2026-12-06).
// Scope: 16-bit types, one group, no split-K (the planner offers its tiles only then); per-sample weights
// too (the tiles of image b after those of image b-1; the output map is 3-D, [N][P*Q][K], so that a tile's
// rows past its image are clipped). Epilogues (out_mode, chosen per launch: persistent_out_mode):
//  - 1, by TMA: act(alpha * conv (+ bias)), any activation;
//  - 2, by TMA with the residual: as 1, + beta * residual, the residual tile loaded by TMA into the staging
//    buffer at the tile's start (one thread; an mbarrier per buffer), read and overwritten in place by the
//    threads (each reads before it writes the same elements: residual may be dst), stored from there;
//  - 0, the general epilogue (an output or residual the tensor maps cannot describe: not 16-byte aligned,
//    K % 8 != 0): fp32 staged in the warpgroup's staging area, stored by the threads
//    (store_output_tile), as the other kernels do.
// The TMA store boxes of a tile row: 64 columns (128 bytes) each; a tile of 16, 32, 96 or 144 columns has a last
// box reaching past its own columns, so such a tile runs only where it is the one column tile (K <= BN:
// for_each_plan), the columns past K being clipped by the tensor map.
constexpr int persistent_boxes(int bn) { return (bn + 63) / 64; }
// The wgmma shape a tile's columns are multiplied in: n = BN for 64 and 128; 96 and 144 as n48 blocks, 32 as
// n32, 16 as n16.
constexpr int persistent_wn(int bn) { return bn % 64 == 0 ? bn : bn % 48 == 0 ? 48 : bn % 32 == 0 ? 32 : 16; }
template <int BN>
constexpr int persistent_staging_bytes() {  // one consumer warpgroup's: 64 rows
  // two 16-bit buffers of whole boxes, or the general epilogue's fp32 rows
  return std::max(2 * persistent_boxes(BN) * 64 * 128, 64 * (BN + 8) * 4);
}
template <int BM, int BN, int ST>
constexpr int persistent_smem_bytes() {  // + full, empty and (two per warpgroup) residual mbarriers
  return ST * (BM + BN) * kRowBytes + BM / 64 * persistent_staging_bytes<BN>() + (2 * ST + BM / 32) * 8 + kAtomBytes;
}

// Registers: the launch bound gives every thread the same count (65536 / threads: 168 at three warpgroups,
// 128 at four). 192x128 (four warpgroups, 64 accumulators a consumer thread) spilled 132 bytes at 128, so
// there the producer warpgroup, which needs few, hands registers to the consumers (setmaxnreg: 40 and 152;
// 128 x 40 + 384 x 152 = 63488 of the 65536 the block was given). The block must have been given the bound's
// whole count, or the consumers' increase waits forever: launch_persistent_tile checks the compiled count.
constexpr int kPersistentProducerRegs = 40, kPersistentConsumerRegs = 152;
constexpr bool persistent_rebalanced(int bm, int bn) { return bm == 192 && bn == 128; }

template <typename T, int BM, int BN, int kStages>
__global__ void __launch_bounds__(BM / 64 * 128 + 128, 1)
    igemm_wgmma_persistent_kernel(const TcArgs a, const __grid_constant__ CUtensorMap wmap,
                                  const __grid_constant__ CUtensorMap amap, const __grid_constant__ CUtensorMap omap,
                                  const __grid_constant__ CUtensorMap rmap, const int out_mode) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  prefetch_l2_share(a.wei, filter_bytes<T>(a));  // (launch.cuh: a hint, safe before the wait)
  static_assert(sizeof(T) == 2, "16-bit types (the TMA store's boxes are 64 elements of 128 bytes)");
  constexpr int WN = persistent_wn(BN), NB = BN / WN;  // the tile's columns as NB wgmma blocks of WN
  static_assert(BN % WN == 0 && BN <= 144, "whole wgmma n blocks, up to 144 columns (72 accumulators)");
  constexpr int kThreads = BM / 64 * 128;  // the consumers; the producer warpgroup is tid kThreads..+127
  constexpr int kConsumerWarps = kThreads / 32;
  constexpr int kBke = bke_of(2);
  constexpr int kAStage = BM * kRowBytes, kStageBytes = (BM + BN) * kRowBytes;
  constexpr int kStaging = persistent_staging_bytes<BN>();
  constexpr int kBox = 64 * 128;  // one TMA store box: 64 rows x 64 16-bit columns
  constexpr int kBoxes = persistent_boxes(BN);
  constexpr int kBuf = kBoxes * kBox;  // one staging buffer: 64 rows x BN (in whole boxes)
  static_assert(kStaging % kAtomBytes == 0 && 2 * kBuf <= kStaging, "two buffers per staging area, atom-aligned");
  constexpr bool kRebalance = persistent_rebalanced(BM, BN);

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

  // Up to the wait, nothing but the kernel's parameters and shared memory: the barriers and the tensor maps'
  // descriptors (parameters) are ready while the kernel before may still run (launch.cuh).
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, kConsumerWarps);
    }
    for (int s = 0; s < BM / 32; ++s) mbar_init(res_full + 8 * s, 1);
    mbar_init_fence();
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wmap)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&amap)) : "memory");
  }
  __syncthreads();
  pdl_enter();  // (launch.cuh: before any global access)

  // The slots are used in turn across tiles: (slot, phase) counts the uses, phase = the round's parity.
  int slot = 0;
  uint32_t phase = 0;
  auto next_slot = [&] {
    slot = slot + 1 == kStages ? 0 : slot + 1;
    phase ^= slot == 0 ? 1u : 0u;
  };

  if (tid >= kThreads) {
    // ---- the producer: one thread issues every load of every tile.
    if constexpr (kRebalance) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kPersistentProducerRegs));
    if (tid != kThreads) return;
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
  if constexpr (kRebalance) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kPersistentConsumerRegs));
  const int lt = tid & 127;  // the thread's place in its warpgroup
  const int wq = lt >> 5, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
  const uint32_t a_wg = uint32_t(wg) * 64 * kRowBytes;
  const uint32_t area = staging + uint32_t(wg) * kStaging;  // this warpgroup's staging area
  const T* bias = static_cast<const T*>(a.bias);
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
        for (int box = 0; box < kBoxes; ++box) tma_load_3d(buf + box * kBox, &rmap, n_block + box * 64, row0, b, rbar);
      }
    }
    // The accumulators as NB blocks of WN columns; in the epilogue one run of BN / 2 (block nb's fragment j
    // is column block nb * WN / 8 + j of the tile: the same order).
    float acc_blocks[NB][WN / 2];
    float(&acc)[BN / 2] = *reinterpret_cast<float(*)[BN / 2]>(&acc_blocks[0][0]);
#pragma unroll
    for (int e = 0; e < BN / 2; ++e) acc[e] = 0.0f;
    int kt = 0, prev = 0;
    do {  // (nk >= 1; a do-while, as in the warp-specialized kernel)
      const uint32_t sA = smem_base + slot * kStageBytes;
      mbar_wait(full + 8 * slot, phase);
      multiply_stage<T, WN, NB>(acc_blocks, smem_desc(sA + a_wg), smem_desc(sA + kAStage));
      mbar_arrive_if(empty + 8 * prev, kt > 0 && lane == 0);  // (the stage before has retired)
      prev = slot;
      next_slot();
    } while (++kt < nk);
    wgmma_wait<0>();
    fence_accumulators(acc);
    mbar_arrive_if(empty + 8 * prev, lane == 0);

    if (out_mode > 0) {
      if (out_mode == 2)
        mbar_wait(rbar, uint32_t(tl >> 1) & 1);  // the residual tile is in the buffer
      else
        named_barrier(1 + wg, 128);  // (thread 0's wait above covers the whole warpgroup)
      // NOTE: at k = 64 (1x1 64->256) these instructions are most of a tile's and set its pace: everything
      // that does not change per pair outside the pair loop (alpha, the bias row, the addresses), one load
      // per bias pair, one conversion per output pair, a swizzled address by one XOR. The passes have no
      // branches: skipping the 8-column blocks of a last tile past K (K = 16, 24, 96, 144) behind a test per
      // block made every 1x1 layer slower, full tiles too (H100, 2026-12-06: MobileNetV2's forward 0.730 ->
      // 0.933 ms of GPU time; 16 -> 96 at 112x112 0.067 -> 0.148 ms).
      if (a.alpha != 1.0f) {
#pragma unroll
        for (int e = 0; e < BN / 2; ++e) acc[e] *= a.alpha;  // (apply_epilogue: alpha * conv, then the rest)
      }
      // Row r of a box is 128 bytes, its chunk c at ((c ^ r % 8) << 4): this thread's chunk address is
      // row_addr ^ (c << 4), row_addr holding r % 8 = gq in bits 4-6 and the thread's column pair in bits 2-3.
      const uint32_t row_addr = buf + uint32_t(wq * 16 + gq) * kRowBytes + uint32_t(gq << 4) + uint32_t(tq * 4);
      const T* bias_row = bias == nullptr ? nullptr : bias + int64_t(b) * a.bias_b_stride + n_block + tq * 2;
      // Three passes over the thread's values: + bias (+ beta * residual, read from the staging buffer before
      // this thread writes the same pair), the activation (the switch taken once for all BN / 2), the stores.
      auto pair_addr = [&](int j, int h) {
        return ((row_addr + uint32_t(h * 8 * kRowBytes)) ^ uint32_t((j % 8) << 4)) + uint32_t(j / 8 * kBox);
      };
      auto add_bias_residual = [&](auto with_residual) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          float2 bj = make_float2(0.0f, 0.0f);  // (K % 8 == 0: a pair lies inside K or past it)
          if (bias_row != nullptr && n_block + j * 8 < a.Kpg)
            bj = unpack2<T>(*reinterpret_cast<const uint32_t*>(bias_row + j * 8));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float& y0 = acc[4 * j + 2 * h];
            float& y1 = acc[4 * j + 2 * h + 1];
            y0 += bj.x, y1 += bj.y;
            if constexpr (decltype(with_residual)::value) {
              const float2 r = unpack2<T>(lds32(pair_addr(j, h)));
              y0 += a.beta * r.x, y1 += a.beta * r.y;
            }
          }
        }
      };
      if (out_mode == 2)
        add_bias_residual(std::true_type{});
      else
        add_bias_residual(std::false_type{});
      activate_all<BN / 2, T>(a.act, acc);
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) sts32(pair_addr(j, h), pack2<T>(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]));
      fence_proxy_async();  // (the writes, visible to the TMA)
      named_barrier(1 + wg, 128);
      if (lt == 0) {
#pragma unroll
        for (int box = 0; box < kBoxes; ++box)
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
        *reinterpret_cast<float2*>(&ctile[r * CS + col]) = make_float2(acc[4 * j], acc[4 * j + 1]);
        *reinterpret_cast<float2*>(&ctile[(r + 8) * CS + col]) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
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

}  // namespace
}  // namespace convkit::detail
