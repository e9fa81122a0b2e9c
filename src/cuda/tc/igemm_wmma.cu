// cuda_igemm_wmma: implicit GEMM on tensor cores through the WMMA API (nvcuda::wmma), NHWC/KRSC,
// f16/bf16 tensors, or f32 tensors with tf32 math: the first tensor-core rung.
//
// What it adds over cuda_igemm_simt (one idea): the block's shared-memory tiles are multiplied with wmma
// fragments instead of FMA loops: f16/bf16 as wmma 16x16x16, f32 as wmma 16x16x8 with precision::tf32
// (each fragment element rounded to tf32, to nearest, after it is loaded), always into fp32 accumulators.
// Because tensor cores want both operands contiguous along the reduction, it reads NHWC activations and
// KRSC weights and orders k as (r, s, c).
// The GEMM, per group g: M = N*P*Q output pixels, N = K/groups output channels, K = R*S*C/groups, with
//   A[m][k] = x[img][p*u - pad + r*d][q*u - pad + s*d][g*Cg + c]   (m = (img, p, q), k = (r, s, c))
//   B[n][k] = w[g*Kg + n][r][s][c]                                   (a KRSC weight row is contiguous in k)
//   y[m][g*Kg + n] = epilogue(sum_k A[m][k] * B[n][k])               (NHWC output: m*K + g*Kg + n)
// How it parallelises: a block of 128 threads (4 warps) owns a kBlockM x 64 tile of y (m x n) of one group;
// grid.x walks m, grid.y walks n, grid.z the groups. The warps form a 2 x 2 grid, each owning a
// (kBlockM/2) x 32 warp tile: (kBlockM/32) x 2 wmma accumulators of 16x16. The k loop steps 64 bytes of k
// (kBlockK = 32 halves or 16 floats: two wmma k steps) per slice: both operand tiles are stored row-major
// along k in shared memory (As[m][k], Bs[n][k], i.e. B as a col_major wmma matrix_b), rows padded by 16
// bytes, two stages, the next slice gathered into registers while the current one is multiplied (one
// barrier per slice; cp.async is the next rung).
// The gather: each thread loads a fixed k column of the slice (one element, or a 16-byte chunk of 8
// halves / 4 floats when C/groups allows it) for rows ld_row + j*kRowStep; the (r, s, c) of its column is
// advanced by kBlockK per slice with carries only (no division in the k loop). The pixels' input offsets
// and origins are decoded once into a shared table, as in the SIMT rung. Padding, pixels past M and k
// past R*S*C/groups are zero-filled (an impossible origin, kFar, makes the padding test reject pixels
// past M). 16-byte gathers need C/groups % 8 == 0 (16-bit) or % 4 == 0 (fp32) and 16-byte aligned
// tensors (then a chunk never straddles an (r, s)); otherwise a scalar gather (e.g. C = 3), lanes along k.
// The epilogue, fused into the store: the accumulators go to shared memory (fp32, reusing the operand
// stages), then each thread reads back 16 bytes' worth of consecutive output channels of one pixel,
// applies DeviceEpilogue (bias, activation, alpha, beta*residual, in fp32; it reads each residual element
// before the same thread overwrites it, so the residual may be dst itself) and stores them as one
// 16-byte store when K/groups % (16 bytes / element) == 0 and dst is aligned, element by element
// otherwise (bounds-checked for partial tiles).
// Tiles: 128x64 when that gives at least 2 blocks per SM, else 64x64 (twice the blocks for small M*N; no
// split-K in this rung). variants() offers both ("128x64", "64x64"); CONVKIT_WMMA_TILE=64x64 forces one;
// detail() reports the tile, the gather and the grid.
//
// Resources (sm_90, -O3, nvcc -Xptxas -v, CUDA 13, 2026-11-29), registers per thread with 16-byte /
// scalar gathers (launch-bound floors: see min_blocks_per_sm):
//   128x64: f16 126 / 168, bf16 128 / 168, tf32 166 / 168; 36 KiB static smem (36,864 bytes);
//   64x64:  f16 106 / 118, bf16 112 / 124, tf32 128 / 118; 21 KiB static smem (21,504 bytes).
//   (Since tf32 rounds to nearest even with cvt.rn, the scalar-gather tf32 64x64 kernel needs more than its
//   128-register floor and spills 4 bytes; with cvt.rna it took 118. The only spill in the build, kept for
//   one rounding rule across the rungs.)
//   -> 4 blocks (16 warps) per SM for every 64x64 kernel and the 16-bit 16-byte-gather 128x64 ones,
//      3 blocks (12 warps) for the rest (register-bound). Workspace: 0.
// measured (H200, 2026-11-29, bf16 NHWC, batch 32, vs cuDNN in the same process; docs/perf.md): ResNet-50
// geomean 0.30x (f16 0.32x, tf32 0.26x), the 3-channel stem 1.26x (0.182 vs 0.229 ms), seed000 2.16 ms
// (143 TFLOP/s). Bounded by exposed load latency: two stages filled through registers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "core/overrides.hpp"
#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/geometry.cuh"
#include "cuda/tc/tc_common.cuh"

