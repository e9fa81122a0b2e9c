// cuda_pointwise_mma: 1x1 convolutions (stride 1, no padding, one group) that write more than they read,
// as the plain GEMM y[M][K] = x[M][C] * w[K][C]^T with M = N*H*W pixels; f16/bf16 NHWC, fp32 accumulation.
//
// What it adds over cuda_igemm_mma (whose block loads, multiplies, then stores one BM x BN tile): a block
// keeps its BM pixels' whole reduction (all C channels, C <= 512) in shared memory, loaded once, and walks
// the output channels in BN-wide tiles, the next tile's filter rows in flight by cp.async while it multiplies
// the current one. A widening layer (MobileNetV2's 16 -> 96, ConvNeXt's 96 -> 384) has a reduction of one
// to six k16 steps, so a GEMM tile there is mostly its epilogue; here the epilogue is cheap and the block's
// stores of tile t overlap the multiplies of tile t + 1 (and the other blocks of the SM):
//  - the epilogue (alpha, bias, residual, activation) runs on the accumulator fragments in registers; the
//    results go to shared memory already in the output dtype (half the bytes of an fp32 staging tile);
//  - the staged tile leaves as 16-byte stores, a warp writing whole 128-byte pieces of output rows.
// Work mapping: grid.x = BM-pixel tiles, grid.y = splits of the output channels (only where M alone gives
// too few blocks to fill the GPU); a block of WM x WN warps, each warp a (BM/WM) x (BN/WN) piece of the tile
// as m16n8k16 mma.sync tiles, fragments by ldmatrix.x4. Shared-memory rows are C (rounded up to 16) plus
// 8 elements: an odd number of 16-byte units, so the 8 rows of an ldmatrix phase fall on distinct banks.
// Resources (sm_90, nvcc -Xptxas -v): 64 registers (64x64w8), 118 (64x64w4), 80 with 24 bytes spilled
// (128x64w8, held to 3 blocks an SM); 27-220 KiB of dynamic shared memory by C.
// measured (H200, 2026-12-04, bf16 batch 32, docs/perf.md): alone, L2 flushed, no epilogue, it trails
// cuda_igemm_wgmma on every 1x1 layer of MobileNetV2 and EfficientNet-B0 (16 -> 96 at 112x112 0.071 ms,
// wgmma 0.059, cuDNN 0.033); inside EfficientNet-B0's fused forward, with SiLU, it leads (16 -> 96 0.147 ms
// against 0.198, 24 -> 144 at 56x56 0.056 against 0.122), which is where the heuristic picks it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/common/epilogue.cuh"
#include "cuda/common/vec.cuh"
#include "cuda/tc/mma_sync.cuh"
#include "cuda/tc/tc_plan.cuh"

