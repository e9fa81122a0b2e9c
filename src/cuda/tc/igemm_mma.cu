// cuda_igemm_mma: tensor-core implicit GEMM with mma.sync, ldmatrix and a 4-stage cp.async pipeline
// (fp16 / bf16 tensors with fp32 accumulation; fp32 tensors in tf32 math). NHWC activations, KRSC weights.
//
// What it adds over cuda_igemm_wmma (one idea each, all about feeding the tensor cores):
//  - the warp-level PTX instruction mma.sync.m16n8k16 (m16n8k8 for tf32) instead of the WMMA API, with its
//    fragments loaded by ldmatrix.x4 (one instruction fetches a 16x16 16-bit A fragment for the whole warp);
//  - a 4-stage cp.async pipeline: the loads of slice t+3 are in flight, straight from global to shared
//    memory (no register staging, zero-fill for the padding via the src-size operand), while slice t is
//    multiplied;
//  - shared-memory rows padded from 64 to 80 bytes: the 8 rows an ldmatrix phase reads start 5 16-byte
//    slots apart (mod 8), so they fall on distinct banks (no conflicts; ncu-checked on the H200 run);
//  - the filter-tap walk over k = (r, s, c) is advanced with carries once per slice, shared by the A and
//    B loads (no division in the k loop);
//  - a channel-aligned fast path (C/groups % 8 == 0 for 16-bit types, % 4 for tf32: every 16-byte chunk
//    lies inside one filter tap, so one cp.async per chunk) and a general path for any C (the 3-channel
//    stem): element gathers through registers into the same shared-memory layout;
//  - split-K for small N*P*Q with long k (late ResNet layers): grid.z also walks k splits that write fp32
//    partials to the workspace, and a second kernel adds them in split order (deterministic) and applies
//    the epilogue;
//  - tile shapes 128x128 (8 warps), 128x64, 64x128 and 64x64 (4 warps) as template parameters; a wave
//    model picks the tile and split count (choose_plan), variants() lists the others for `convkit tune`.
//
// The GEMM per group g (and per sample b for per-sample weights): rows m = output pixels (img, p, q), columns
// n = output channels of the group, k = (r, s, c) of the filter window:
//   A[m][k] = x[img][p*u - pad + r*d][q*v - pad + s*d][g*Cg + c]      (contiguous along c)
//   B[n][k] = w[b][g*Kg + n][r][s][c]                                 (contiguous along all of k)
// Both operands are "k-major", so A is row-major and B column-major for mma's .row.col form, and the byte
// layout of a 16x32-byte fragment is the same for 16-bit elements and for fp32/tf32: one loader and one
// ldmatrix addressing serve all three types; only the mma instruction differs (tf32 operands are rounded
// to nearest even after ldmatrix: tf32_rne_bits, tc_common.cuh).
// The epilogue (bias, activation, alpha, beta*residual, output in the tensor dtype) is applied in
// registers on the way out; a residual aliasing dst is read by the thread that then overwrites it.
//
// Resources (sm_90, nvcc -Xptxas -v, 2026-11-29): 78-128 registers for the 64x32/32x32 warp tiles, 216-246
// for the 64x64 ones, no spills; dynamic smem 40-80 KiB (154 KiB for 256x128w8).
// measured (H200, 2026-11-29, bf16 NHWC batch 32, tuned variants, vs cuDNN in the same process; docs/perf.md):
// ResNet-50 geomean 0.50x (f16 0.48x, tf32 0.49x), 0.37x-0.59x per layer, the 3-channel stem 1.45x (0.158 vs
// 0.229 ms); seed000 1.036 ms, 298 TFLOP/s (43% of cuBLAS bf16). ncu: latency-bound (0.30 IPC per scheduler,
// no eligible warp 70% of cycles); each wave pays 9-19 us of fixed cost (docs/kernels.md).

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/tc/igemm_tc.cuh"
#include "cuda/tc/mma_sync.cuh"
#include "cuda/tc/splitk_reduce.cuh"