namespace convkit::detail {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 128;  // 4 warps, a 2 x 2 grid of warp tiles
constexpr int kBlockN = 64;    // output channels per block
// k depth of one shared-memory stage: 64 bytes of each row, 32 elements (16-bit) or 16 (fp32).
// NOTE: 64 bytes rather than 32 fp32 elements: the same two wmma k steps per barrier in every dtype, and the
// fp32 128x64 tile stays under 48 KiB of smem (30 KiB of stages) with half the prefetch registers.
template <typename T>
constexpr int kBlockK = 64 / int(sizeof(T));
constexpr int kPadC = 4;       // NOTE: pads the fp32 epilogue rows (ldm a multiple of 4 floats, rows shift 4 banks)
// An impossible row/column origin for pixels past M: h = kFar + r*d stays negative, so the bounds test
// that zero-fills the padding also zero-fills them (can_implement keeps r*d, H and W below 2^30).
constexpr int kFar = -(1 << 30);

// The wmma shape and operand type for element type T: f16/bf16 multiply as 16x16x16, f32 as 16x16x8 tf32.
template <typename T>
struct WmmaOp {
  using Operand = T;
  static constexpr int kK = 16;
  template <typename Frag>
  __device__ static void round(Frag&) {}  // the 16-bit operands go in as they are
};
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // (wmma's tf32 exists from sm_80)
template <>
struct WmmaOp<float> {
  using Operand = wmma::precision::tf32;
  static constexpr int kK = 8;
  template <typename Frag>
  __device__ static void round(Frag& f) {  // fp32 -> tf32, to nearest even (load_matrix_sync does not round)
#pragma unroll
    for (int t = 0; t < f.num_elements; ++t) f.x[t] = tf32_rne(f.x[t]);
  }
};
#endif

// One output pixel m = (img, p, q) of the block, for the gather: the offset of x[img][h0][w0][g*Cg] (it may
// point before the image, as h0, w0 < 0 in the padding) and the origin h0 = p*u - pad, w0 = q*u - pad.
struct __align__(16) PixelInfo {
  int64_t base;
  int h0, w0;
};

template <typename T>
struct WmmaArgs {
  const T* src;    // NHWC
  const T* wei;    // KRSC
  T* dst;          // NHWC
  DeviceEpilogue<T> epi;  // bias, activation, residual (which may be dst itself), alpha, beta
  int64_t M;       // N*P*Q
  int Ngemm;       // K/groups
  int Kgemm;       // R*S*C/groups
  int Cg, H, W, Q, R, S;
  int64_t C, K;    // all input / output channels: the NHWC pixel strides of src / dst
  int64_t WC, HWC, PQ;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int dr, ds, dc;  // kBlockK<T> written in the mixed radix (r, s, c): kBlockK = (dr*S + ds)*Cg + dc
  bool vec_store;  // K/groups % (16 / sizeof(T)) == 0 and dst 16-byte aligned: 16-byte epilogue stores
};

// 16 bytes of consecutive k (a "chunk") or one element, loaded through the read-only path.
template <typename Chunk, typename T>
__device__ __forceinline__ Chunk load_chunk(const T* p) {
  if constexpr (std::is_same_v<Chunk, uint4>) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  } else {
    return __ldg(p);
  }
}
template <typename Chunk, typename T>
__device__ __forceinline__ Chunk zero_chunk() {
  if constexpr (std::is_same_v<Chunk, uint4>) {
    return make_uint4(0u, 0u, 0u, 0u);
  } else {
    return float_to_elem<T>(0.0f);
  }
}

