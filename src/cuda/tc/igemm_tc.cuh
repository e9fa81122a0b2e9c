// What the implicit-GEMM tensor-core kernels fed by a cp.async loader (cuda_igemm_mma, cuda_igemm_wgmma)
// share: the kernel arguments and their filling on the host, the cp.async wrappers, the decode of the A rows
// (output pixels), the epilogue from an fp32 tile staged in shared memory, the split-K reduce and the
// problem limits. Their tile tables' model (the wave-model costs, the plans, the variant names) is in
// tc_plan.cuh.
// Everything is in an anonymous namespace: each translation unit (igemm_mma.cu is built for the project's
// architectures, igemm_wgmma.cu for sm_90a only) has its own copy of the kernels, so a launch always goes to
// the module of the unit that makes it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/overrides.hpp"
#include "convkit/problem.hpp"
#include "convkit/tensor.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/vec.cuh"
#include "cuda/tc/tc_common.cuh"
#include "cuda/tc/tc_plan.cuh"

namespace convkit::detail {
namespace {

constexpr int kFar = -(1 << 30);  // row origin of pixels past M: every tap then reads as padding


struct TcArgs {
  const void* src;
  const void* wei;
  void* dst;
  const void* bias;
  const void* residual;
  Activation act;
  float alpha, beta;
  float* ws;  // split-K partials [splits][Mtot][K] (fp32) or null
  int* tile_counts;  // (cuda_igemm_wgmma) with ws: one arrival count per output tile, zero before the launch;
                     // the splits of a tile wait for each other and each sums and stores a share of its rows
                     // (no reduce kernel; a cooperative launch: every block resident at once)
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
  bool a_by_tma;  // (cuda_igemm_wgmma) A's stages come by TMA too, not gathered by the threads: as the plain
                  // [N*H*W][C] matrix (1x1, stride 1, no padding, one group) or, with a_im2col, by the
                  // TMA's im2col mode (one filter tap and 128 bytes of channels per stage)
  bool a_im2col;
};

// The bytes of a launch's filters: [K][R*S*Cg], or N of them with per-sample weights (what the kernels may
// prefetch into L2 before they wait for the kernel before them: prefetch_l2_share, launch.cuh).
template <typename T>
__device__ __forceinline__ int64_t filter_bytes(const TcArgs& a) {
  return (a.wei_b_stride != 0 ? a.wei_b_stride * a.nb : int64_t(a.K) * a.Kg) * int64_t(sizeof(T));
}


// ---- the block's place in the grid -------------------------------------------------------------------
// x = m tiles, y = n tiles, z = (batch entry * G + group) * splits + split.
struct BlockPos {
  int split, g, b;
  int64_t m_block;
  int n_block;
};
template <int BM, int BN>
__device__ __forceinline__ BlockPos block_pos(const TcArgs& a) {
  BlockPos p;
  int z = int(blockIdx.z);
  p.split = z % a.splits;
  z /= a.splits;
  p.g = z % a.G;
  p.b = z / a.G;
  p.m_block = int64_t(blockIdx.x) * BM;
  p.n_block = int(blockIdx.y) * BN;
  return p;
}

// Eight fp32 values stored as 8 16-bit elements: one 16-byte store.
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
// 16 bytes of output: 8 16-bit values or 4 fp32 ones (store_output_tile's chunk).
template <typename T>
__device__ __forceinline__ void store_chunk(T* p, const float (&y)[8]) { store8(p, y); }
__device__ __forceinline__ void store_chunk(float* p, const float (&y)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(y[0], y[1], y[2], y[3]);
}

// ---- the filter-tap walk ----------------------------------------------------------------------------
// The k index of a thread's 16-byte chunk and its filter tap (r, s) and channel c (k = (r*S + s)*Cg + c),
// moved on one pipeline stage (bke elements) at a time by a mixed-radix add with one carry per digit: no
// division in the k loop (the increments adv_c/adv_s/adv_r come from the host).
struct TapWalk {
  int kk, c, s, r;
  __device__ __forceinline__ void start(const TcArgs& a, int k) {
    kk = k;
    const int rs = k / a.Cg;
    c = k - rs * a.Cg;
    r = rs / a.S;
    s = rs - r * a.S;
  }
  __device__ __forceinline__ void advance(const TcArgs& a, int bke) {
    kk += bke;
    c += a.adv_c;
    int carry = c >= a.Cg;
    c -= carry ? a.Cg : 0;
    s += a.adv_s + carry;
    carry = s >= a.S;
    s -= carry ? a.S : 0;
    r += a.adv_r + carry;
  }
};

// ---- the A rows: output pixel m of this block -> its image's base offset and the window origin --------
// A thread loads rows row0 + i*kRowsPerPass (i < kIters) of the BM-row block at m_block of batch entry b,
// group g. Rows past Mb get the far origin kFar: every tap then tests as padding (zero-filled).
template <int kIters, int kRowsPerPass>
__device__ __forceinline__ void decode_a_rows(const TcArgs& a, int64_t m_block, int row0, int b, int g,
                                              int64_t (&base)[kIters], int (&h0)[kIters], int (&w0)[kIters]) {
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
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
      h0[i] = p * a.stride_h - a.pad_h;
      w0[i] = q * a.stride_w - a.pad_w;
      base[i] = img * a.img_stride + int64_t(g) * a.Cg;
    } else {
      h0[i] = kFar;
      w0[i] = kFar;
      base[i] = 0;
    }
  }
}