namespace convkit::detail {
namespace {

constexpr int kMaxC = 512;  // the whole reduction of a 64-pixel tile and two filter tiles fit in shared memory

struct PwArgs {
  const void* src;  // [M][C]
  const void* wei;  // [K][C]
  void* dst;        // [M][K]
  const void* bias;
  const void* residual;  // [M][K] or null; may be dst itself
  Activation act;
  float alpha, beta;
  int64_t M;
  int C, K;
  int ksteps;     // k16 steps: ceil(C / 16)
  int row_bytes;  // staged row of A and B: (2 * ksteps + 1) * 16 bytes
  int n_tiles;    // ceil(K / BN)
  int tiles_per_split;
  int nbuf;       // filter tiles in shared memory: 2 (the next one in flight during the multiplies) or 1
};

template <int BN>
constexpr int out_row_bytes() {
  return BN * 2 + 16;  // staged output row (padded: the fragment stores of a warp fall on distinct banks)
}

template <typename T, int BM, int BN, int WM, int WN, int kMinBlocks>
__global__ void __launch_bounds__(WM* WN * 32, kMinBlocks) pointwise_mma_kernel(const PwArgs a) {
  pdl_enter();  // (launch.cuh: before any global access)
  constexpr int kThreads = WM * WN * 32;
  constexpr int WTM = BM / WM, WTN = BN / WN, MI = WTM / 16, NI = WTN / 8;
  constexpr int OS = out_row_bytes<BN>();
  static_assert(WTM % 16 == 0 && NI % 2 == 0, "warp tiles of whole 16x16 fragments");

  extern __shared__ __align__(128) unsigned char smem[];
  const int rb = a.row_bytes;
  const uint32_t sA = uint32_t(__cvta_generic_to_shared(smem));
  const uint32_t sB0 = sA + uint32_t(BM * rb), sB_bytes = uint32_t(BN * rb);  // nbuf filter tiles
  unsigned char* const sO = smem + (BM + a.nbuf * BN) * rb;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / WN, warp_n = warp % WN;
  const int64_t m0 = int64_t(blockIdx.x) * BM;
  const int t0 = int(blockIdx.y) * a.tiles_per_split, t1 = min(a.n_tiles, t0 + a.tiles_per_split);

  const T* src = static_cast<const T*>(a.src);
  const T* wei = static_cast<const T*>(a.wei);
  T* dst = static_cast<T*>(a.dst);
  const T* bias = static_cast<const T*>(a.bias);
  const T* res = static_cast<const T*>(a.residual);
  const int cpr = 2 * a.ksteps;  // 16-byte chunks a staged row (the last one zeros when C % 16 == 8)
  const int cval = a.C / 8;      // chunks that hold channels

  // This thread's 16-byte chunks of a staged row block: chunk (r, ch) for r = r0, r0 + dr (+1 on a carry), ...
  // (a division once, not once per chunk).
  const int r0 = tid / cpr, ch0 = tid - r0 * cpr, dr = kThreads / cpr, dch = kThreads - dr * cpr;

  // ---- the pixels' whole reduction, once (rows past M and chunks past C as zeros) ----
  for (int r = r0, ch = ch0; r < BM;) {
    const int64_t m = m0 + r;
    const bool ok = m < a.M && ch < cval;
    cp_async16(sA + uint32_t(r * rb + ch * 16), ok ? src + m * a.C + ch * 8 : src, ok);
    r += dr, ch += dch;
    if (ch >= cpr) ch -= cpr, ++r;
  }
  auto load_b = [&](int t, uint32_t s) {
    const int nb = t * BN;
    for (int r = r0, ch = ch0; r < BN;) {
      const bool ok = nb + r < a.K && ch < cval;
      cp_async16(s + uint32_t(r * rb + ch * 16), ok ? wei + int64_t(nb + r) * a.C + ch * 8 : wei, ok);
      r += dr, ch += dch;
      if (ch >= cpr) ch -= cpr, ++r;
    }
  };
  const bool two = a.nbuf == 2;
  load_b(t0, sB0);
  cp_async_commit();  // group t0: A and B(t0)
  if (two) {
    if (t0 + 1 < t1) load_b(t0 + 1, sB0 + sB_bytes);
    cp_async_commit();  // group t0 + 1 (possibly empty: one group per tile keeps the wait count fixed)
  }

  const int gq = lane >> 2, tq = lane & 3;
  const uint32_t a_lane = uint32_t((warp_m * WTM + (lane & 15)) * rb + (lane >> 4) * 16);
  const uint32_t b_lane = uint32_t((warp_n * WTN + (lane & 7) + ((lane >> 4) << 3)) * rb + ((lane >> 3) & 1) * 16);

  for (int t = t0; t < t1; ++t) {
    const uint32_t sBt = sB0 + (two ? ((t - t0) & 1) * sB_bytes : 0u);
    if (two) cp_async_wait<1>();  // B(t) (and A) landed: this thread's copies ...
    else cp_async_wait<0>();
    __syncthreads();  // ... and everyone's; everyone has also finished storing tile t - 1 from sO

    float acc[MI][NI][4];
    zero_fragments(acc);
    for (int ks = 0; ks < a.ksteps; ++ks) {
      uint32_t af[MI][4], bf[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) ldmatrix_x4(af[i], sA + a_lane + uint32_t(i * 16 * rb + ks * 32));
#pragma unroll
      for (int j2 = 0; j2 < NI / 2; ++j2) {
        uint32_t t4[4];
        ldmatrix_x4(t4, sBt + b_lane + uint32_t(j2 * 16 * rb + ks * 32));
        bf[2 * j2][0] = t4[0], bf[2 * j2][1] = t4[1], bf[2 * j2 + 1][0] = t4[2], bf[2 * j2 + 1][1] = t4[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) Mma<T>::run(acc[i][j], af[i], bf[j]);
    }

    // ---- the epilogue on the fragments: lane (gq, tq) holds rows gq, gq + 8 and columns 2tq, 2tq + 1 of
    // each 16 x 8 tile; apply_epilogue's order (alpha*acc, + bias, + beta*residual, the activation).
    const int nb = t * BN;
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int n = nb + warp_n * WTN + j * 8 + 2 * tq;  // n < K implies n + 1 < K (K % 8 == 0)
      float b0 = 0.0f, b1 = 0.0f;
      if (bias != nullptr && n < a.K) b0 = elem_to_float<T>(bias[n]), b1 = elem_to_float<T>(bias[n + 1]);
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float& x0 = acc[i][j][2 * h];
          float& x1 = acc[i][j][2 * h + 1];
          x0 *= a.alpha, x1 *= a.alpha;
          if (bias != nullptr) x0 += b0, x1 += b1;
          if (res != nullptr) {
            const int64_t m = m0 + warp_m * WTM + i * 16 + gq + h * 8;
            if (m < a.M && n < a.K) {  // read here, before any thread stores this tile (the residual may be dst)
              const Vec<T, 2> r2 = *reinterpret_cast<const Vec<T, 2>*>(res + m * a.K + n);
              x0 += a.beta * elem_to_float<T>(r2.v[0]), x1 += a.beta * elem_to_float<T>(r2.v[1]);
            }
          }
        }
    }
    // NOTE: one dispatch a 16x8 fragment: activate_all over the whole tile (32 values) put the accumulators
    // in local memory (its default case indexes them at run time; a 2-3x slower kernel, H200).
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j) activate_all<4, T>(a.act, acc[i][j]);
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int col = warp_n * WTN + j * 8 + 2 * tq;
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          Vec<T, 2> w;
          w.v[0] = float_to_elem<T>(acc[i][j][2 * h]), w.v[1] = float_to_elem<T>(acc[i][j][2 * h + 1]);
          const int row = warp_m * WTM + i * 16 + gq + h * 8;
          *reinterpret_cast<Vec<T, 2>*>(sO + row * OS + col * 2) = w;
        }
    }
    __syncthreads();  // the tile is staged; every warp is done with B(t)
    if (t + a.nbuf < t1) load_b(t + a.nbuf, sBt);
    cp_async_commit();

    // ---- the staged tile out: 16 bytes (8 channels of one pixel) a thread, BN / 8 threads a row ----
    constexpr int CPR = BN / 8;
    static_assert(BM * CPR % kThreads == 0, "whole store passes");