// The bits of one element, for packing 16 bytes of outputs into a uint4.
__device__ __forceinline__ uint32_t elem_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ uint32_t elem_bits(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ uint32_t elem_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

// Shared memory of one block in bytes, besides the pixel table: two stages of As[kBlockM][kLd] and
// Bs[kBlockN][kLd], reused after the k loop as the fp32 accumulator tile Cs[kBlockM][kBlockN + kPadC].
template <typename T, int kBlockM>
constexpr int smem_bytes() {
  constexpr int kLd = kBlockK<T> + 16 / int(sizeof(T));
  constexpr int stages = 2 * (kBlockM + kBlockN) * kLd * int(sizeof(T));
  constexpr int acc = kBlockM * (kBlockN + kPadC) * int(sizeof(float));
  return stages > acc ? stages : acc;
}

// A block of 128 threads computes one kBlockM x 64 tile of y (pixels x output channels of group
// blockIdx.z); warp w owns rows (w/2)*kBlockM/2 .. +kBlockM/2 and columns (w%2)*32 .. +32 of it. Each
// thread gathers kPassA A chunks and kPassB B chunks per k slice (a fixed k column, rows ld_row +
// j*kRowStep). kVec: 16-byte chunks (C/groups a multiple of the chunk, aligned tensors), else elements.
// NOTE: occupancy floors from ptxas -v (sm_90): 4 blocks (16 warps, <= 128 registers) where that fits
// without spills, i.e. the 64x64 tiles and the 16-bit 16-byte-gather 128x64 ones; 3 blocks (<= 170) for
// the fp32 and scalar-gather 128x64 ones (they need ~166). Without a floor ptxas picked 128 registers
// for the 16-bit scalar 64x64 kernel and spilled.
template <typename T, int kBlockM, bool kVec>
constexpr int min_blocks_per_sm() {
  return kBlockM == 64 || (kVec && sizeof(T) == 2) ? 4 : 3;
}

template <typename T, int kBlockM, bool kVec>
__global__ void __launch_bounds__(kThreads, (min_blocks_per_sm<T, kBlockM, kVec>()))
    igemm_wmma_kernel(const WmmaArgs<T> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  (void)a, (void)kFar;
  __trap();  // bf16 and tf32 wmma need sm_80; available() keeps older devices away
#else
  using Op = WmmaOp<T>;
  constexpr int kBK = kBlockK<T>;
  using Chunk = std::conditional_t<kVec, uint4, T>;
  constexpr int kV = kVec ? 16 / int(sizeof(T)) : 1;  // elements per gathered chunk
  // NOTE: rows padded by 16 bytes: ldm stays a multiple of 16 bytes (wmma's rule) and the 8 rows of a
  // fragment load (80-byte stride: 20 banks apart) fall on distinct bank groups instead of one.
  constexpr int kLd = kBK + 16 / int(sizeof(T));
  constexpr int kWarpM = kBlockM / 2, kWarpN = kBlockN / 2;
  constexpr int kFragM = kWarpM / 16, kFragN = kWarpN / 16;
  constexpr int kChunksPerRow = kBK / kV;              // threads sharing one row of a slice
  constexpr int kRowStep = kThreads / kChunksPerRow;   // rows covered by one pass of the block
  constexpr int kPassA = kBlockM / kRowStep, kPassB = kBlockN / kRowStep;
  constexpr int kStage = (kBlockM + kBlockN) * kLd;    // elements of one stage (As then Bs)
  constexpr int kLdC = kBlockN + kPadC;
  static_assert(kThreads % kChunksPerRow == 0 && kBlockN % kRowStep == 0 && kBlockM % kRowStep == 0,
                "the loaders cover the tiles exactly");
  static_assert(kBK % Op::kK == 0 && kWarpM % 16 == 0 && kWarpN % 16 == 0, "whole wmma fragments");

  // NOTE: 128-byte alignment: wmma loads and stores need 32-byte aligned pointers; every fragment origin
  // is a multiple of 16 rows (rows of 80 or 272 bytes) plus a multiple of 32 bytes from here.
  __shared__ __align__(128) unsigned char smem_raw[smem_bytes<T, kBlockM>()];
  T* const stages = reinterpret_cast<T*>(smem_raw);
  __shared__ PixelInfo pix[kBlockM];

  const int tid = threadIdx.x;
  const int g = blockIdx.z;
  const int64_t m0 = int64_t(blockIdx.x) * kBlockM;
  const int n0 = blockIdx.y * kBlockN;

  // ---- the block's pixels, decoded once into shared memory.
  for (int i = tid; i < kBlockM; i += kThreads) {
    const int64_t m = m0 + i;
    PixelInfo info;
    if (m < a.M) {
      const PixelPos px = decode_pixel(m, a.PQ, a.Q, a.M <= INT_MAX);
      const int64_t img = px.img;
      const int p = px.p, q = px.q;
      info.h0 = p * a.stride_h - a.pad_h;
      info.w0 = q * a.stride_w - a.pad_w;
      info.base = img * a.HWC + int64_t(info.h0) * a.WC + int64_t(info.w0) * a.C + int64_t(g) * a.Cg;
    } else {
      info.h0 = kFar;
      info.w0 = kFar;
      info.base = 0;
    }
    pix[i] = info;
  }

  // ---- the gather: this thread's k column of every slice and its first row (pixel for A, channel for B).
  const int ld_row = tid / kChunksPerRow;
  const int ld_k = (tid % kChunksPerRow) * kV;
  // (r, s, c) of A's k = slice*kBK + ld_k, advanced by kBK per slice with carries only.
  int kr, ks, kc;
  {
    const int rs = ld_k / a.Cg;
    kc = ld_k - rs * a.Cg;
    kr = rs / a.S;
    ks = rs - kr * a.S;
  }
  // B: row n0 + ld_row + j*kRowStep of group g's weights; b_k = this slice's k of the column.
  int b_k = ld_k;
  const int b_rows = a.Ngemm - n0 - ld_row;  // this thread's rows j*kRowStep < b_rows exist
  const T* const b_row0 = a.wei + (int64_t(g) * a.Ngemm + n0 + (b_rows > 0 ? ld_row : 0)) * a.Kgemm;
  const int64_t b_step = int64_t(kRowStep) * a.Kgemm;

  Chunk ra[kPassA], rb[kPassB];  // the prefetch registers

  // Gathers the current slice into ra/rb (zero outside the input, past M, past R*S*C/groups, past N).
  auto load_slice = [&]() {
    const bool k_ok = kr < a.R;  // (c < Cg and s < S always hold)
    const int rdh = kr * a.dil_h, sdw = ks * a.dil_w;
    const int64_t koff = (int64_t(rdh) * a.W + sdw) * a.C + kc;
#pragma unroll
    for (int j = 0; j < kPassA; ++j) {
      const PixelInfo info = pix[ld_row + j * kRowStep];
      const int h = info.h0 + rdh, w = info.w0 + sdw;
      ra[j] = (k_ok && unsigned(h) < unsigned(a.H) && unsigned(w) < unsigned(a.W))
                  ? load_chunk<Chunk>(a.src + info.base + koff)
                  : zero_chunk<Chunk, T>();
    }
    const bool bk_ok = b_k < a.Kgemm;  // (a whole chunk: Kgemm % kV == 0 when kVec)
#pragma unroll
    for (int j = 0; j < kPassB; ++j)
      rb[j] = (bk_ok && j * kRowStep < b_rows) ? load_chunk<Chunk>(b_row0 + j * b_step + b_k) : zero_chunk<Chunk, T>();
  };
  auto advance_k = [&]() {
    b_k += kBK;
    kc += a.dc;
    const int carry_c = kc >= a.Cg;
    if (carry_c) kc -= a.Cg;
    ks += a.ds + carry_c;
    if (ks >= a.S) {  // (at most one carry: ks + ds + 1 <= 2S - 1)
      ks -= a.S;
      ++kr;
    }
    kr += a.dr;
  };
  auto store_slice = [&](int buf) {
    T* const As = stages + buf * kStage;
    T* const Bs = As + kBlockM * kLd;
#pragma unroll
    for (int j = 0; j < kPassA; ++j) *reinterpret_cast<Chunk*>(As + (ld_row + j * kRowStep) * kLd + ld_k) = ra[j];
#pragma unroll
    for (int j = 0; j < kPassB; ++j) *reinterpret_cast<Chunk*>(Bs + (ld_row + j * kRowStep) * kLd + ld_k) = rb[j];
  };

  // ---- the k loop
  const int warp = tid / 32;
  const int wm = (warp / 2) * kWarpM, wn = (warp % 2) * kWarpN;  // the warp tile's origin in the block tile
  wmma::fragment<wmma::accumulator, 16, 16, Op::kK, float> acc[kFragM][kFragN];
#pragma unroll
  for (int i = 0; i < kFragM; ++i)
#pragma unroll
    for (int j = 0; j < kFragN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  const int slices = (a.Kgemm + kBK - 1) / kBK;
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
    const T* const As = stages + cur * kStage;
    const T* const Bs = As + kBlockM * kLd;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += Op::kK) {
      wmma::fragment<wmma::matrix_b, 16, 16, Op::kK, typename Op::Operand, wmma::col_major> fb[kFragN];
#pragma unroll
      for (int j = 0; j < kFragN; ++j) {  // B^T stored n-major: element (k, n) at Bs[n*kLd + k], col_major
        wmma::load_matrix_sync(fb[j], Bs + (wn + 16 * j) * kLd + kk, kLd);
        Op::round(fb[j]);
      }
#pragma unroll
      for (int i = 0; i < kFragM; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, Op::kK, typename Op::Operand, wmma::row_major> fa;
        wmma::load_matrix_sync(fa, As + (wm + 16 * i) * kLd + kk, kLd);
        Op::round(fa);
#pragma unroll
        for (int j = 0; j < kFragN; ++j) wmma::mma_sync(acc[i][j], fa, fb[j], acc[i][j]);
      }
    }
    // NOTE: stage cur^1 was last read during slice t-1, and every thread has passed the barrier that
    // ended slice t-1, so it can be overwritten now; the barrier below publishes it for slice t+1.
    if (more) store_slice(cur ^ 1);
    __syncthreads();
  }

  // ---- the epilogue. NOTE: Cs reuses the stages: every warp has passed the loop's last barrier, after
  // its last fragment loads, so no one reads them any more.
  float* const Cs = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int i = 0; i < kFragM; ++i)