namespace convkit::detail {
namespace {

constexpr int kBkBytes = 64;              // k depth of one pipeline stage: 32 f16/bf16 or 16 fp32 elements
constexpr int kRowBytes = kBkBytes + 16;  // NOTE: padded smem row (see the header: conflict-free ldmatrix)
constexpr int kChunksPerRow = kBkBytes / 16;

using MmaArgs = TcArgs;

// ---- the kernel ------------------------------------------------------------------------------------
// A block of WM x WN warps computes a BM x BN tile of one (batch entry, group, k split); each warp a
// (BM/WM) x (BN/WN) tile as MI x NI mma tiles of 16 x 8. Grid: x = m tiles, y = n tiles,
// z = (batch entry * G + group) * splits + split.
template <typename T, int BM, int BN, int WM, int WN, int kStages, bool kAligned>
__global__ void __launch_bounds__(WM* WN * 32) igemm_mma_kernel(const MmaArgs a) {
  prefetch_l2_share(a.wei, filter_bytes<T>(a));  // (launch.cuh: a hint, safe before the wait)
  pdl_enter();  // (launch.cuh: before any global access)
  constexpr int kThreads = WM * WN * 32;
  constexpr int ES = int(sizeof(T));
  constexpr int CE = 16 / ES;          // elements per 16-byte chunk
  constexpr int BKE = kBkBytes / ES;   // k elements per stage
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  constexpr int kAIters = BM / kRowsPerPass, kBIters = BN / kRowsPerPass;
  constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  constexpr int kAStage = BM * kRowBytes, kStageBytes = (BM + BN) * kRowBytes;
  static_assert(BM % kRowsPerPass == 0 && BN % kRowsPerPass == 0, "whole loader passes");
  static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tiles of whole 16x16 fragments");

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t smem_base = uint32_t(__cvta_generic_to_shared(smem));

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / WN, warp_n = warp % WN;

  const BlockPos pos = block_pos<BM, BN>(a);
  const int split = pos.split, g = pos.g, b = pos.b, n_block = pos.n_block;
  const int64_t m_block = pos.m_block;

  const T* src = static_cast<const T*>(a.src);
  const T* wei = static_cast<const T*>(a.wei) + int64_t(b) * a.wei_b_stride + int64_t(g) * a.Kpg * a.Kg;

  const int kt0 = split * a.tiles_per_split;
  const int nk = min(a.num_k_tiles - kt0, a.tiles_per_split);  // >= 1: the host leaves no split empty

  // ---- loader state: this thread fills chunk `chunk` of rows row0 + i*kRowsPerPass of A and B.
  const int chunk = tid % kChunksPerRow;
  const int row0 = tid / kChunksPerRow;
  int64_t a_base[kAIters];
  int a_h0[kAIters], a_w0[kAIters];
  decode_a_rows<kAIters, kRowsPerPass>(a, m_block, row0, b, g, a_base, a_h0, a_w0);
  const T* b_row[kBIters];
  bool b_ok[kBIters];
#pragma unroll
  for (int j = 0; j < kBIters; ++j) {
    const int n = n_block + row0 + j * kRowsPerPass;
    b_ok[j] = n < a.Kpg;
    b_row[j] = wei + int64_t(b_ok[j] ? n : 0) * a.Kg;
  }
  TapWalk tw;  // the k of this thread's chunk, its filter tap and channel
  tw.start(a, kt0 * BKE + chunk * CE);

  auto load_stage = [&](int slot) {
    const uint32_t sA = smem_base + slot * kStageBytes, sB = sA + kAStage;
    if constexpr (kAligned) {
      const bool k_ok = tw.r < a.R;  // k < Kg
      const int dh = tw.r * a.dil_h, dw = tw.s * a.dil_w;
#pragma unroll
      for (int i = 0; i < kAIters; ++i) {
        const int h = a_h0[i] + dh, w = a_w0[i] + dw;
        const bool ok = k_ok && unsigned(h) < unsigned(a.H) && unsigned(w) < unsigned(a.W);
        const T* p = ok ? src + a_base[i] + (int64_t(h) * a.W + w) * a.C + tw.c : src;
        cp_async16(sA + (row0 + i * kRowsPerPass) * kRowBytes + chunk * 16, p, ok);
      }
#pragma unroll
      for (int j = 0; j < kBIters; ++j) {
        const bool ok = k_ok && b_ok[j];
        cp_async16(sB + (row0 + j * kRowsPerPass) * kRowBytes + chunk * 16, ok ? b_row[j] + tw.kk : wei, ok);
      }
      tw.advance(a, BKE);
    } else {
      // General C: element gathers (each element of the chunk has its own tap), zero-filled, stored as one
      // 16-byte row piece so the layout is the fast path's.
      // NOTE: the taps of the chunk's elements by carries from the chunk's first one; a division per element
      // (the first version) made the 3-channel stem instruction-bound (0.51 ms, 2.2x cuDNN bf16).
      int e_dh[CE], e_dw[CE], e_c[CE];
      bool e_ok[CE];
      {
        int c = tw.c, ss = tw.s, r = tw.r;
#pragma unroll
        for (int e = 0; e < CE; ++e) {
          e_ok[e] = r < a.R;
          e_c[e] = c;
          e_dh[e] = r * a.dil_h;
          e_dw[e] = ss * a.dil_w;
          if (++c == a.Cg) {
            c = 0;
            if (++ss == a.S) {
              ss = 0;
              ++r;
            }
          }
        }
      }
      unsigned char* sptr = smem + slot * kStageBytes;
#pragma unroll
      for (int i = 0; i < kAIters; ++i) {
        alignas(16) T v[CE];
#pragma unroll
        for (int e = 0; e < CE; ++e) {
          const int h = a_h0[i] + e_dh[e], w = a_w0[i] + e_dw[e];
          const bool ok = e_ok[e] && unsigned(h) < unsigned(a.H) && unsigned(w) < unsigned(a.W);
          v[e] = ok ? src[a_base[i] + (int64_t(h) * a.W + w) * a.C + e_c[e]] : float_to_elem<T>(0.0f);
        }
        *reinterpret_cast<uint4*>(sptr + (row0 + i * kRowsPerPass) * kRowBytes + chunk * 16) =
            *reinterpret_cast<const uint4*>(v);
      }
#pragma unroll
      for (int j = 0; j < kBIters; ++j) {
        alignas(16) T v[CE];
#pragma unroll
        for (int e = 0; e < CE; ++e) v[e] = (b_ok[j] && e_ok[e]) ? b_row[j][tw.kk + e] : float_to_elem<T>(0.0f);
        *reinterpret_cast<uint4*>(sptr + kAStage + (row0 + j * kRowsPerPass) * kRowBytes + chunk * 16) =
            *reinterpret_cast<const uint4*>(v);
      }
      tw.advance(a, BKE);
    }
  };

  float acc[MI][NI][4];
  zero_fragments(acc);

  // ---- the pipeline: stages 0..kStages-2 in flight before the first multiply.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) load_stage(s);
    cp_async_commit();  // (possibly empty: keeps the group count uniform)
  }
  // Per-lane ldmatrix offsets (bytes) inside a stage: A rows lane%16, 16-byte column lane/16; B rows
  // lane%8 (+8 for lanes 16..31), 16-byte column (lane/8)%2 (matrix order b0, b1 of n-tile j, then j+1).
  const uint32_t a_lane = (warp_m * WTM + (lane & 15)) * kRowBytes + (lane >> 4) * 16;
  const uint32_t b_lane = kAStage + (warp_n * WTN + (lane & 7) + ((lane >> 4) << 3)) * kRowBytes + ((lane >> 3) & 1) * 16;