#pragma unroll
    for (int it = 0; it < BM * CPR / kThreads; ++it) {
      const int idx = tid + it * kThreads, r = idx / CPR, c = idx % CPR;
      const int64_t m = m0 + r;
      const int n = nb + c * 8;
      if (m < a.M && n < a.K)
        *reinterpret_cast<uint4*>(dst + m * a.K + n) = *reinterpret_cast<const uint4*>(sO + r * OS + c * 16);
    }
  }
  cp_async_wait<0>();
}

// ---- tiles and plans -------------------------------------------------------------------------------

struct PwTile {
  const char* name;
  int bm, bn, threads;
  void (*launch)(const PwArgs&, dim3, int64_t, cudaStream_t, DType);
};

template <int BM, int BN, int WM, int WN, int MB>
void launch_tile(const PwArgs& a, dim3 grid, int64_t smem, cudaStream_t stream, DType dt) {
  if (dt == DType::f16) {
    opt_in_dynamic_smem(reinterpret_cast<const void*>(pointwise_mma_kernel<__half, BM, BN, WM, WN, MB>), smem);
    launch_pdl(pointwise_mma_kernel<__half, BM, BN, WM, WN, MB>, dim3(grid), dim3(WM * WN * 32), size_t(smem), stream,
               a);
  } else {
    opt_in_dynamic_smem(reinterpret_cast<const void*>(pointwise_mma_kernel<__nv_bfloat16, BM, BN, WM, WN, MB>), smem);
    launch_pdl(pointwise_mma_kernel<__nv_bfloat16, BM, BN, WM, WN, MB>, dim3(grid), dim3(WM * WN * 32), size_t(smem),
               stream, a);
  }
}