#pragma unroll
    for (int j = 0; j < kFragN; ++j)
      wmma::store_matrix_sync(Cs + (wm + 16 * i) * kLdC + wn + 16 * j, acc[i][j], kLdC, wmma::mem_row_major);
  __syncthreads();

  // Each thread: kE consecutive output channels (16 bytes of T) of rows e_row + i*kRowStepC; a warp
  // covers whole 128-byte (16-bit: 4 pixels x 64 channels) or 256-byte (fp32: 2 x 64) runs of dst rows.
  constexpr int kE = 16 / int(sizeof(T));
  constexpr int kChunksPerRowC = kBlockN / kE;
  constexpr int kRowStepC = kThreads / kChunksPerRowC;
  const int e_row = tid / kChunksPerRowC, e_col = (tid % kChunksPerRowC) * kE;
  const int n = n0 + e_col;
  const int64_t kout = int64_t(g) * a.Ngemm + n;  // the global output channel of the first column
#pragma unroll 2
  for (int row = e_row; row < kBlockM; row += kRowStepC) {
    const int64_t m = m0 + row;
    if (m >= a.M) break;  // rows only grow
    const float* const c = Cs + row * kLdC + e_col;
    const int64_t o = m * a.K + kout;  // dst[img][p][q][g*Kg + n]
    if (a.vec_store) {
      if (n >= a.Ngemm) continue;  // (a chunk is all in or all out: Kg % kE == 0)
      float v[kE];
#pragma unroll
      for (int e = 0; e < kE; e += 4) {
        const float4 f = *reinterpret_cast<const float4*>(c + e);
        v[e] = f.x, v[e + 1] = f.y, v[e + 2] = f.z, v[e + 3] = f.w;
      }
      // NOTE: all kE residual reads happen (inside epi) before the one store below: in-place safe.
      constexpr int kPerWord = 4 / int(sizeof(T));  // elements per 32-bit word, packed low first
      uint32_t word[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const T y = float_to_elem<T>(a.epi(v[e], kout + e, o + e));
        word[e / kPerWord] |= elem_bits(y) << (16 * (e % kPerWord));
      }
      *reinterpret_cast<uint4*>(a.dst + o) = make_uint4(word[0], word[1], word[2], word[3]);
    } else {
#pragma unroll
      for (int e = 0; e < kE; ++e)
        if (n + e < a.Ngemm) a.dst[o + e] = float_to_elem<T>(a.epi(c[e], kout + e, o + e));
    }
  }