  for (int kt = 0; kt < nk; ++kt) {
    cp_async_wait<kStages - 2>();  // stage kt has landed (this thread's copies) ...
    __syncthreads();               // ... everyone's, and everyone is done with the slot refilled below
    {
      const int next = kt + kStages - 1;
      if (next < nk) load_stage(next % kStages);
      cp_async_commit();
    }
    const uint32_t stage = smem_base + (kt % kStages) * kStageBytes;
    // NOTE: the fragments of k step kk+1 are fetched before the mmas of step kk are issued, so ldmatrix
    // latency overlaps tensor-core work (the mma asm is not volatile: the compiler may interleave it).
    uint32_t af[2][MI][4], bf[2][NI][2];
    auto load_frags = [&](int buf, int kk) {
#pragma unroll
      for (int i = 0; i < MI; ++i) ldmatrix_x4(af[buf][i], stage + a_lane + i * 16 * kRowBytes + kk * 32);
#pragma unroll
      for (int j2 = 0; j2 < NI / 2; ++j2) {
        uint32_t t4[4];
        ldmatrix_x4(t4, stage + b_lane + j2 * 16 * kRowBytes + kk * 32);
        bf[buf][2 * j2][0] = t4[0];
        bf[buf][2 * j2][1] = t4[1];
        bf[buf][2 * j2 + 1][0] = t4[2];
        bf[buf][2 * j2 + 1][1] = t4[3];
      }
      if constexpr (Mma<T>::kTf32) {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) af[buf][i][e] = tf32_rne_bits(af[buf][i][e]);
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          bf[buf][j][0] = tf32_rne_bits(bf[buf][j][0]);
          bf[buf][j][1] = tf32_rne_bits(bf[buf][j][1]);
        }
      }
    };
    load_frags(0, 0);
#pragma unroll
    for (int kk = 0; kk < kBkBytes / 32; ++kk) {
      if (kk + 1 < kBkBytes / 32) load_frags((kk + 1) & 1, kk + 1);
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) Mma<T>::run(acc[i][j], af[kk & 1][i], bf[kk & 1][j]);
    }
  }
  cp_async_wait<0>();

  // ---- the epilogue, in two steps so that global memory sees whole lines:
  // 1. the fragments go to shared memory as an fp32 BM x BN tile (the pipeline's buffers are free now);
  //    thread (gq = lane/4, tq = lane%4) holds rows gq, gq+8 and columns 2tq, 2tq+1 of each 16x8 mma tile;
  // 2. each thread takes 8 consecutive output channels of one pixel: one 16-byte load of the residual,
  //    one 16-byte store of 16-bit outputs (two for fp32); a warp covers whole 128-byte lines
  //    (store_output_tile, igemm_tc.cuh).
  cp_async_wait<0>();
  __syncthreads();
  constexpr int CS = BN + 8;  // fp32 row stride of the staged tile (padded: fewer conflicts on the fragment stores)
  static_assert(BM * CS * 4 <= kStages * kStageBytes, "the output tile fits in the pipeline's shared memory");
  float* ctile = reinterpret_cast<float*>(smem);
  {
    const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          const int row = warp_m * WTM + i * 16 + gq + h * 8, col = warp_n * WTN + j * 8 + tq * 2;
          *reinterpret_cast<float2*>(&ctile[row * CS + col]) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        }
  }
  __syncthreads();
  store_output_tile<T, BM, BN, kThreads>(a, ctile, CS, m_block, n_block, b, g, split, tid, a.ws != nullptr);
}