// The variant -> kernel table (name, BM, BN, threads; WM x WN warps, at least MB blocks an SM by registers):
//   128x64w8   pointwise_mma_kernel<T, 128, 64, 4, 2, 3>    warp tile 32 x 32
//   64x64w8    pointwise_mma_kernel<T, 64, 64, 2, 4, 4>     warp tile 32 x 16
//   64x64w4    pointwise_mma_kernel<T, 64, 64, 2, 2, 4>     warp tile 32 x 32
// A variant is a tile name, with "/b1" for one filter tile in shared memory instead of two (less shared
// memory, so more blocks an SM where C is large; the next filter tile's load is then not overlapped).
// (A 128x128 tile with 64 x 32 warp tiles was measured slower than all three on every layer, and spilled.)
const std::vector<PwTile>& tiles() {
  static const std::vector<PwTile> t = {
      {"128x64w8", 128, 64, 256, launch_tile<128, 64, 4, 2, 3>},
      {"64x64w8", 64, 64, 256, launch_tile<64, 64, 2, 4, 4>},
      {"64x64w4", 64, 64, 128, launch_tile<64, 64, 2, 2, 4>},
  };
  return t;
}

constexpr int row_bytes_of(int64_t c) { return int((2 * ((c + 15) / 16) + 1) * 16); }

int64_t smem_of(const PwTile& t, int64_t c, int nbuf) {
  const int64_t rb = row_bytes_of(c);
  return (t.bm + nbuf * t.bn) * rb + int64_t(t.bm) * (2 * t.bn + 16);
}

constexpr int64_t kSmemPerSm = 228 * 1024, kSmemPerBlockMax = 227 * 1024;
// The 64x64 tiles with one filter tile fit a block for every C it takes (the heuristic relies on it).
static_assert((64 + 64) * int64_t(row_bytes_of(kMaxC)) + 64 * (2 * 64 + 16) <= kSmemPerBlockMax, "kMaxC fits");

int blocks_per_sm(const PwTile& t, int64_t c, int nbuf) {
  const int64_t s = smem_of(t, c, nbuf);
  if (s > kSmemPerBlockMax) return 0;
  return int(std::min<int64_t>(kSmemPerSm / (s + 1024), 2048 / t.threads));
}

struct PwPlan {
  const PwTile* tile = nullptr;
  int nbuf = 2;
  int splits = 1, tiles_per_split = 1, n_tiles = 1;
  int64_t m_tiles = 1, smem = 0;
  int blocks_per_sm = 0;
  std::string variant() const { return std::string(tile->name) + (nbuf == 1 ? "/b1" : ""); }
};

PwPlan plan_with(const PwTile& t, int nbuf, const Conv2dProblem& pb, int sms) {
  PwPlan p;
  p.tile = &t;
  p.nbuf = nbuf;
  const int64_t M = pb.n * pb.h * pb.w;
  p.m_tiles = std::max<int64_t>(1, (M + t.bm - 1) / t.bm);
  p.n_tiles = int((pb.k + t.bn - 1) / t.bn);
  p.smem = smem_of(t, pb.c, nbuf);
  p.blocks_per_sm = blocks_per_sm(t, pb.c, nbuf);
  // Split the output channels only where the pixel tiles alone fill fewer than two waves.
  const int64_t want = int64_t(2) * sms * std::max(1, p.blocks_per_sm);
  const int64_t splits = std::min<int64_t>(p.n_tiles, std::max<int64_t>(1, (want + p.m_tiles - 1) / p.m_tiles));
  p.tiles_per_split = int((p.n_tiles + splits - 1) / splits);
  p.splits = (p.n_tiles + p.tiles_per_split - 1) / p.tiles_per_split;
  return p;
}