// ---- the epilogue from shared memory ---------------------------------------------------------------
// ctile: the block's BM x BN fp32 accumulators, row stride CS floats. Each thread takes 16 bytes of
// consecutive output channels of one pixel (8 16-bit or 4 fp32 outputs): one 16-byte load of the residual,
// one 16-byte store; a warp covers whole 128-byte lines. to_partials (split-K): the fp32 partials go to the
// workspace, 4 per thread, and the reduce (or the tile's last split) applies the epilogue.
// NOTE: fp32 outputs were 8 per thread (two 16-byte stores each covering half of every 32-byte sector; ncu
// flagged 16 of 32 bytes used per sector on tf32 3x3 256@14).
// NOTE: the direct fragment stores (4 bytes per thread, 8 rows per instruction) ran at ~0.4 TB/s on the
// H200 (1x1 64->256 at 56x56: 0.127 ms, 5.9x cuDNN); see docs/kernels.md.
template <typename T, int BM, int BN, int kThreads>
__device__ __forceinline__ void store_output_tile(const TcArgs& a, const float* ctile, int CS, int64_t m_block,
                                                  int n_block, int b, int g, int split, int tid,
                                                  bool to_partials, int r_begin = 0, int r_end = BM) {
  constexpr int ES = int(sizeof(T));
  const DeviceEpilogue<T> epi{static_cast<const T*>(a.bias), static_cast<const T*>(a.residual), a.act, a.alpha,
                          a.beta};
  T* dst = static_cast<T*>(a.dst);
  // No residual, alpha == 1 and at most relu: the short epilogue (see below).
  const bool simple = epi.residual == nullptr && epi.alpha == 1.0f &&
                      (epi.activation == Activation::none || epi.activation == Activation::relu);
  if (to_partials) {
    constexpr int kPpr = BN / 4;  // 4-channel (16-byte) pieces per tile row: a warp stores whole 128-byte lines
    for (int idx = tid; idx < BM * kPpr; idx += kThreads) {
      const int r = idx / kPpr, c = (idx - r * kPpr) * 4;
      const int64_t m = m_block + r;
      const int n0 = n_block + c;
      if (m >= a.Mb || n0 >= a.Kpg) continue;
      float* p = a.ws + (int64_t(split) * a.Mtot + int64_t(b) * a.Mb + m) * a.K + g * a.Kpg + n0;
      const float* v = &ctile[r * CS + c];
      if (a.vec_ok && n0 + 4 <= a.Kpg) {
        *reinterpret_cast<float4*>(p) = *reinterpret_cast<const float4*>(v);
      } else {
        for (int e = 0; e < min(4, a.Kpg - n0); ++e) p[e] = v[e];
      }
    }
    return;
  }
  constexpr int CH = 16 / ES;    // channels per thread: one 16-byte store (8 16-bit or 4 fp32 outputs)
  constexpr int kCpr = BN / CH;  // chunks per tile row
  for (int idx = tid; idx < (r_end - r_begin) * kCpr; idx += kThreads) {
    const int r = r_begin + idx / kCpr, cc = idx % kCpr;
    const int64_t m = m_block + r;
    const int n0 = n_block + cc * CH;
    if (m >= a.Mb || n0 >= a.Kpg) continue;
    const int64_t mg = int64_t(b) * a.Mb + m;
    const int k0 = g * a.Kpg + n0;
    const int cnt = min(CH, a.Kpg - n0);
    const float* v = &ctile[r * CS + cc * CH];
    const int64_t o = mg * a.K + k0;
    const int64_t bk = int64_t(b) * a.bias_b_stride + k0;
    if (cnt == CH && a.vec_ok) {
      float y[CH];
#pragma unroll
      for (int e = 0; e < CH; ++e) y[e] = v[e];
      if (simple) {
        // NOTE: the common fused forms (conv, + bias, + relu) without the general epilogue's per-element
        // tests; at k = 64 the epilogue is most of the kernel's instructions (ncu, H200).
        if (epi.bias != nullptr) {
#pragma unroll
          for (int e = 0; e < CH; ++e) y[e] += elem_to_float<T>(epi.bias[bk + e]);
        }
        if (epi.activation == Activation::relu) {
#pragma unroll
          for (int e = 0; e < CH; ++e) y[e] = fmaxf(y[e], 0.0f);
        }
      } else {
        alignas(16) T res[CH];
        if (epi.residual != nullptr) *reinterpret_cast<uint4*>(res) = *reinterpret_cast<const uint4*>(epi.residual + o);
#pragma unroll
        for (int e = 0; e < CH; ++e)
          y[e] = epilogue_out<T>(epi.activation, epi.alpha, epi.beta, y[e], epi.bias != nullptr,
                                 epi.bias != nullptr ? elem_to_float<T>(epi.bias[bk + e]) : 0.0f,
                                 epi.residual != nullptr, epi.residual != nullptr ? elem_to_float<T>(res[e]) : 0.0f);
      }
      store_chunk(dst + o, y);
    } else {
      for (int e = 0; e < cnt; ++e) dst[o + e] = float_to_elem<T>(epi(v[e], bk + e, o + e));
    }
  }
}