// ---- tiles and plans -------------------------------------------------------------------------------

template <int BM, int BN, int ST>
constexpr int smem_bytes() {
  return ST * (BM + BN) * kRowBytes;
}

template <typename T, int BM, int BN, int WM, int WN, int ST, bool kAligned>
void prepare_kernel() {
  // Above 48 KiB of dynamic shared memory a kernel must opt in, once per kernel (and device).
  static std::atomic<bool> done{false};
  if (!done.load(std::memory_order_acquire)) {
    CK_CUDA(cudaFuncSetAttribute(igemm_mma_kernel<T, BM, BN, WM, WN, ST, kAligned>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<BM, BN, ST>()));
    done.store(true, std::memory_order_release);
  }
}

template <typename T, int BM, int BN, int WM, int WN, int ST>
void launch_tile(const MmaArgs& a, dim3 grid, cudaStream_t stream, bool aligned) {
  constexpr int smem = smem_bytes<BM, BN, ST>();
  if (aligned) {
    prepare_kernel<T, BM, BN, WM, WN, ST, true>();
    launch_pdl(igemm_mma_kernel<T, BM, BN, WM, WN, ST, true>, dim3(grid), dim3(WM * WN * 32), size_t(smem), stream,
               a);
  } else {
    prepare_kernel<T, BM, BN, WM, WN, ST, false>();
    launch_pdl(igemm_mma_kernel<T, BM, BN, WM, WN, ST, false>, dim3(grid), dim3(WM * WN * 32), size_t(smem), stream,
               a);
  }
}

template <typename T, int BM, int BN, int WM, int WN, int ST>
int blocks_per_sm_of_tile() {
  static std::atomic<int> cached{0};
  int n = cached.load(std::memory_order_relaxed);
  if (n == 0) {
    prepare_kernel<T, BM, BN, WM, WN, ST, true>();
    CK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, igemm_mma_kernel<T, BM, BN, WM, WN, ST, true>,
                                                          WM * WN * 32, smem_bytes<BM, BN, ST>()));
    n = std::max(n, 1);
    cached.store(n, std::memory_order_relaxed);
  }
  return n;
}

constexpr int kNumTiles = 6;