// Every variant whose shared memory fits, the heuristic's first.
std::vector<PwPlan> candidate_plans(const Conv2dProblem& pb, int sms) {
  std::vector<PwPlan> out;
  for (const PwTile& t : tiles())
    for (int nbuf : {2, 1})
      if (blocks_per_sm(t, pb.c, nbuf) > 0) out.push_back(plan_with(t, nbuf, pb, sms));
  return out;
}

// The heuristic: 64x64w8, with one filter tile where that fits more blocks an SM than two (C > 160).
// NOTE: 64x64w8 was the fastest variant on 15 of the 17 layers of ConvNeXt-T and MobileNetV2 with C <= 192
// (H200, bf16 batch 32, docs/perf.md 2026-12-03), one filter tile the faster at C = 144 and 192.
PwPlan heuristic_plan(const Conv2dProblem& pb, int sms) {
  const PwTile& t = tiles()[1];
  // (one >= 1 for every C it takes: see the static_assert at kSmemPerBlockMax)
  const int two = blocks_per_sm(t, pb.c, 2), one = blocks_per_sm(t, pb.c, 1);
  return plan_with(t, one > two ? 1 : 2, pb, sms);
}

PwPlan plan_of(const Conv2dProblem& pb, const std::string& variant) {
  const int sms = sm_count_of_current_device();
  if (variant.empty()) return heuristic_plan(pb, sms);
  std::string known;
  for (const PwPlan& p : candidate_plans(pb, sms)) {
    if (p.variant() == variant) return p;
    known += (known.empty() ? "" : ", ") + p.variant();
  }
  throw Error(StatusCode::unsupported, "cuda_pointwise_mma has no variant '" + variant + "' for C = " +
                                           std::to_string(pb.c) + " (its variants there: " + known + ").");
}

