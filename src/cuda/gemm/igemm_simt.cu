// cuda_igemm_simt: implicit GEMM on CUDA cores (fp32, NCHW): the im2col rung without the column matrix.
//
// What it adds over cuda_im2col_cublas: the column matrix is never written. Each block gathers the slice
// of it that it needs straight from the input into shared memory, zero-filling the padding, and multiplies
// it there; the epilogue (bias, activation, residual) is applied as the results are stored. One kernel and
// no workspace (except with split-K, below), the input read through L2 instead of an R*S-times-larger copy
// through DRAM.
//
// The GEMM, per group g: M = N*P*Q output pixels, N = K/groups output channels, K = C/groups*R*S, with
//   A[m][k] = x[img][g*Cg + c][p*u - pad + r*d][q*u - pad + s*d]   (m = (img, p, q), k = (c, r, s))
//   B[k][n] = w[g*Kg + n][c][r][s]                                   (contiguous along k)
// How it parallelises: a block of 256 threads owns a kBlockM x kBlockN tile of the output (m x n); grid.x
// walks m, grid.y walks n, grid.z the groups (times the k splits, below). The k loop steps kBlockK = 8 at a
// time: each thread gathers kBlockM/32 A elements (one k row, m = lane + 32*j, so a warp reads 32
// consecutive pixels) and kBlockN/32 B elements into registers for slice t+1 while the block multiplies
// slice t out of the other of two shared-memory stages. The threads form a 16x16 grid (a warp is 8 x 4 of
// it); each one accumulates a (kBlockM/16) x (kBlockN/16) register tile (8x8 for the 128x128 tile) as
// outer products of float4 fragments taken at tm*4 and 64 + tm*4 (the "2 x (4x4)" split: a warp's float4
// reads fall on distinct banks or broadcast).
// The gather keeps, per thread, the input offset of each of its pixels and the (c, r, s) of its k row,
// advanced by kBlockK with carries only: no division in the k loop.
// Split-K (for small M*N with a long k, the late ResNet layers): grid.z = groups*splits, each split
// multiplies a contiguous run of k slices and writes its raw sums to the workspace, partials
// [splits][K][M (padded to 4)]; a second kernel (splitk_reduce_kernel) adds the splits in split order (the
// same order whichever block finished first: deterministic, and exact on small integers) and applies the
// epilogue, reading each residual element before it writes that output element (in-place safe).
// workspace_bytes() > 0 only when split-K is chosen.
// Tiles: 128x128, 128x64, 64x128, 64x64; choose_plan() picks the tile and the split count with a wave
// model fitted to the first H200 run (commented there). CONVKIT_IGEMM_TILE=128x64 and
// CONVKIT_IGEMM_SPLITK=4 (1 = off) force a variant; detail() reports the choice.
// Per-sample weights (conv2d_per_sample, f32 NCHW; ConvCall::per_sample, run_per_sample): grid.z = N*groups
// instead of groups*splits, grid.x walks one image's P*Q pixels, and the block reads its image's filter bank
// (weight rows img*K..) and bias (img*K..); no split-K. Only m0 stays live across the k loop (the pixel
// bounds are recomputed from blockIdx in the epilogue): the 128x128 tile spilled 24 bytes otherwise.
// measured (H200, 2026-11-30, N 32, 64->64, 56x56, 3x3, through the extension): 0.33 ms against 0.32 for
// cuDNN on the batch folded into groups (strict fp32 both), where cuda_per_sample's 64x64 tiles took 0.75.
// The fused epilogue stores 4 consecutive pixels as one float4 when P*Q % 4 == 0 (whole 128-byte lines per
// warp instead of quarter-used sectors).
// Weights: one float4 load per thread per slice for the 128-wide n tiles when C/groups*R*S % 4 == 0.
//
// Resources (sm_90, -O3, nvcc -Xptxas -v, 2026-11-30): 128x128 128 registers (cap 128: 2 blocks/SM; 123
// before the per-sample mode; plain 3x3 64@56 0.282 -> 0.278 ms), 128x64 112, 64x128 101 (2 blocks/SM),
// 64x64 79 (cap 85: 3 blocks/SM), 9.3-18.3 KiB static smem, no spills; reduce kernel 32 registers. Workspace: 0, or splits*K*M*4 bytes with split-K (at most 512 MiB).
// measured (H200, 2026-11-29, strict fp32 NCHW batch 32, vs PyTorch's cuDNN): seed000 8.30 ms (37.3 TFLOP/s,
// 0.86x cuDNN's 7.17 ms), ResNet-50 3x3 layers 0.50x-1.34x; earlier versions in docs/perf.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/overrides.hpp"
#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/epilogue.cuh"
#include "cuda/common/geometry.cuh"