// The variant -> kernel table, row by row (the variant is the name then /k<splits>; WM x WN warps, ST stages;
// every kernel in this file, the aligned or the checked instance as run() finds the pointers):
//   128x128w8   igemm_mma_kernel<T, 128, 128, 2, 4, 4>
//   256x128w8   igemm_mma_kernel<T, 256, 128, 4, 2, 5>
//   128x128w4   igemm_mma_kernel<T, 128, 128, 2, 2, 4>
//   128x64w4    igemm_mma_kernel<T, 128, 64, 2, 2, 4>
//   64x128w4    igemm_mma_kernel<T, 64, 128, 1, 4, 4>
//   64x64w4     igemm_mma_kernel<T, 64, 64, 2, 2, 4>
template <typename T>
const std::array<Tile, kNumTiles>& tiles() {
  // Warp tiles: 64x64 (256x128w8, 128x128w4), 64x32 (128x128w8, 128x64w4, 64x128w4), 32x32 (64x64w4).
  // NOTE: 256x128w8 needs 5 stages for its fp32 output tile to fit in the pipeline's shared memory.
  // NOTE: wave_us and slice_us are a least-squares fit (relative error) of 280 bf16 timings of every variant
  // on the 23 ResNet-50 layers (H200, 2026-11-29; median error 11%, picks within 3.5% of the best measured
  // variant in geomean). Re-fit with docs/kernels.md's recipe when the kernel changes.
  static const std::array<Tile, kNumTiles> t = {{
      {128, 128, 8, 12.6, 0.70, launch_tile<T, 128, 128, 2, 4, 4>, blocks_per_sm_of_tile<T, 128, 128, 2, 4, 4>},
      {256, 128, 8, 16.9, 0.96, launch_tile<T, 256, 128, 4, 2, 5>, blocks_per_sm_of_tile<T, 256, 128, 4, 2, 5>},
      {128, 128, 4, 18.8, 0.63, launch_tile<T, 128, 128, 2, 2, 4>, blocks_per_sm_of_tile<T, 128, 128, 2, 2, 4>},
      {128, 64, 4, 13.2, 0.58, launch_tile<T, 128, 64, 2, 2, 4>, blocks_per_sm_of_tile<T, 128, 64, 2, 2, 4>},
      {64, 128, 4, 12.9, 0.53, launch_tile<T, 64, 128, 1, 4, 4>, blocks_per_sm_of_tile<T, 64, 128, 1, 4, 4>},
      {64, 64, 4, 9.2, 0.63, launch_tile<T, 64, 64, 2, 2, 4>, blocks_per_sm_of_tile<T, 64, 64, 2, 2, 4>},
  }};
  return t;
}

// The tile table with the pipeline depth and the names this algorithm answers to.
template <typename T>
TileSet tile_set() {
  return {tiles<T>().data(), kNumTiles, kBkBytes, "cuda_igemm_mma", "CONVKIT_MMA_VARIANT"};
}

template <typename T>
Plan plan_for(const Shape& s, const std::string& variant) {
  return choose_plan(tile_set<T>(), s, sm_count_of_current_device(), variant);
}

Plan plan_of(DType dt, const Shape& s, const std::string& variant) {
  switch (dt) {
    case DType::f16: return plan_for<__half>(s, variant);
    case DType::bf16: return plan_for<__nv_bfloat16>(s, variant);
    case DType::f32: return plan_for<float>(s, variant);
  }
  return plan_for<float>(s, variant);
}

Support limits(const Conv2dProblem& p) { return tc_limits(p); }

// Fills the kernel arguments and launches the plan (and the reduce when it splits k).
void launch(const Conv2dProblem& pb, DType dt, bool per_sample, const TensorView& src, const TensorView& wei,
            const TensorView& dst, const Epilogue& e, const Plan& plan, void* workspace, size_t workspace_bytes,
            cudaStream_t stream) {
  check_residual_overlap(e.residual, dst.data, dst.bytes());
  if (plan.ws_bytes > 0 && (workspace == nullptr || workspace_bytes < plan.ws_bytes))
    throw Error(StatusCode::invalid_tensor, "cuda_igemm_mma needs " + std::to_string(plan.ws_bytes) +
                                                " bytes of workspace (split-K partials) but was given " +
                                                std::to_string(workspace == nullptr ? 0 : workspace_bytes) + ".");
  const MmaArgs a = make_tc_args(pb, per_sample, src, wei, dst, e, plan.splits, plan.tiles_per_split,
                                 plan.num_k_tiles, workspace, kBkBytes / int(dtype_size(dt)));
  const bool aligned = tc_operands_aligned(a, dt);
  const Tile& t = *plan.tile;
  const dim3 grid(unsigned(ceil_div(a.Mb, t.bm)), unsigned(ceil_div(a.Kpg, t.bn)),
                  unsigned(int64_t(a.nb) * a.G * plan.splits));
  t.launch(a, grid, stream, aligned);
  CK_LAUNCH("igemm_mma_kernel");
  if (plan.splits > 1) launch_splitk_reduce(a, dt, stream);
}