#endif
}

// ---- host side ------------------------------------------------------------------------------------------
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Per-device facts, asked once per device: the SM count and the compute capability.
struct DeviceFacts {
  int sms = 0, cc_major = 0;
};
DeviceFacts facts_of_current_device() {
  static std::array<std::atomic<int>, 64> sms{}, cc{};  // 0 = not asked yet
  int dev = 0;
  CK_CUDA(cudaGetDevice(&dev));
  if (dev < 0 || dev >= int(sms.size())) dev = 0;
  DeviceFacts f{sms[size_t(dev)].load(std::memory_order_relaxed), cc[size_t(dev)].load(std::memory_order_relaxed)};
  if (f.sms == 0 || f.cc_major == 0) {
    CK_CUDA(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev));
    CK_CUDA(cudaDeviceGetAttribute(&f.cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    sms[size_t(dev)].store(f.sms, std::memory_order_relaxed);
    cc[size_t(dev)].store(f.cc_major, std::memory_order_relaxed);
  }
  return f;
}

template <typename T, int kBlockM, bool kVec>
void launch_kernel(const WmmaArgs<T>& a, dim3 grid, cudaStream_t stream) {
  static_assert(smem_bytes<T, kBlockM>() + kBlockM * sizeof(PixelInfo) <= 48 * 1024, "static smem: 48 KiB at most");
  igemm_wmma_kernel<T, kBlockM, kVec><<<grid, kThreads, 0, stream>>>(a);
  CK_LAUNCH("igemm_wmma_kernel");
}

constexpr int kTileMs[] = {128, 64};  // the block tile's m; n is always kBlockN = 64

std::string tile_name(int bm) { return std::to_string(bm) + "x" + std::to_string(kBlockN); }  // a variant

// The heuristic tile: 128x64 (twice the reuse of each fragment of B) when it still gives every SM at
// least 2 blocks, else 64x64 (twice the blocks for small M*N, e.g. the 7x7 and 14x14 ResNet layers).
// CONVKIT_WMMA_TILE=64x64 forces one for sweeps; an unknown value is ignored.
int heuristic_tile_m(const Conv2dProblem& p, int sms) {
  if (const char* e = env_override("CONVKIT_WMMA_TILE")) {
    for (int bm : kTileMs)
      if (tile_name(bm) == e) return bm;
  }
  const int64_t blocks128 = ceil_div(p.gemm_m(), 128) * ceil_div(p.gemm_n(), kBlockN) * p.groups;
  return blocks128 >= 2 * int64_t(sms) ? 128 : 64;
}

template <typename T>
void run_typed(const ConvCall& call, int bm) {
  const Conv2dProblem& pb = call.problem;
  WmmaArgs<T> a{};
  a.src = static_cast<const T*>(call.src.data);
  a.wei = static_cast<const T*>(call.wei.data);
  a.dst = static_cast<T*>(call.dst.data);
  a.epi = DeviceEpilogue<T>::from(call.epilogue);
  a.M = pb.gemm_m();
  a.Ngemm = int(pb.gemm_n());
  a.Kgemm = int(pb.gemm_k());
  a.Cg = int(pb.c_per_group());
  a.H = int(pb.h);
  a.W = int(pb.w);
  a.Q = int(pb.q());
  a.R = int(pb.r);
  a.S = int(pb.s);
  a.C = pb.c;
  a.K = pb.k;
  a.WC = pb.w * pb.c;
  a.HWC = pb.h * a.WC;
  a.PQ = pb.p() * pb.q();
  a.stride_h = int(pb.stride_h);
  a.stride_w = int(pb.stride_w);
  a.pad_h = int(pb.pad_h);
  a.pad_w = int(pb.pad_w);
  a.dil_h = int(pb.dilation_h);
  a.dil_w = int(pb.dilation_w);
  a.dc = kBlockK<T> % a.Cg;
  a.ds = (kBlockK<T> / a.Cg) % a.S;
  a.dr = kBlockK<T> / (a.Cg * a.S);  // (Cg*S <= Kgemm fits an int)
  constexpr int kChunk = 16 / int(sizeof(T));  // elements in 16 bytes
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  a.vec_store = a.Ngemm % kChunk == 0 && aligned16(a.dst);
  const bool vec_gather = a.Cg % kChunk == 0 && aligned16(a.src) && aligned16(a.wei);

  const dim3 grid(unsigned(ceil_div(a.M, bm)), unsigned(ceil_div(a.Ngemm, kBlockN)), unsigned(pb.groups));
  const cudaStream_t stream = as_stream(call.stream);
  if (bm == 128) {
    vec_gather ? launch_kernel<T, 128, true>(a, grid, stream) : launch_kernel<T, 128, false>(a, grid, stream);
  } else {
    vec_gather ? launch_kernel<T, 64, true>(a, grid, stream) : launch_kernel<T, 64, false>(a, grid, stream);
  }
}

class CudaIgemmWmma final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_igemm_wmma"; }
  std::string description() const override {
    return "implicit GEMM on tensor cores via WMMA (f16/bf16, or f32 with tf32 math; NHWC/KRSC): gathered "
           "double-buffered smem tiles, 2x2-warp 128x64 or 64x64 tiles, fused epilogue";
  }
  Support available() const override {
    if (Support s = CudaAlgorithm::available(); !s) return s;
    if (facts_of_current_device().cc_major < 8)
      return Support::no("its bf16 and tf32 wmma shapes need compute capability 8.0 (Ampere) or newer.");
    return Support::yes();
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (Support ok = require_tensor_core_config(cfg); !ok) return ok;
    if (Support ok = require_pixel_coords_below_2_30(p); !ok) return ok;  // see kFar
    if (p.gemm_k() > INT_MAX - 2 * kBlockK<__half>) return Support::no("R*S*C/groups passes 2^31 (32-bit k index).");
    if (ceil_div(p.gemm_n(), kBlockN) > 65535) return Support::no("K/groups passes 65535*64 (grid.y).");
    if (p.groups > 65535) return Support::no("more than 65535 groups (grid.z).");
    if (ceil_div(p.gemm_m(), 64) > INT_MAX) return Support::no("N*P*Q passes 2^37 (grid.x).");
    if (p.k > INT_MAX) return Support::no("K passes 2^31 (32-bit channel index).");
    return Support::yes();
  }

  std::vector<std::string> variants(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!cuda_present() || !can_implement(p, cfg)) return {};
    const int first = heuristic_tile_m(p, facts_of_current_device().sms);
    std::vector<std::string> v{tile_name(first)};
    for (int bm : kTileMs)
      if (bm != first) v.push_back(tile_name(bm));
    return v;
  }

  std::string detail(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!cuda_present()) return {};
    const int sms = facts_of_current_device().sms;
    const int bm = heuristic_tile_m(p, sms);
    const int chunk = cfg.dtype == DType::f32 ? 4 : 8;
    const int64_t blocks = ceil_div(p.gemm_m(), bm) * ceil_div(p.gemm_n(), kBlockN) * p.groups;
    const int bk = cfg.dtype == DType::f32 ? kBlockK<float> : kBlockK<__half>;
    return "tile " + tile_name(bm) + "x" + std::to_string(bk) + " (4 warps of " + std::to_string(bm / 2) +
           "x32, wmma " + (cfg.dtype == DType::f32 ? "16x16x8 tf32" : "16x16x16") + "), " +
           (p.c_per_group() % chunk == 0 ? "16-byte" : "scalar") + " gather, " + std::to_string(blocks) +
           " blocks on " + std::to_string(sms) + " SMs";
  }

  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok)
      throw Error(StatusCode::unsupported, name() + " cannot run " + pb.to_string() + ": " + ok.reason);
    const Epilogue& e = call.epilogue;
    check_residual_overlap(e.residual, call.dst.data, call.dst.bytes());
    int bm = 0;
    if (call.variant.empty()) {
      bm = heuristic_tile_m(pb, facts_of_current_device().sms);
    } else {
      for (int t : kTileMs)
        if (tile_name(t) == call.variant) bm = t;
      if (bm == 0)
        throw Error(StatusCode::invalid_problem, name() + " has no variant '" + call.variant + "' (it has " +
                                                     tile_name(128) + " and " + tile_name(64) + ").");
    }
    switch (call.config.dtype) {
      case DType::f16: run_typed<__half>(call, bm); break;
      case DType::bf16: run_typed<__nv_bfloat16>(call, bm); break;
      case DType::f32: run_typed<float>(call, bm); break;  // tf32 math (the gate refuses strict fp32)
    }
  }
};

}  // namespace

const Algorithm* make_cuda_igemm_wmma() {
  static CudaIgemmWmma algo;
  return &algo;
}

}  // namespace convkit::detail
