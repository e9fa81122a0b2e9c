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
// to nearest with cvt.rna.tf32.f32 after ldmatrix).
// The epilogue (bias, activation, alpha, beta*residual, output in the tensor dtype) is applied in
// registers on the way out; a residual aliasing dst is read by the thread that then overwrites it.
//
// Resources (sm_90, nvcc -Xptxas -v, 2026-11-29): 78-128 registers for the 64x32/32x32 warp tiles, 216-246
// for the 64x64 ones, no spills; dynamic smem 40-80 KiB (154 KiB for 256x128w8).
// measured (H200, 2026-11-29, bf16 NHWC batch 32, tuned variants, vs cuDNN in the same process; docs/perf.md):
// ResNet-50 geomean 0.50x (f16 0.48x, tf32 0.49x), 0.37x-0.59x per layer, the 3-channel stem 1.45x (0.158 vs
// 0.229 ms); seed000 1.036 ms, 298 TFLOP/s (43% of cuBLAS bf16). ncu: latency-bound (0.30 IPC per scheduler,
// no eligible warp 70% of cycles); each wave pays 9-19 us of fixed cost (docs/kernels.md).
#include "cuda/tc/igemm_mma.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/tc/tc_common.cuh"

namespace convkit::detail {
namespace {

constexpr int kBkBytes = 64;              // k depth of one pipeline stage: 32 f16/bf16 or 16 fp32 elements
constexpr int kRowBytes = kBkBytes + 16;  // NOTE: padded smem row (see the header: conflict-free ldmatrix)
constexpr int kChunksPerRow = kBkBytes / 16;
constexpr int kFar = -(1 << 30);  // row origin of pixels past M: every tap then reads as padding

struct MmaArgs {
  const void* src;
  const void* wei;
  void* dst;
  const void* bias;
  const void* residual;
  Activation act;
  float alpha, beta;
  float* ws;  // split-K partials [splits][Mtot][K] (fp32) or null
  int H, W, C, Cg, Q, R, S;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int PQ;
  int K;    // all output channels: the output's row length
  int Kpg;  // output channels per group: the GEMM's N
  int Kg;   // R*S*Cg: the GEMM's k
  int G;
  int nb;              // batch entries of the grid (N for per-sample weights, else 1)
  int64_t Mb;          // GEMM rows per batch entry (P*Q per-sample, else N*P*Q)
  int64_t Mtot;        // nb * Mb
  int64_t img_stride;  // H*W*C
  int64_t wei_b_stride, bias_b_stride;  // per batch entry (0 unless per-sample)
  int splits, tiles_per_split, num_k_tiles;
  int adv_c, adv_s, adv_r;  // one stage's k step written in the mixed radix (r, s, c): BKE = (adv_r*S + adv_s)*Cg + adv_c
  bool vec_ok;  // K and K/groups % 8 == 0, dst/residual/ws 16-byte aligned: 8 channels = whole vectors
};

// ---- PTX wrappers --------------------------------------------------------------------------------

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  // src-size 0 writes 16 zero bytes and reads nothing (the padding and everything past the edges).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  // volatile + "memory": never hoisted above the barrier that publishes the stage it reads.
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ uint32_t to_tf32(uint32_t bits) {
  uint32_t out;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(out) : "f"(__uint_as_float(bits)));
  return out;
}

// One warp-wide D += A*B on a 16 x 8 tile, k = 32 bytes of each operand.
template <typename T>
struct Mma;
template <>
struct Mma<__half> {
  static constexpr bool kTf32 = false;
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <>
struct Mma<__nv_bfloat16> {
  static constexpr bool kTf32 = false;
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <>
struct Mma<float> {
  static constexpr bool kTf32 = true;
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// Eight fp32 values stored as 8 elements of T: one 16-byte store for 16-bit types, two for fp32.
__device__ __forceinline__ void store8(__half* p, const float (&y)[8]) {
  uint4 u;
  __half2 h[4] = {__floats2half2_rn(y[0], y[1]), __floats2half2_rn(y[2], y[3]), __floats2half2_rn(y[4], y[5]),
                  __floats2half2_rn(y[6], y[7])};
  memcpy(&u, h, 16);
  *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&y)[8]) {
  uint4 u;
  __nv_bfloat162 h[4] = {__floats2bfloat162_rn(y[0], y[1]), __floats2bfloat162_rn(y[2], y[3]),
                         __floats2bfloat162_rn(y[4], y[5]), __floats2bfloat162_rn(y[6], y[7])};
  memcpy(&u, h, 16);
  *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ void store8(float* p, const float (&y)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(y[0], y[1], y[2], y[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(y[4], y[5], y[6], y[7]);
}

// ---- the kernel ------------------------------------------------------------------------------------
// A block of WM x WN warps computes a BM x BN tile of one (batch entry, group, k split); each warp a
// (BM/WM) x (BN/WN) tile as MI x NI mma tiles of 16 x 8. Grid: x = m tiles, y = n tiles,
// z = (batch entry * G + group) * splits + split.
template <typename T, int BM, int BN, int WM, int WN, int kStages, bool kAligned>
__global__ void __launch_bounds__(WM* WN * 32) igemm_mma_kernel(const MmaArgs a) {
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

  int z = int(blockIdx.z);
  const int split = z % a.splits;
  z /= a.splits;
  const int g = z % a.G;
  const int b = z / a.G;
  const int64_t m_block = int64_t(blockIdx.x) * BM;
  const int n_block = int(blockIdx.y) * BN;

  const T* src = static_cast<const T*>(a.src);
  const T* wei = static_cast<const T*>(a.wei) + int64_t(b) * a.wei_b_stride + int64_t(g) * a.Kpg * a.Kg;

  const int kt0 = split * a.tiles_per_split;
  const int nk = min(a.num_k_tiles - kt0, a.tiles_per_split);  // >= 1: the host leaves no split empty

  // ---- loader state: this thread fills chunk `chunk` of rows row0 + i*kRowsPerPass of A and B.
  const int chunk = tid % kChunksPerRow;
  const int row0 = tid / kChunksPerRow;
  int64_t a_base[kAIters];
  int a_h0[kAIters], a_w0[kAIters];
#pragma unroll
  for (int i = 0; i < kAIters; ++i) {
    const int64_t m = m_block + row0 + i * kRowsPerPass;
    if (m < a.Mb) {
      const int64_t mg = int64_t(b) * a.Mb + m;
      int64_t img;
      int pq;
      if (a.Mtot <= INT_MAX) {  // NOTE: 32-bit division (a 64-bit one is a ~100-instruction call)
        const unsigned u = unsigned(mg), upq = unsigned(a.PQ), ui = u / upq;
        img = ui;
        pq = int(u - ui * upq);
      } else {
        img = mg / a.PQ;
        pq = int(mg - img * a.PQ);
      }
      const int p = pq / a.Q, q = pq - p * a.Q;
      a_h0[i] = p * a.stride_h - a.pad_h;
      a_w0[i] = q * a.stride_w - a.pad_w;
      a_base[i] = img * a.img_stride + int64_t(g) * a.Cg;
    } else {
      a_h0[i] = kFar;
      a_w0[i] = kFar;
      a_base[i] = 0;
    }
  }
  const T* b_row[kBIters];
  bool b_ok[kBIters];
#pragma unroll
  for (int j = 0; j < kBIters; ++j) {
    const int n = n_block + row0 + j * kRowsPerPass;
    b_ok[j] = n < a.Kpg;
    b_row[j] = wei + int64_t(b_ok[j] ? n : 0) * a.Kg;
  }
  // The k of this thread's chunk and its filter tap (r, s) and channel c, advanced by BKE per stage.
  int kk0 = kt0 * BKE + chunk * CE;
  int kc, kr, ks;
  {
    const int rs = kk0 / a.Cg;
    kc = kk0 - rs * a.Cg;
    kr = rs / a.S;
    ks = rs - kr * a.S;
  }

  // Moves (kr, ks, kc) on by one stage, BKE elements of k: a mixed-radix add with one carry per digit.
  auto advance = [&]() {
    kc += a.adv_c;
    int carry = kc >= a.Cg;
    kc -= carry ? a.Cg : 0;
    ks += a.adv_s + carry;
    carry = ks >= a.S;
    ks -= carry ? a.S : 0;
    kr += a.adv_r + carry;
  };

  auto load_stage = [&](int slot) {
    const uint32_t sA = smem_base + slot * kStageBytes, sB = sA + kAStage;
    if constexpr (kAligned) {
      const bool k_ok = kr < a.R;  // k < Kg
      const int dh = kr * a.dil_h, dw = ks * a.dil_w;
#pragma unroll
      for (int i = 0; i < kAIters; ++i) {
        const int h = a_h0[i] + dh, w = a_w0[i] + dw;
        const bool ok = k_ok && unsigned(h) < unsigned(a.H) && unsigned(w) < unsigned(a.W);
        const T* p = ok ? src + a_base[i] + (int64_t(h) * a.W + w) * a.C + kc : src;
        cp_async16(sA + (row0 + i * kRowsPerPass) * kRowBytes + chunk * 16, p, ok);
      }
#pragma unroll
      for (int j = 0; j < kBIters; ++j) {
        const bool ok = k_ok && b_ok[j];
        cp_async16(sB + (row0 + j * kRowsPerPass) * kRowBytes + chunk * 16, ok ? b_row[j] + kk0 : wei, ok);
      }
      kk0 += BKE;
      advance();
    } else {
      // General C: element gathers (each element of the chunk has its own tap), zero-filled, stored as one
      // 16-byte row piece so the layout is the fast path's.
      // NOTE: the taps of the chunk's elements by carries from the chunk's first one; a division per element
      // (the first version) made the 3-channel stem instruction-bound (0.51 ms, 2.2x cuDNN bf16).
      int e_dh[CE], e_dw[CE], e_c[CE];
      bool e_ok[CE];
      {
        int c = kc, ss = ks, r = kr;
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
        for (int e = 0; e < CE; ++e) v[e] = (b_ok[j] && e_ok[e]) ? b_row[j][kk0 + e] : float_to_elem<T>(0.0f);
        *reinterpret_cast<uint4*>(sptr + kAStage + (row0 + j * kRowsPerPass) * kRowBytes + chunk * 16) =
            *reinterpret_cast<const uint4*>(v);
      }
      kk0 += BKE;
      advance();
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

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
          for (int e = 0; e < 4; ++e) af[buf][i][e] = to_tf32(af[buf][i][e]);
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          bf[buf][j][0] = to_tf32(bf[buf][j][0]);
          bf[buf][j][1] = to_tf32(bf[buf][j][1]);
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
  //    one 16-byte store of 16-bit outputs (two for fp32); a warp covers whole 128-byte lines.
  // NOTE: the direct fragment stores (4 bytes per thread, 8 rows per instruction) ran at ~0.4 TB/s on the
  // H200 (1x1 64->256 at 56x56: 0.127 ms, 5.9x cuDNN); see docs/kernels.md.
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
  const EpilogueTc<T> epi{static_cast<const T*>(a.bias), static_cast<const T*>(a.residual), a.act, a.alpha,
                          a.beta};
  T* dst = static_cast<T*>(a.dst);
  // No residual, alpha == 1 and at most relu: the short epilogue (see below).
  const bool simple = epi.residual == nullptr && epi.alpha == 1.0f &&
                      (epi.activation == Activation::none || epi.activation == Activation::relu);
  constexpr int kCpr = BN / 8;  // 8-channel chunks per tile row
  for (int idx = tid; idx < BM * kCpr; idx += kThreads) {
    const int r = idx / kCpr, cc = idx - r * kCpr;
    const int64_t m = m_block + r;
    const int n0 = n_block + cc * 8;
    if (m >= a.Mb || n0 >= a.Kpg) continue;
    const int64_t mg = int64_t(b) * a.Mb + m;
    const int k0 = g * a.Kpg + n0;
    const int cnt = min(8, a.Kpg - n0);
    const float* v = &ctile[r * CS + cc * 8];
    if (a.ws != nullptr) {
      float* p = a.ws + (int64_t(split) * a.Mtot + mg) * a.K + k0;
      if (cnt == 8 && a.vec_ok) {
        reinterpret_cast<float4*>(p)[0] = *reinterpret_cast<const float4*>(v);
        reinterpret_cast<float4*>(p)[1] = *reinterpret_cast<const float4*>(v + 4);
      } else {
        for (int e = 0; e < cnt; ++e) p[e] = v[e];
      }
      continue;
    }
    const int64_t o = mg * a.K + k0;
    const int64_t bk = int64_t(b) * a.bias_b_stride + k0;
    if (cnt == 8 && a.vec_ok) {
      float y[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) y[e] = v[e];
      if (simple) {
        // NOTE: the common fused forms (conv, + bias, + relu) without the general epilogue's per-element
        // tests; at k = 64 the epilogue is most of the kernel's instructions (ncu, H200).
        if (epi.bias != nullptr) {
#pragma unroll
          for (int e = 0; e < 8; ++e) y[e] += elem_to_float<T>(epi.bias[bk + e]);
        }
        if (epi.activation == Activation::relu) {
#pragma unroll
          for (int e = 0; e < 8; ++e) y[e] = fmaxf(y[e], 0.0f);
        }
      } else {
        alignas(16) T res[8];
        if (epi.residual != nullptr) {
          if constexpr (ES == 2) {
            *reinterpret_cast<uint4*>(res) = *reinterpret_cast<const uint4*>(epi.residual + o);
          } else {
            reinterpret_cast<uint4*>(res)[0] = reinterpret_cast<const uint4*>(epi.residual + o)[0];
            reinterpret_cast<uint4*>(res)[1] = reinterpret_cast<const uint4*>(epi.residual + o)[1];
          }
        }
#pragma unroll
        for (int e = 0; e < 8; ++e)
          y[e] = apply_epilogue<float>(epi.activation, epi.alpha, epi.beta, y[e], epi.bias != nullptr,
                                       epi.bias != nullptr ? elem_to_float<T>(epi.bias[bk + e]) : 0.0f,
                                       epi.residual != nullptr, epi.residual != nullptr ? elem_to_float<T>(res[e]) : 0.0f);
      }
      store8(dst + o, y);
    } else {
      for (int e = 0; e < cnt; ++e) dst[o + e] = float_to_elem<T>(epi(v[e], bk + e, o + e));
    }
  }
}

// Adds the split-K partials in split order and applies the epilogue: one thread per output element.
template <typename T>
__global__ void __launch_bounds__(256) mma_splitk_reduce_kernel(const MmaArgs a) {
  const EpilogueTc<T> epi{static_cast<const T*>(a.bias), static_cast<const T*>(a.residual), a.act, a.alpha,
                          a.beta};
  T* dst = static_cast<T*>(a.dst);
  const int64_t total = a.Mtot * a.K, plane = total;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int sp = 0; sp < a.splits; ++sp) s += a.ws[sp * plane + o];
    const int64_t mg = o / a.K;
    const int k = int(o - mg * a.K);
    const int64_t b = mg / a.Mb;
    dst[o] = float_to_elem<T>(epi(s, b * a.bias_b_stride + k, o));
  }
}

// ---- tiles and plans -------------------------------------------------------------------------------

using LaunchFn = void (*)(const MmaArgs&, dim3, cudaStream_t, bool aligned);
using OccFn = int (*)();

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
    igemm_mma_kernel<T, BM, BN, WM, WN, ST, true><<<grid, WM * WN * 32, smem, stream>>>(a);
  } else {
    prepare_kernel<T, BM, BN, WM, WN, ST, false>();
    igemm_mma_kernel<T, BM, BN, WM, WN, ST, false><<<grid, WM * WN * 32, smem, stream>>>(a);
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

struct Tile {
  int bm, bn, warps;
  // The wave model's two costs (see evaluate()), fitted to the H200: a wave's fixed part (prologue, pipeline
  // fill, epilogue) and its part per k slice (32 16-bit / 16 fp32 elements of k), in microseconds.
  double wave_us, slice_us;
  LaunchFn launch;
  OccFn blocks_per_sm;
  std::string name() const { return std::to_string(bm) + "x" + std::to_string(bn) + "w" + std::to_string(warps); }
};

constexpr int kNumTiles = 6;

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

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int kMaxSplits = 16;
constexpr int kMinTilesPerSplit = 4;                  // k >= 4 stages per split
constexpr int64_t kMaxWorkspace = int64_t(1) << 30;  // 1 GiB of partials at most

// The shape of the grid the plan runs: the GEMM per (batch entry, group).
struct Shape {
  int64_t Mb = 0;  // rows per entry
  int64_t n = 0;   // columns (K/groups)
  int64_t G = 1, nb = 1;
  int64_t k = 0;   // R*S*C/groups
  int64_t K = 0;   // all output channels
  int es = 2;      // element size
};

struct Plan {
  const Tile* tile = nullptr;
  int splits = 1, tiles_per_split = 0, num_k_tiles = 0;
  int64_t blocks = 0;
  size_t ws_bytes = 0;
  double model_us = 0;
  std::string variant() const { return tile->name() + "/k" + std::to_string(splits); }
};

// The modelled time of one (tile, splits) choice, a wave model: the blocks (tiles x splits) run in waves of
// blocks_per_sm x SMs; each wave costs the tile's fixed part plus its per-slice part times the slices of one
// split (a partial last wave costs a whole one: its blocks take as long). Split-K adds the fp32 partials
// (0.26 ms per 10^9 outputs x splits: written, then read by the reduce) and the reduce's launch (8.7 us),
// fitted with the tile costs. E.g. (batch 32) 3x3 512@7 -> 128x128w4 with 5 splits, 1x1 64->64@56 ->
// 128x64w4, seed000 -> 128x128w8.
Plan evaluate(const Shape& s, const Tile& t, int splits, int sms, int64_t num_k_tiles) {
  Plan p;
  const int tps = int(ceil_div(num_k_tiles, splits));
  p.tile = &t;
  p.splits = int(ceil_div(num_k_tiles, tps));
  p.tiles_per_split = tps;
  p.num_k_tiles = int(num_k_tiles);
  const int64_t tiles_mn = ceil_div(s.Mb, t.bm) * ceil_div(s.n, t.bn) * s.G * s.nb;
  p.blocks = tiles_mn * p.splits;
  p.ws_bytes = p.splits > 1 ? size_t(p.splits) * size_t(s.nb * s.Mb) * size_t(s.K) * sizeof(float) : 0;
  const int64_t waves = ceil_div(p.blocks, int64_t(t.blocks_per_sm()) * sms);
  double us = double(waves) * (t.wave_us + double(tps) * t.slice_us);
  if (p.splits > 1) us += 0.26e-6 * double(s.nb * s.Mb) * double(s.K) * p.splits + 8.7;
  p.model_us = us;
  return p;
}

// Calls f(plan) for every plan worth having, tile by tile, split counts increasing (a split count that gives
// the same plan as a smaller one, or leaves a split under kMinTilesPerSplit slices, is skipped).
template <typename T, typename F>
void for_each_plan(const Shape& s, int sms, F&& f) {
  const int64_t num_k_tiles = ceil_div(s.k, kBkBytes / s.es);
  for (const Tile& t : tiles<T>()) {
    int last_splits = 0;
    for (int want = 1; want <= kMaxSplits; ++want) {
      const Plan p = evaluate(s, t, want, sms, num_k_tiles);
      if (p.splits == last_splits) continue;  // the same plan as a smaller request
      if (p.splits > 1 && (p.tiles_per_split < kMinTilesPerSplit || p.ws_bytes > size_t(kMaxWorkspace) ||
                           s.nb * s.G * p.splits > 65535 || s.nb * s.Mb * s.K > (int64_t(1) << 40)))
        continue;
      last_splits = p.splits;
      f(p);
    }
  }
}

template <typename T>
std::vector<Plan> candidate_plans(const Shape& s, int sms) {
  std::vector<Plan> out;
  for_each_plan<T>(s, sms, [&](const Plan& p) { out.push_back(p); });
  return out;
}

// A variant's name read as numbers ("128x64w4/k2"), so that run() compares integers, not strings.
struct VariantId {
  int bm = 0, bn = 0, warps = 0, splits = 0;  // splits == 0: none
  static VariantId parse(const char* v) {
    VariantId id;
    char tail = 0;
    if (std::sscanf(v, "%dx%dw%d/k%d%c", &id.bm, &id.bn, &id.warps, &id.splits, &tail) != 4 || id.splits < 1)
      return {};
    return id;
  }
  bool matches(const Plan& p) const {
    return splits == p.splits && bm == p.tile->bm && bn == p.tile->bn && warps == p.tile->warps;
  }
};

// NOTE: allocation-free: run() calls it on every launch, inside the benchmark's timed loop.
template <typename T>
Plan choose_plan(const Shape& s, int sms, const std::string& variant) {
  // CONVKIT_MMA_VARIANT=128x64w4/k2 forces a variant (ignored when it does not exist for the problem).
  const char* forced = variant.empty() ? std::getenv("CONVKIT_MMA_VARIANT") : variant.c_str();
  const VariantId want = forced != nullptr ? VariantId::parse(forced) : VariantId{};
  Plan best, named;
  for_each_plan<T>(s, sms, [&](const Plan& p) {
    if (want.splits > 0 && want.matches(p)) named = p;
    if (best.tile == nullptr || p.model_us < best.model_us) best = p;  // 128x128w8/k1 comes first, always valid
  });
  if (named.tile != nullptr) return named;
  if (!variant.empty())
    throw Error(StatusCode::invalid_problem, "cuda_igemm_mma has no variant '" + variant + "' for this problem.");
  return best;
}

Shape shape_of(const Conv2dProblem& p, DType dt, bool per_sample) {
  Shape s;
  s.nb = per_sample ? p.n : 1;
  s.Mb = per_sample ? p.p() * p.q() : p.gemm_m();
  s.n = p.gemm_n();
  s.G = p.groups;
  s.k = p.gemm_k();
  s.K = p.k;
  s.es = int(dtype_size(dt));
  return s;
}

template <typename T>
Plan plan_for(const Shape& s, const std::string& variant) {
  return choose_plan<T>(s, sm_count_of_current_device(), variant);
}

Plan plan_of(DType dt, const Shape& s, const std::string& variant) {
  switch (dt) {
    case DType::f16: return plan_for<__half>(s, variant);
    case DType::bf16: return plan_for<__nv_bfloat16>(s, variant);
    case DType::f32: return plan_for<float>(s, variant);
  }
  return plan_for<float>(s, variant);
}

Support limits(const Conv2dProblem& p) {
  if (Support ok = require_pixel_coords_below_2_30(p); !ok) return ok;  // see kFar
  if (p.p() * p.q() > INT_MAX) return Support::no("P*Q passes 2^31 (32-bit pixel index within an image).");
  if (p.gemm_k() > INT_MAX / 2) return Support::no("C/groups*R*S passes 2^30 (32-bit k index).");
  if (p.c > INT_MAX || p.k > INT_MAX) return Support::no("C or K passes 2^31 (32-bit channel index).");
  if (ceil_div(p.gemm_n(), 64) > 65535) return Support::no("K/groups passes 65535*64 (grid.y).");
  if (p.groups > 65535) return Support::no("more than 65535 groups (grid.z).");
  if (ceil_div(p.gemm_m(), 64) > INT_MAX) return Support::no("N*P*Q passes 2^37 (grid.x).");
  return Support::yes();
}

// Fills the kernel arguments and launches the plan (and the reduce when it splits k).
void launch(const Conv2dProblem& pb, DType dt, bool per_sample, const TensorView& src, const TensorView& wei,
            const TensorView& dst, const Epilogue& e, const Plan& plan, void* workspace, size_t workspace_bytes,
            cudaStream_t stream) {
  check_residual_overlap(e.residual, dst.data, dst.bytes());
  if (plan.ws_bytes > 0 && (workspace == nullptr || workspace_bytes < plan.ws_bytes))
    throw Error(StatusCode::invalid_tensor, "cuda_igemm_mma needs " + std::to_string(plan.ws_bytes) +
                                                " bytes of workspace (split-K partials) but was given " +
                                                std::to_string(workspace == nullptr ? 0 : workspace_bytes) + ".");
  MmaArgs a{};
  a.src = src.data;
  a.wei = wei.data;
  a.dst = dst.data;
  a.bias = e.bias;
  a.residual = e.residual;
  a.act = e.activation;
  a.alpha = e.alpha;
  a.beta = e.beta;
  a.ws = plan.splits > 1 ? static_cast<float*>(workspace) : nullptr;
  a.H = int(pb.h);
  a.W = int(pb.w);
  a.C = int(pb.c);
  a.Cg = int(pb.c_per_group());
  a.Q = int(pb.q());
  a.R = int(pb.r);
  a.S = int(pb.s);
  a.stride_h = int(pb.stride_h);
  a.stride_w = int(pb.stride_w);
  a.pad_h = int(pb.pad_h);
  a.pad_w = int(pb.pad_w);
  a.dil_h = int(pb.dilation_h);
  a.dil_w = int(pb.dilation_w);
  a.PQ = int(pb.p() * pb.q());
  a.K = int(pb.k);
  a.Kpg = int(pb.gemm_n());
  a.Kg = int(pb.gemm_k());
  a.G = int(pb.groups);
  a.nb = per_sample ? int(pb.n) : 1;
  a.Mb = per_sample ? int64_t(a.PQ) : pb.gemm_m();
  a.Mtot = a.Mb * a.nb;
  a.img_stride = pb.h * pb.w * pb.c;
  a.wei_b_stride = per_sample ? pb.k * pb.gemm_k() : 0;
  a.bias_b_stride = per_sample ? pb.k : 0;
  a.splits = plan.splits;
  a.tiles_per_split = plan.tiles_per_split;
  a.num_k_tiles = plan.num_k_tiles;
  {
    const int bke = kBkBytes / int(dtype_size(dt));
    a.adv_c = bke % a.Cg;
    a.adv_s = (bke / a.Cg) % a.S;
    a.adv_r = bke / (a.Cg * a.S);
  }
  a.vec_ok = a.K % 8 == 0 && a.Kpg % 8 == 0 && reinterpret_cast<uintptr_t>(dst.data) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(e.residual) % 16 == 0 && reinterpret_cast<uintptr_t>(a.ws) % 16 == 0;
  const int ce = 16 / int(dtype_size(dt));
  const bool aligned = a.Cg % ce == 0 && reinterpret_cast<uintptr_t>(src.data) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(wei.data) % 16 == 0;
  const Tile& t = *plan.tile;
  const dim3 grid(unsigned(ceil_div(a.Mb, t.bm)), unsigned(ceil_div(a.Kpg, t.bn)),
                  unsigned(int64_t(a.nb) * a.G * plan.splits));
  t.launch(a, grid, stream, aligned);
  CK_LAUNCH("igemm_mma_kernel");
  if (plan.splits > 1) {
    const int64_t total = a.Mtot * a.K;
    const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(total, 256), 132 * 16));
    switch (dt) {
      case DType::f16: mma_splitk_reduce_kernel<__half><<<blocks, 256, 0, stream>>>(a); break;
      case DType::bf16: mma_splitk_reduce_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(a); break;
      case DType::f32: mma_splitk_reduce_kernel<float><<<blocks, 256, 0, stream>>>(a); break;
    }
    CK_LAUNCH("mma_splitk_reduce_kernel");
  }
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
      case DType::f16: all = candidate_plans<__half>(s, sm_count_of_current_device()); break;
      case DType::bf16: all = candidate_plans<__nv_bfloat16>(s, sm_count_of_current_device()); break;
      case DType::f32: all = candidate_plans<float>(s, sm_count_of_current_device()); break;
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
  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    const Plan plan = plan_of(call.config.dtype, shape_of(pb, call.config.dtype, false), call.variant);
    launch(pb, call.config.dtype, false, call.src, call.wei, call.dst, call.epilogue, plan, call.workspace,
           call.workspace_bytes, as_stream(call.stream));
  }
};

}  // namespace

bool mma_per_sample_supported(const Conv2dProblem& p, const TensorView& src) {
  if (src.device != Device::cuda || src.layout != Layout::nhwc) return false;
  if (src.dtype != DType::f16 && src.dtype != DType::bf16) return false;
  if (!limits(p)) return false;
  if (p.n * p.groups > 65535) return false;
  return true;
}

void mma_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei, const TensorView& dst,
                    const Epilogue& e, void* stream) {
  // NOTE: never split k here: the batch already gives N times the blocks of one image, and a per-sample
  // call has no workspace.
  const Shape s = shape_of(p, src.dtype, true);
  Plan plan = plan_of(src.dtype, s, "");
  if (plan.splits > 1) {
    const std::string no_split = plan.tile->name() + "/k1";
    plan = plan_of(src.dtype, s, no_split);
  }
  launch(p, src.dtype, true, src, wei, dst, e, plan, nullptr, 0, as_stream(stream));
}

const Algorithm* make_cuda_igemm_mma() {
  static CudaIgemmMma algo;
  return &algo;
}

}  // namespace convkit::detail