class CudaIgemmMma final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_igemm_mma"; }
  std::string description() const override {
    return "tensor-core implicit GEMM: mma.sync + ldmatrix, 4-stage cp.async pipeline, padded smem, split-K, "
           "fused epilogue (f16/bf16, tf32; NHWC)";
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (Support ok = require_tensor_core_config(cfg); !ok) return ok;
    return limits(p);
  }
  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    return variant_workspace_bytes(p, cfg, "");
  }
  size_t variant_workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg, const std::string& v) const override {
    if (!cuda_present() || !can_implement(p, cfg)) return 0;
    return plan_of(cfg.dtype, shape_of(p, cfg.dtype, false), v).ws_bytes;
  }
  std::vector<std::string> variants(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!cuda_present() || !can_implement(p, cfg)) return {};
    const Shape s = shape_of(p, cfg.dtype, false);
    const Plan chosen = plan_of(cfg.dtype, s, "");
    std::vector<Plan> all;
    switch (cfg.dtype) {
      case DType::f16: all = candidate_plans(tile_set<__half>(), s, sm_count_of_current_device()); break;
      case DType::bf16: all = candidate_plans(tile_set<__nv_bfloat16>(), s, sm_count_of_current_device()); break;
      case DType::f32: all = candidate_plans(tile_set<float>(), s, sm_count_of_current_device()); break;
    }
    // The heuristic's choice, then the best-modelled other plans (at most 8 in all).
    std::sort(all.begin(), all.end(), [](const Plan& x, const Plan& y) { return x.model_us < y.model_us; });
    std::vector<std::string> out{chosen.variant()};
    for (const Plan& q : all)
      if (out.size() < 8 && q.variant() != chosen.variant()) out.push_back(q.variant());
    return out;
  }
  std::string detail(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!cuda_present() || !can_implement(p, cfg)) return {};
    const Plan plan = plan_of(cfg.dtype, shape_of(p, cfg.dtype, false), "");
    const int ce = 16 / int(dtype_size(cfg.dtype));
    std::string d = "tile " + plan.tile->name();
    if (plan.splits > 1)
      d += ", split-K " + std::to_string(plan.splits) + " (partials " +
           std::to_string((plan.ws_bytes + (1 << 20) - 1) >> 20) + " MiB)";
    d += p.c_per_group() % ce == 0 ? ", aligned cp.async path" : ", general-C gather path";
    return d + ", " + std::to_string(plan.blocks) + " blocks on " + std::to_string(sm_count_of_current_device()) + " SMs";
  }
  // Per-sample weights (conv2d_per_sample): grid.z walks the samples; f16/bf16 only (no tf32 mode there).
  Support accepts(const Conv2dProblem& p, const ConvConfig& cfg, const Operands& ops) const override {
    if (!ops.per_sample) return Support::yes();  // any alignment: the gather path takes misaligned views
    if (cfg.dtype != DType::f16 && cfg.dtype != DType::bf16)
      return Support::no("its per-sample-weights mode computes f16 and bf16 only.");
    if (p.n * p.groups > 65535) return Support::no("per-sample weights: N*groups passes 65535 (grid.z).");
    return Support::yes();
  }
  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    const DType dt = call.config.dtype;
    if (call.per_sample) {
      // NOTE: never split k here: the batch already gives N times the blocks of one image, and a per-sample
      // call has no workspace.
      Operands ps;
      ps.per_sample = true;
      if (Support ok = accepts(pb, call.config, ps); !ok)
        throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
      const Shape s = shape_of(pb, dt, true);
      Plan plan = plan_of(dt, s, call.variant);
      if (plan.splits > 1) plan = plan_of(dt, s, plan.tile->name() + "/k1");
      launch(pb, dt, true, call.src, call.wei, call.dst, call.epilogue, plan, nullptr, 0, as_stream(call.stream));
      return;
    }
    const Plan plan = plan_of(dt, shape_of(pb, dt, false), call.variant);
    launch(pb, dt, false, call.src, call.wei, call.dst, call.epilogue, plan, call.workspace, call.workspace_bytes,
           as_stream(call.stream));
  }
};

}  // namespace

const Algorithm* make_cuda_igemm_mma() {
  static CudaIgemmMma algo;
  return &algo;
}

}  // namespace convkit::detail