namespace convkit::detail {
namespace {

constexpr int kThreads = 256;  // a 16 x 16 grid of threads over the tile
constexpr int kBlockK = 8;     // k depth of one shared-memory stage
constexpr int kPadB = 4;       // NOTE: pads B's smem rows so the transposing stores hit distinct banks
                               // (a row shifts by 4 banks; rows k and k+4 land 16 banks apart), and keeps
                               // every row 16-byte aligned for the float4 fragment reads.
// An impossible row/column origin for pixels past M: h = kFar + r*d stays negative, so the bounds test
// that zero-fills the padding also zero-fills them (can_implement keeps r*d, H and W below 2^30).
constexpr int kFar = -(1 << 30);

// One output pixel m = (img, p, q) of the block, for the gather: the offset of x[img][g*Cg][h0][w0] (it may
// point before the image, as h0, w0 < 0 in the padding) and the origin h0 = p*u - pad, w0 = q*u - pad.
struct __align__(16) PixelInfo {
  int64_t base;
  int h0, w0;
};

struct IgemmArgs {
  const float* src;
  const float* wei;
  float* dst;
  DeviceEpilogue<float> epi;  // bias, activation, residual (which may be dst itself), alpha, beta
  int64_t M;              // N*P*Q
  int Ngemm;              // K/groups
  int Kgemm;              // C/groups*R*S
  int Cg, H, W, Q, R, S;
  int64_t HW, CHW, PQ, KPQ;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int dc, dr, ds;  // kBlockK written in the mixed radix (c, r, s): kBlockK = dc*R*S + dr*S + ds
  // split-K: grid.z = groups*splits; split z%splits multiplies k slices [split*slices_per_split, +slices_per_split)
  // and, when splits > 1, stores its raw partial sums to ws[split][g*Ngemm + n][m] (rows of Mpad floats)
  // for splitk_reduce_kernel, which adds the splits in order and applies the epilogue.
  int splits, slices_per_split;
  int Ktot;  // K, all groups: the partials' rows per split
  float* ws;
  int64_t Mpad;  // the partials' row length: M rounded up to a multiple of 4
  bool vec_store;  // PQ % 4 == 0 and dst 16-byte aligned: 4 consecutive m are one float4 of dst
  bool b_vec;      // Kgemm % 4 == 0 and wei 16-byte aligned: 4 consecutive k of a weight row are one float4
  // Per-sample weights (conv2d_per_sample): grid.z = N*groups, z = img*G + g, no split; grid.x walks one
  // image's P*Q pixels; image img uses weight rows img*Ktot.. and bias img*Ktot... (Otherwise G is unused.)
  bool per_sample;
  int G;
};

// A block of 256 threads computes one kBlockM x kBlockN tile (m = output pixels, n = output channels of
// group blockIdx.z); each thread an (kBlockM/16) x (kBlockN/16) register tile; k in slices of 8, two smem
// stages, the next slice prefetched into registers while the current one is multiplied.
// NOTE: the 64x64 tile is bounded to 3 blocks per SM (<= 85 registers; it needs ~80 without spills), the
// others to 2 (128x128 needs ~123).
template <int kBlockM, int kBlockN>
__global__ void __launch_bounds__(kThreads, kBlockM * kBlockN <= 64 * 64 ? 3 : 2) igemm_simt_kernel(const IgemmArgs a) {
  constexpr int kTM = kBlockM / 16, kTN = kBlockN / 16;  // per-thread tile
  constexpr int kLoadA = kBlockM * kBlockK / kThreads;   // A elements per thread per slice
  constexpr int kLoadB = kBlockN * kBlockK / kThreads;   // B elements per thread per slice
  constexpr int kThreadsPerN = kBlockK / kLoadB;         // threads sharing one B column (one n)
  static_assert(kThreads / 32 == kBlockK, "the A loader gives each warp one k row of the slice");
  static_assert(kTM % 4 == 0 && kTN % 4 == 0, "fragments are read as float4");

  // NOTE: A is stored k-major (As[k][m]) so a thread's m fragment is one float4; B likewise (Bs[k][n]).
  __shared__ __align__(16) float As[2][kBlockK][kBlockM];
  __shared__ __align__(16) float Bs[2][kBlockK][kBlockN + kPadB];

  const int tid = threadIdx.x;
  const int z = int(blockIdx.z);
  const int g = a.per_sample ? z % a.G : z / a.splits;
  const int split = a.per_sample ? 0 : z - g * a.splits;
  // The block's pixels: m0 + i for i < kBlockM, those with row0 + i < m_lim (row0: the first one's place
  // in its image (per-sample) or in the batch). (Only m0 stays live across the k loop: registers.)
  const int64_t ps_img = a.per_sample ? z / a.G : 0;
  const int64_t row0 = int64_t(blockIdx.x) * kBlockM, m_lim = a.per_sample ? a.PQ : a.M;
  const int64_t m0 = ps_img * a.PQ + row0;
  const int n0 = blockIdx.y * kBlockN;

  // ---- A gather: the block's pixels, decoded once into shared memory.
  // NOTE: a table in smem instead of registers: each thread gathers kLoadA pixels, and holding their
  // 64-bit offsets and origins (4 registers each) pushed the 128x128 tile past 128 registers (spills).
  // One LDS.128 per gathered element per slice is cheap next to the 64 FMAs per thread per k.
  __shared__ PixelInfo pix[kBlockM];
  for (int i = tid; i < kBlockM; i += kThreads) {
    const int64_t m = m0 + i;
    PixelInfo info;
    if (row0 + i < m_lim) {
      const PixelPos px = decode_pixel(m, a.PQ, a.Q, a.M <= INT_MAX);
      const int64_t img = px.img;
      const int p = px.p, q = px.q;
      info.h0 = p * a.stride_h - a.pad_h;
      info.w0 = q * a.stride_w - a.pad_w;
      info.base = img * a.CHW + int64_t(g) * a.Cg * a.HW + int64_t(info.h0) * a.W + info.w0;
    } else {
      info.h0 = kFar;
      info.w0 = kFar;
      info.base = 0;
    }
    pix[i] = info;
  }
  const int a_k = tid / 32;  // this thread's k row of every slice
  const int a_m = tid % 32;  // and its pixels: a_m + 32*j
  // This split's k range: slices [slice0, slice0 + slices).
  const int total_slices = (a.Kgemm + kBlockK - 1) / kBlockK;
  const int slice0 = split * a.slices_per_split;
  const int slices = a.slices_per_split < total_slices - slice0 ? a.slices_per_split : total_slices - slice0;
  // (>= 1: the host makes every split non-empty)
  const int k_begin = slice0 * kBlockK;
  // (c, r, s) of k = k_begin + a_k, advanced by kBlockK per slice with carries only.
  int kc, kr, ks;
  {
    const int k = k_begin + a_k;
    const int rs = k % (a.R * a.S);
    kc = k / (a.R * a.S);
    kr = rs / a.S;
    ks = rs - kr * a.S;
  }

  // ---- B loads: kLoadB consecutive k of one output channel n (the weights are contiguous along k).
  const int b_n = tid / kThreadsPerN;
  const int b_k = (tid % kThreadsPerN) * kLoadB;
  const bool b_valid = n0 + b_n < a.Ngemm;
  // Walks along this thread's weight row; b_left = how many k of it remain (0 for a column past N).
  const float* b_ptr =
      a.wei + (ps_img * a.Ktot + int64_t(g) * a.Ngemm + (b_valid ? n0 + b_n : 0)) * a.Kgemm + k_begin + b_k;
  int b_left = b_valid ? a.Kgemm - k_begin - b_k : 0;

  float ra[kLoadA], rb[kLoadB];  // the prefetch registers

  // Gathers the current slice (see advance_k) into ra/rb (zero outside the input, past M, past K/groups, past N).
  auto load_slice = [&]() {
    const bool k_ok = kc < a.Cg;  // k < K/groups
    const int rdh = kr * a.dil_h, sdw = ks * a.dil_w;
    const int64_t koff = int64_t(kc) * a.HW + int64_t(rdh) * a.W + sdw;
#pragma unroll
    for (int j = 0; j < kLoadA; ++j) {
      const PixelInfo info = pix[a_m + 32 * j];
      const int h = info.h0 + rdh, w = info.w0 + sdw;
      ra[j] = (k_ok && unsigned(h) < unsigned(a.H) && unsigned(w) < unsigned(a.W)) ? __ldg(a.src + info.base + koff)
                                                                                  : 0.0f;
    }
    if constexpr (kLoadB == 4) {
      // NOTE: one 16-byte load when the 4 weights are aligned and all inside the row (b_vec: K/groups*R*S
      // % 4 == 0 and a 16-byte aligned weight tensor; b_k and the split's first k are multiples of 4).
      if (a.b_vec && b_left >= 4) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(b_ptr));
        rb[0] = v.x, rb[1] = v.y, rb[2] = v.z, rb[3] = v.w;
        return;
      }
    }
#pragma unroll
    for (int i = 0; i < kLoadB; ++i) rb[i] = i < b_left ? __ldg(b_ptr + i) : 0.0f;
  };
  auto advance_k = [&]() {
    b_ptr += kBlockK;
    b_left -= kBlockK;
    ks += a.ds;
    const int carry_s = ks >= a.S;
    if (carry_s) ks -= a.S;
    kr += a.dr + carry_s;
    if (kr >= a.R) {
      kr -= a.R;
      ++kc;
    }
    kc += a.dc;
  };
  auto store_slice = [&](int buf) {
#pragma unroll
    for (int j = 0; j < kLoadA; ++j) As[buf][a_k][a_m + 32 * j] = ra[j];
#pragma unroll
    for (int i = 0; i < kLoadB; ++i) Bs[buf][b_k + i][b_n] = rb[i];
  };