// Split-K without a reduce kernel (a.tile_counts; the launch is cooperative, so every block is resident and
// waiting for another block cannot deadlock): after each split has stored its partial tile, the block counts
// itself in (release: its partial made visible first) and waits until every split of the tile has; then
// split s sums rows [r_begin, r_end) (its 1/splits share of the tile) of every split's partial in split
// order (the reduce kernel's order: the result does not depend on which split came last) into ctile. The
// caller stores those rows as the output. sync(): the consumer threads' barrier.
// NOTE: the first version had the tile's last split to arrive sum the whole tile: one SM reading
// (splits - 1) partial tiles (0.5 MB for 128x256, 5 splits) ran slower than the reduce kernel (H200:
// bf16 3x3 512@7 0.0309 -> 0.0352 ms).
template <int BM, int BN, int kThreads, typename Sync>
__device__ __forceinline__ void split_rows_summed(const TcArgs& a, float* ctile, int CS, int64_t m_block, int n_block,
                                                  int b, int g, int split, int tid, int& r_begin, int& r_end,
                                                  Sync sync) {
  __threadfence();
  sync();
  if (tid == 0) {
    int* count = &a.tile_counts[int64_t(blockIdx.x) +
                                int64_t(gridDim.x) * (blockIdx.y + int64_t(gridDim.y) * (blockIdx.z / a.splits))];
    atomicAdd(count, 1);
    int seen = 0;
    for (;;) {
      asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(count) : "memory");
      if (seen >= a.splits) break;
      __nanosleep(100);
    }
  }
  sync();
  __threadfence();  // (acquire, for every thread: the other splits' partials)
  const int share = (BM + a.splits - 1) / a.splits;
  r_begin = min(BM, split * share);
  r_end = min(BM, r_begin + share);
  const int64_t plane = a.Mtot * a.K;
  constexpr int kPpr = BN / 4;  // 4-channel pieces per tile row
  for (int idx = tid; idx < (r_end - r_begin) * kPpr; idx += kThreads) {
    const int r = r_begin + idx / kPpr, c = (idx % kPpr) * 4;
    const int64_t m = m_block + r;
    const int n0 = n_block + c;
    if (m >= a.Mb || n0 >= a.Kpg) continue;
    const float* p = a.ws + (int64_t(b) * a.Mb + m) * a.K + g * a.Kpg + n0;
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (a.vec_ok && n0 + 4 <= a.Kpg) {
#pragma unroll 4
      for (int sp = 0; sp < a.splits; ++sp) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(p + sp * plane));
        s[0] += v.x, s[1] += v.y, s[2] += v.z, s[3] += v.w;
      }
    } else {
      for (int sp = 0; sp < a.splits; ++sp)
        for (int e = 0; e < min(4, a.Kpg - n0); ++e) s[e] += __ldcg(p + sp * plane + e);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) ctile[r * CS + c + e] = s[e];
  }
  sync();
}