class CudaPointwiseMma final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_pointwise_mma"; }
  std::string description() const override {
    return "1x1 convolutions as a GEMM whose block keeps its pixels' whole reduction in shared memory and walks "
           "the output channels, the epilogue on the fragments, 16-byte stores (f16/bf16 NHWC, C <= 512)";
  }
  Support can_implement(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (pb.r != 1 || pb.s != 1) return Support::no("it computes 1x1 convolutions only.");
    if (pb.stride_h != 1 || pb.stride_w != 1 || pb.pad_h != 0 || pb.pad_w != 0)
      return Support::no("it needs stride 1 and no padding (the input is then the plain [N*H*W][C] matrix).");
    if (pb.groups != 1) return Support::no("it computes ungrouped convolutions only.");
    if (cfg.layout != Layout::nhwc) return Support::no("it reads NHWC tensors only.");
    if (cfg.dtype == DType::f32) return Support::no("it computes f16/bf16 tensors only (fp32 accumulation).");
    if (pb.c % 8 != 0 || pb.k % 8 != 0)
      return Support::no("it needs C % 8 == 0 and K % 8 == 0 (16-byte rows of the input, filter and output).");
    if (pb.c > kMaxC)
      return Support::no("it keeps the whole reduction in shared memory: C <= " + std::to_string(kMaxC) + ".");
    if (pb.k > (int64_t(1) << 24)) return Support::no("K passes 2^24.");
    const int64_t M = pb.n * pb.h * pb.w;
    if ((M + 63) / 64 >= (int64_t(1) << 31)) return Support::no("more than 2^31 pixel tiles (grid.x).");
    return Support::yes();
  }
  Support accepts(const Conv2dProblem&, const ConvConfig&, const Operands& ops) const override {
    if (ops.per_sample) return Support::no("it has no per-sample-weights mode.");
    if (ops.src_align < 16 || ops.wei_align < 16 || ops.dst_align < 16)
      return Support::no("it needs 16-byte aligned input, filter and output (cp.async and 16-byte stores).");
    if (ops.has_residual && ops.residual_align < 4)
      return Support::no("it reads the residual two channels at a time: it must be 4-byte aligned.");
    return Support::yes();
  }
  // NOTE: where auto picks it: a SiLU or sigmoid epilogue on C <= 32 where cuda_igemm_wgmma has no
  // exact-width tile (exact_width_tile_wins, tile_rules.hpp), and on the one-pixel images of squeeze-excitation
  // (C <= 192, a few hundred rows). cuda_igemm_wgmma was faster on every other 1x1 layer of ResNet-50,
  // MobileNetV2 and EfficientNet-B0 (H100, 2026-12-06, alone, L2 flushed: 40 -> 240 at 28x28 + SiLU 0.0195
  // ms against 0.0230 here, 192 -> 1152 at 7x7 0.0109 against 0.0158; 16 -> 96 at 112x112 on its 128x96
  // tile 0.0728 against 0.0892). Narrowed from C <= 192 to C <= 32, EfficientNet-B0's fused forward as a
  // CUDA graph went from 1.321 to 1.290 ms. With C <= 32 and more columns than those tiles take it stays
  // here (24 -> 144 at 56x56 + SiLU 0.0482 against 0.0556 on the wave model's tile). Above C = 192 it holds
  // fewer blocks an SM.
  Support heuristic_choice(const Conv2dProblem& pb, const ConvConfig& cfg, const Operands& ops) const override {
    if (pb.c > 192)
      return Support::no("C > 192: fewer of its blocks fit an SM, and cuda_igemm_wgmma was faster there.");
    if (ops.activation != Activation::silu && ops.activation != Activation::sigmoid)
      return Support::no("cuda_igemm_wgmma was faster on 1x1 layers without a SiLU or sigmoid epilogue.");
    if (pb.h * pb.w > 1 && pb.c % 8 == 0 &&
        exact_width_tile_wins(int(dtype_size(cfg.dtype)), pb.groups, pb.gemm_k(), pb.gemm_n()))
      return Support::no("cuda_igemm_wgmma's exact-width tile was faster here (C <= 32 with K <= 144, or K <= 32).");
    if (pb.c > 32 && pb.h * pb.w > 1)
      return Support::no("C > 32 on images of more than one pixel: cuda_igemm_wgmma was faster there.");
    return Support::yes();
  }
  std::vector<std::string> variants(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (!cuda_present() || !can_implement(pb, cfg)) return {};
    const std::string chosen = plan_of(pb, "").variant();
    std::vector<std::string> out{chosen};
    for (const PwPlan& p : candidate_plans(pb, sm_count_of_current_device()))
      if (p.variant() != chosen) out.push_back(p.variant());
    return out;
  }
  std::string detail(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (!cuda_present() || !can_implement(pb, cfg)) return {};
    const PwPlan p = plan_of(pb, "");
    return "variant " + p.variant() + ", " + std::to_string(p.n_tiles) + " channel tiles" +
           (p.splits > 1 ? " in " + std::to_string(p.splits) + " splits" : std::string()) + ", " +
           std::to_string(p.smem / 1024) + " KiB smem, " + std::to_string(p.blocks_per_sm) + " blocks an SM";
  }
  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    const Operands ops = Operands::of(call.src, call.wei, call.dst, call.epilogue, call.per_sample);
    if (Support ok = accepts(pb, call.config, ops); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    check_residual_overlap(call.epilogue.residual, call.dst.data, size_t(pb.output_elems()) * dtype_size(call.config.dtype));
    const PwPlan p = plan_of(pb, call.variant);
    if (pb.output_elems() == 0) return;
    PwArgs a;
    a.src = call.src.data;
    a.wei = call.wei.data;
    a.dst = call.dst.data;
    a.bias = call.epilogue.bias;
    a.residual = call.epilogue.residual;
    a.act = call.epilogue.activation;
    a.alpha = call.epilogue.alpha;
    a.beta = call.epilogue.beta;
    a.M = pb.n * pb.h * pb.w;
    a.C = int(pb.c);
    a.K = int(pb.k);
    a.ksteps = int((pb.c + 15) / 16);
    a.row_bytes = row_bytes_of(pb.c);
    a.n_tiles = p.n_tiles;
    a.tiles_per_split = p.tiles_per_split;
    a.nbuf = p.nbuf;
    const dim3 grid(unsigned(p.m_tiles), unsigned(p.splits));
    p.tile->launch(a, grid, p.smem, as_stream(call.stream), call.config.dtype);
    CK_LAUNCH("pointwise_mma_kernel");
  }
};

}  // namespace

const Algorithm* make_cuda_pointwise_mma() {
  static CudaPointwiseMma algo;
  return &algo;
}

}  // namespace convkit::detail