  // ---- the k loop
  // NOTE: a warp covers 8 (m) x 4 (n) threads, not 16 x 2: its float4 fragment reads then touch 8 + 4
  // distinct addresses (one 128-byte and one 64-byte wavefront) instead of 16 + 2 (256 + 32 bytes).
  const int warp = tid / 32, lane = tid % 32;
  const int tm = (lane % 8) + 8 * (warp % 2), tn = (lane / 8) + 4 * (warp / 2);
  float acc[kTM][kTN];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f;

  __syncthreads();  // the pixel table is complete
  load_slice();
  store_slice(0);
  __syncthreads();
  for (int t = 0; t < slices; ++t) {
    const int cur = t & 1;
    const bool more = t + 1 < slices;
    if (more) {  // issue the next slice's global loads now; they land while this slice is multiplied
      advance_k();
      load_slice();
    }
#pragma unroll
    for (int kk = 0; kk < kBlockK; ++kk) {
      float av[kTM], bv[kTN];
#pragma unroll
      for (int i = 0; i < kTM / 4; ++i) {
        const float4 v = *reinterpret_cast<const float4*>(&As[cur][kk][i * 64 + tm * 4]);
        av[4 * i] = v.x, av[4 * i + 1] = v.y, av[4 * i + 2] = v.z, av[4 * i + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < kTN / 4; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(&Bs[cur][kk][j * 64 + tn * 4]);
        bv[4 * j] = v.x, bv[4 * j + 1] = v.y, bv[4 * j + 2] = v.z, bv[4 * j + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    // NOTE: stage cur^1 was last read during slice t-1, and every thread has passed the barrier that
    // ended slice t-1, so it can be overwritten now; the barrier below publishes it for slice t+1.
    if (more) store_slice(cur ^ 1);
    __syncthreads();
  }

  // ---- split-K: raw partial sums to ws[split][g*Ngemm + n][m], no epilogue (the reduce applies it).
  // NOTE: scalar stores, like the plain epilogue: storing acc[i..i+3][j] as one float4 made ptxas copy
  // them into 4 consecutive registers and pushed 128x128 past its 128-register cap (64 bytes of spills).
  if (a.splits > 1) {
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
      const int64_t m = m0 + (i / 4) * 64 + tm * 4 + (i % 4);
      if (m >= a.M) continue;  // (split-K: never per-sample)
#pragma unroll
      for (int j = 0; j < kTN; ++j) {
        const int n = n0 + (j / 4) * 64 + tn * 4 + (j % 4);
        if (n >= a.Ngemm) continue;
        a.ws[(int64_t(split) * a.Ktot + int64_t(g) * a.Ngemm + n) * a.Mpad + m] = acc[i][j];
      }
    }
    return;
  }

  // ---- epilogue, fused into the store: y = act(alpha*acc + bias[k] + beta*residual), NCHW.
  // NOTE: when the residual is dst, each element is read and then written by this thread only: safe.
  if (a.vec_store) {
    // NOTE: PQ % 4 == 0 and m % 4 == 0, so m..m+3 lie in one image and are one aligned float4 of dst: a
    // warp's store is then 4 full 128-byte lines instead of 16 sectors a quarter used (the 1x1 layers,
    // whose k loop is short, were bound by those scattered scalar stores).
#pragma unroll
    for (int i = 0; i < kTM; i += 4) {
      const int64_t m = m0 + (i / 4) * 64 + tm * 4;
      if (int64_t(blockIdx.x) * kBlockM + (i / 4) * 64 + tm * 4 >= (a.per_sample ? a.PQ : a.M)) continue;
      const int64_t img = m / a.PQ;
      const int64_t kb0 = a.per_sample ? img * a.Ktot : 0;  // the bias index of channel 0
      const int64_t out_m = img * a.KPQ + (m - img * a.PQ);
#pragma unroll
      for (int j = 0; j < kTN; ++j) {
        const int n = n0 + (j / 4) * 64 + tn * 4 + (j % 4);
        if (n >= a.Ngemm) continue;
        const int64_t k = int64_t(g) * a.Ngemm + n;
        const int64_t o = out_m + k * a.PQ;
        const int64_t kb = kb0 + k;
        const float4 v = make_float4(a.epi(acc[i][j], kb, o), a.epi(acc[i + 1][j], kb, o + 1),
                                     a.epi(acc[i + 2][j], kb, o + 2), a.epi(acc[i + 3][j], kb, o + 3));
        *reinterpret_cast<float4*>(a.dst + o) = v;
      }
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int64_t m = m0 + (i / 4) * 64 + tm * 4 + (i % 4);
    if (int64_t(blockIdx.x) * kBlockM + (i / 4) * 64 + tm * 4 + (i % 4) >= (a.per_sample ? a.PQ : a.M)) continue;
    const int64_t img = m / a.PQ;
    const int64_t out_m = img * a.KPQ + (m - img * a.PQ);  // dst[img][0][p][q]
    const int64_t kb0 = a.per_sample ? img * a.Ktot : 0;   // the bias index of channel 0
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const int n = n0 + (j / 4) * 64 + tn * 4 + (j % 4);
      if (n >= a.Ngemm) continue;
      const int64_t k = int64_t(g) * a.Ngemm + n;
      const int64_t o = out_m + k * a.PQ;
      a.dst[o] = a.epi(acc[i][j], kb0 + k, o);
    }
  }
}

// split-K's second kernel: dst[img][k][pq] = epilogue(sum over splits, in split order, of ws[s][k][m]).
// grid.y walks output channels k (grid-stride past 65535), threads walk m: coalesced reads and writes.
// Each element is read (residual) and written by one thread, so an in-place residual is safe.
// The host picks split-K only when M < 2^31 (32-bit m).
__global__ void __launch_bounds__(256) splitk_reduce_kernel(const IgemmArgs a) {
  const int64_t m_ = int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (m_ >= a.M) return;
  const unsigned m = unsigned(m_);
  const unsigned img = m / unsigned(a.PQ);
  const int64_t out_m = int64_t(img) * a.KPQ + (m - img * unsigned(a.PQ));
  const int64_t split_stride = int64_t(a.Ktot) * a.Mpad;
  for (int k = int(blockIdx.y); k < a.Ktot; k += int(gridDim.y)) {
    const float* p = a.ws + int64_t(k) * a.Mpad + m;
    float v = p[0];
    for (int s = 1; s < a.splits; ++s) v += p[s * split_stride];
    const int64_t o = out_m + int64_t(k) * a.PQ;
    a.dst[o] = a.epi(v, k, o);
  }
}

// ---- tile and split-K choice --------------------------------------------------------------------------
struct TileConfig {
  int bm, bn;
  // Measured speed of an SM full of this tile, relative to 128x128 (H200, 2026-11-29: 64@56 and 128@28
  // on 128x64 ran at 0.68-0.72, 256@14 and 512@7 on 64x64 at 0.58-0.60; 64x128 not measured, assumed
  // like 128x64).
  double rate;
  void (*launch)(const IgemmArgs&, dim3, cudaStream_t);
  int (*blocks_per_sm)();  // resident blocks of this tile per SM (the occupancy calculator, cached)
};

template <int BM, int BN>
void launch_tile(const IgemmArgs& a, dim3 grid, cudaStream_t stream) {
  igemm_simt_kernel<BM, BN><<<grid, kThreads, 0, stream>>>(a);
}

template <int BM, int BN>
int blocks_per_sm_of_tile() {
  // NOTE: cached for the first device asked; the kernels' register and smem use is the same on all
  // devices of one architecture, which is what this build targets.
  static std::atomic<int> cached{0};
  int n = cached.load(std::memory_order_relaxed);
  if (n == 0) {
    CK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, igemm_simt_kernel<BM, BN>, kThreads, 0));
    n = std::max(n, 1);
    cached.store(n, std::memory_order_relaxed);
  }
  return n;
}

constexpr TileConfig kTiles[] = {
    {128, 128, 1.00, launch_tile<128, 128>, blocks_per_sm_of_tile<128, 128>},
    {128, 64, 0.70, launch_tile<128, 64>, blocks_per_sm_of_tile<128, 64>},
    {64, 128, 0.70, launch_tile<64, 128>, blocks_per_sm_of_tile<64, 128>},
    {64, 64, 0.60, launch_tile<64, 64>, blocks_per_sm_of_tile<64, 64>},
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int kMaxSplits = 16;
constexpr int kMinSlicesPerSplit = 8;                 // k >= 64 per split
constexpr int64_t kMaxWorkspace = int64_t(1) << 29;  // 512 MiB of partial sums at most

struct Plan {
  const TileConfig* tile = nullptr;
  int splits = 1, slices_per_split = 0;
  int64_t blocks = 0;  // of the main kernel
  size_t ws_bytes = 0;
  double model_ms = 0;
};

int64_t padded_m(const Conv2dProblem& p) { return ceil_div(p.gemm_m(), 4) * 4; }

// Picks the tile and the number of k splits with the least modelled time. The model, fitted to the first
// H200 run (2026-11-29; its 3x3 figures fit it within ~10%):
// - blocks run in waves of blocks_per_sm * SMs; a partial last wave costs ceil(rest / SMs) blocks per SM
//   but never less than 2 (an SM holding one block of 8 warps ran it no faster than two: 128@28 on 128x64,
//   392 blocks in 264 slots, took the time of 2 full waves);
// - a block costs bm*bn*(k of its split + 32) FMAs at 1.42e11 FMA/s per SM times the tile's rate (seed000:
//   128x128, 32 blocks per SM, 8.5 ms); the +32 stands for its prologue and epilogue;
// - split-K adds the partials' traffic (written by the main kernel, read back by the reduce) and the dst
//   write, (8*splits + 4) bytes per output at ~2.5 TB/s, plus ~4 us for the second launch.
// E.g. (batch 32, 132 SMs) 3x3 128@28 -> 128x128 x 4 splits (784 blocks), 256@14 -> 128x128 x 5,
// 512@7 -> 128x128 x 5 (260 blocks: one wave); seed000 -> 128x128, no split.
// Overrides, for sweeping variants on a new card: CONVKIT_IGEMM_TILE=128x64 (one of kTiles) and
// CONVKIT_IGEMM_SPLITK=4 (1 = never split; a count is lowered to what leaves no split empty). Unknown or
// impossible values are ignored.
// Per-sample weights (per_sample): the tiles of each image apart, and no split (no workspace there).
Plan choose_plan(const Conv2dProblem& p, int sm_count, bool per_sample = false) {
  const char* force_tile = env_override("CONVKIT_IGEMM_TILE");
  int force_splits = 0;
  if (const char* e = env_override("CONVKIT_IGEMM_SPLITK")) force_splits = std::atoi(e);
  if (force_splits < 1 || force_splits > 64) force_splits = 0;
  bool tile_known = false;
  if (force_tile != nullptr)
    for (const TileConfig& t : kTiles)
      tile_known = tile_known || std::to_string(t.bm) + "x" + std::to_string(t.bn) == force_tile;

  const int sms = std::max(sm_count, 1);
  const int64_t M = p.gemm_m(), N = p.gemm_n(), G = p.groups, Ktot = p.k;
  const int total_slices = int(ceil_div(p.gemm_k(), kBlockK));
  const bool can_split = M <= INT_MAX - 4;  // 32-bit m in the reduce
  Plan best;
  for (const TileConfig& t : kTiles) {
    if (tile_known && std::to_string(t.bm) + "x" + std::to_string(t.bn) != force_tile) continue;
    const int64_t tiles = (per_sample ? ceil_div(p.p() * p.q(), t.bm) * p.n : ceil_div(M, t.bm)) * ceil_div(N, t.bn) * G;
    const int bps = t.blocks_per_sm();
    const int64_t slots = int64_t(bps) * sms;
    const int max_splits = per_sample ? 1 : force_splits ? force_splits : kMaxSplits;
    for (int want = 1; want <= max_splits; ++want) {
      if (force_splits && want != force_splits && want != 1) continue;  // the forced count, or 1 as fallback
      const int sps = int(ceil_div(total_slices, want));
      const int splits = int(ceil_div(total_slices, sps));  // no empty split
      if (splits != want && !force_splits) continue;          // the same plan as a smaller count
      // (the bound is checked in double first: splits * K * M * 4 can pass 2^64)
      const double ws_d = splits > 1 ? double(splits) * double(Ktot) * double(padded_m(p)) * sizeof(float) : 0;
      if (splits > 1) {
        if (!can_split || ws_d > double(kMaxWorkspace) || G * splits > 65535) continue;
        if (!force_splits && sps < kMinSlicesPerSplit) continue;
      }
      const size_t ws = splits > 1 ? size_t(splits) * size_t(Ktot) * size_t(padded_m(p)) * sizeof(float) : 0;
      const int64_t units = tiles * splits;
      const int64_t full = units / slots, rest = units % slots;
      const int64_t per_sm = full * bps + (rest ? std::max<int64_t>(ceil_div(rest, sms), std::min(bps, 2)) : 0);
      double sec = double(per_sm) * t.bm * t.bn * (double(sps) * kBlockK + 32) / (1.42e11 * t.rate);
      if (splits > 1) sec += (8.0 * splits + 4) * double(M) * double(Ktot) / 2.5e12 + 4e-6;
      // Ties keep the earlier plan (the larger tile, fewer splits). A forced split count wins over 1.
      const bool forced_better = force_splits > 1 && splits > 1 && (best.tile == nullptr || best.splits == 1);
      const bool forced_worse = force_splits > 1 && splits == 1 && best.tile != nullptr && best.splits > 1;
      if (best.tile == nullptr || forced_better || (!forced_worse && sec < best.model_ms * 1e-3)) {
        best.tile = &t;
        best.splits = splits;
        best.slices_per_split = sps;
        best.blocks = units;
        best.ws_bytes = ws;
        best.model_ms = sec * 1e3;
      }
    }
  }
  return best;
}

// The kernel's arguments for a problem and its tensors (the plan's fields are the caller's).
IgemmArgs make_args(const Conv2dProblem& pb, const TensorView& src, const TensorView& wei, const TensorView& dst,
                    const Epilogue& e) {
  IgemmArgs a{};
  a.src = static_cast<const float*>(src.data);
  a.wei = static_cast<const float*>(wei.data);
  a.dst = static_cast<float*>(dst.data);
  a.epi = DeviceEpilogue<float>::from(e);
  a.M = pb.gemm_m();
  a.Ngemm = int(pb.gemm_n());
  a.Kgemm = int(pb.gemm_k());
  a.Cg = int(pb.c_per_group());
  a.H = int(pb.h);
  a.W = int(pb.w);
  a.Q = int(pb.q());
  a.R = int(pb.r);
  a.S = int(pb.s);
  a.HW = pb.h * pb.w;
  a.CHW = pb.c * a.HW;
  a.PQ = pb.p() * pb.q();
  a.KPQ = pb.k * a.PQ;
  a.stride_h = int(pb.stride_h);
  a.stride_w = int(pb.stride_w);
  a.pad_h = int(pb.pad_h);
  a.pad_w = int(pb.pad_w);
  a.dil_h = int(pb.dilation_h);
  a.dil_w = int(pb.dilation_w);
  const int RS = a.R * a.S;
  a.dc = kBlockK / RS;
  a.dr = (kBlockK % RS) / a.S;
  a.ds = kBlockK % a.S;
  a.Ktot = int(pb.k);
  a.Mpad = padded_m(pb);
  a.vec_store = a.PQ % 4 == 0 && reinterpret_cast<uintptr_t>(a.dst) % 16 == 0;
  a.b_vec = a.Kgemm % 4 == 0 && reinterpret_cast<uintptr_t>(a.wei) % 16 == 0;
  a.G = int(pb.groups);
  return a;
}

void run_per_sample(const Conv2dProblem& p, const TensorView& src, const TensorView& wei, const TensorView& dst,
                    const Epilogue& e, void* stream) {
  check_residual_overlap(e.residual, dst.data, dst.bytes());
  IgemmArgs a = make_args(p, src, wei, dst, e);
  const Plan plan = choose_plan(p, sm_count_of_current_device(), /*per_sample=*/true);
  a.per_sample = true;
  a.splits = 1;
  a.slices_per_split = plan.slices_per_split;
  const TileConfig& t = *plan.tile;
  const dim3 grid(unsigned(ceil_div(a.PQ, t.bm)), unsigned(ceil_div(a.Ngemm, t.bn)), unsigned(p.n * p.groups));
  t.launch(a, grid, as_stream(stream));
  CK_LAUNCH("igemm_simt_kernel (per-sample)");
}

class CudaIgemmSimt final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_igemm_simt"; }
  std::string description() const override {
    return "implicit GEMM on CUDA cores: on-the-fly im2col into double-buffered smem tiles, 8x8 register "
           "tiles, fused epilogue, no workspace";
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (Support ok = require_f32_strict(cfg, /*nhwc_ok=*/false); !ok) return ok;
    if (Support ok = require_pixel_coords_below_2_30(p); !ok) return ok;  // see kFar
    if (p.gemm_k() > INT_MAX - 2 * kBlockK) return Support::no("C/groups*R*S passes 2^31 (32-bit k index).");
    if (ceil_div(p.gemm_n(), 64) > 65535) return Support::no("K/groups passes 65535*64 (grid.y).");
    if (p.groups > 65535) return Support::no("more than 65535 groups (grid.z).");
    if (ceil_div(p.gemm_m(), 64) > INT_MAX) return Support::no("N*P*Q passes 2^37 (grid.x).");
    if (p.k > INT_MAX) return Support::no("K passes 2^31 (32-bit channel index).");
    return Support::yes();
  }

  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!cuda_present() || !can_implement(p, cfg)) return 0;
    return choose_plan(p, sm_count_of_current_device()).ws_bytes;
  }

  std::string detail(const Conv2dProblem& p, const ConvConfig&) const override {
    if (!cuda_present()) return {};
    const int sms = sm_count_of_current_device();
    const Plan plan = choose_plan(p, sms);
    std::string d = "tile " + std::to_string(plan.tile->bm) + "x" + std::to_string(plan.tile->bn);
    if (plan.splits > 1)
      d += ", split-K " + std::to_string(plan.splits) + " (k " + std::to_string(plan.slices_per_split * kBlockK) +
           " each, partials " + std::to_string((plan.ws_bytes + (1 << 20) - 1) >> 20) + " MiB)";
    return d + ", " + std::to_string(plan.blocks) + " blocks on " + std::to_string(sms) + " SMs";
  }

  // Per-sample weights (conv2d_per_sample): grid.z = N*groups, each block reads its sample's filter bank.
  Support accepts(const Conv2dProblem& p, const ConvConfig&, const Operands& ops) const override {
    if (!ops.per_sample) return Support::yes();
    if (p.n * p.groups > 65535) return Support::no("per-sample weights: N*groups passes 65535 (grid.z).");
    if (p.n * p.k > INT_MAX) return Support::no("per-sample weights: N*K passes 2^31 (32-bit filter row).");
    return Support::yes();
  }

  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    const Epilogue& e = call.epilogue;
    check_residual_overlap(e.residual, call.dst.data, call.dst.bytes());
    if (call.per_sample) {
      Operands ps;
      ps.per_sample = true;
      if (Support ok = accepts(pb, call.config, ps); !ok)
        throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
      run_per_sample(pb, call.src, call.wei, call.dst, e, call.stream);
      return;
    }

    IgemmArgs a = make_args(pb, call.src, call.wei, call.dst, e);
    const Plan plan = choose_plan(pb, sm_count_of_current_device());
    const TileConfig& t = *plan.tile;
    if (plan.ws_bytes > 0 && (call.workspace == nullptr || call.workspace_bytes < plan.ws_bytes))
      throw Error(StatusCode::invalid_tensor,
                  name() + " needs " + std::to_string(plan.ws_bytes) +
                      " bytes of workspace (split-K partials) but was given " +
                      std::to_string(call.workspace == nullptr ? 0 : call.workspace_bytes) + ".");
    a.splits = plan.splits;
    a.slices_per_split = plan.slices_per_split;
    a.ws = plan.splits > 1 ? static_cast<float*>(call.workspace) : nullptr;
    const cudaStream_t stream = as_stream(call.stream);
    const dim3 grid(unsigned(ceil_div(a.M, t.bm)), unsigned(ceil_div(a.Ngemm, t.bn)),
                    unsigned(pb.groups * plan.splits));
    t.launch(a, grid, stream);
    CK_LAUNCH("igemm_simt_kernel");
    if (plan.splits > 1) {
      const dim3 rgrid(unsigned(ceil_div(a.M, 256)), unsigned(std::min<int64_t>(pb.k, 65535)), 1);
      splitk_reduce_kernel<<<rgrid, 256, 0, stream>>>(a);
      CK_LAUNCH("splitk_reduce_kernel");
    }
  }
};

}  // namespace

const Algorithm* make_cuda_igemm_simt() {
  static CudaIgemmSimt algo;
  return &algo;
}

}  // namespace convkit::detail