// ---- host side ---------------------------------------------------------------------------------------

// The limits of the 32-bit index arithmetic both kernels use.
inline Support tc_limits(const Conv2dProblem& p) {
  if (Support ok = require_pixel_coords_below_2_30(p); !ok) return ok;  // see kFar
  if (p.p() * p.q() > INT_MAX) return Support::no("P*Q passes 2^31 (32-bit pixel index within an image).");
  if (p.gemm_k() > INT_MAX / 2) return Support::no("C/groups*R*S passes 2^30 (32-bit k index).");
  if (p.c > INT_MAX || p.k > INT_MAX) return Support::no("C or K passes 2^31 (32-bit channel index).");
  if (ceil_div(p.gemm_n(), 64) > 65535) return Support::no("K/groups passes 65535*64 (grid.y).");
  if (p.groups > 65535) return Support::no("more than 65535 groups (grid.z).");
  if (ceil_div(p.gemm_m(), 64) > INT_MAX) return Support::no("N*P*Q passes 2^37 (grid.x).");
  return Support::yes();
}

// The kernel arguments of one launch: bke = k elements per pipeline stage (for the tap-walk increments).
inline TcArgs make_tc_args(const Conv2dProblem& pb, bool per_sample, const TensorView& src,
                           const TensorView& wei, const TensorView& dst, const Epilogue& e, int splits,
                           int tiles_per_split, int num_k_tiles, void* ws, int bke) {
  TcArgs a{};
  a.src = src.data;
  a.wei = wei.data;
  a.dst = dst.data;
  a.bias = e.bias;
  a.residual = e.residual;
  a.act = e.activation;
  a.alpha = e.alpha;
  a.beta = e.beta;
  a.ws = splits > 1 ? static_cast<float*>(ws) : nullptr;
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
  a.splits = splits;
  a.tiles_per_split = tiles_per_split;
  a.num_k_tiles = num_k_tiles;
  a.adv_c = bke % a.Cg;
  a.adv_s = (bke / a.Cg) % a.S;
  a.adv_r = bke / (a.Cg * a.S);
  a.vec_ok = a.K % 8 == 0 && a.Kpg % 8 == 0 && reinterpret_cast<uintptr_t>(dst.data) % 16 == 0 &&
             reinterpret_cast<uintptr_t>(e.residual) % 16 == 0 && reinterpret_cast<uintptr_t>(a.ws) % 16 == 0;
  return a;
}

// Whether the operands take the 16-byte cp.async path: every chunk inside one filter tap, 16-byte aligned.
inline bool tc_operands_aligned(const TcArgs& a, DType dt) {
  const int ce = 16 / int(dtype_size(dt));
  return a.Cg % ce == 0 && reinterpret_cast<uintptr_t>(a.src) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.wei) % 16 == 0;
}


}  // namespace
}  // namespace convkit::detail
