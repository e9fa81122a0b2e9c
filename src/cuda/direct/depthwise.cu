// cuda_depthwise: depthwise convolution (groups = C, K = M*C, any channel multiplier M) as a direct kernel
// that reads every input element from DRAM once and is bound by memory, not arithmetic.
//
// Adds over cuda_direct_smem: it does no work on the zeros an implicit-GEMM tile would hold for a
// depthwise layer (one input channel per output channel), so a block stages one input tile with its halo
// per chunk of channels and every staged element feeds R*S FMAs of its own channel. f32, f16 and bf16
// (fp32 accumulation, one rounding on store), NHWC and NCHW, every filter size, stride, dilation and padding
// that fits the staging budget, the whole fused epilogue, 64-bit global offsets.
//
// Work mapping.
//   NHWC: a block = one image x a tp x tq output tile x kb output channels. The channels are vectors of
//   kVec elements (16 bytes: 8 bf16/f16 or 4 f32; 1 where C is off the vector width, M > 1 or a pointer is
//   misaligned), `lanes` = kb / kVec threads side by side across them, so a warp's loads and stores are
//   contiguous runs along C. Each thread owns kQt outputs of one row, tq / kQt columns apart (a warp's
//   stores at one instant cover neighbouring pixels). Staging: 16-byte loads into s_in[ih][iw][cb].
//   NCHW: a block = `planes` consecutive (image, channel) planes x a tp x tq output tile; threads run along
//   Q (coalesced loads and stores along W), each owns kQt outputs of one column, tp / kQt rows apart.
// The filter taps of the block's channels sit in shared memory as fp32.
// The register-window kernels (below the general ones) take stride-1 3x3/5x5/7x7 layers: consecutive outputs
// per thread, so each staged input feeds up to 4*S FMAs from registers. The rows kernel
// (depthwise_rows.cuh) walks a column strip down the image with its rows in a cp.async ring; the column
// kernel (depthwise_cols.cuh) walks one output column a thread with no shared memory; the tensor-core kernel
// (depthwise_mma.cuh) runs two taps a multiply on mma.sync; the TMA kernel (depthwise_tma.cuh, Hopper) has
// its tiles copied in by the tensor-memory-access engine in a persistent grid, and its fp32 NCHW counterpart
// (depthwise_tma_nchw.cuh) likewise. Each is a variant ("rows/<threads>/d<depth>", "mma/<pixels>/s<steps>",
// "tma/<threads>/s<stages>[/c2|/px|/nchw]", "cols", "window", "general"); heuristic_kernel says which it takes
// where.
// nvcc -Xptxas -v (sm_90): general 32-78 registers, window 55-64, rows 78-100, mma 104-157, no spills.
// measured (H100, 2026-12-05, commit 5b90bef, NHWC batch 32, the heuristic's kernel, cuDNN in the same
// process): the 26 depthwise layers of MobileNetV2, EfficientNet-B0 and ConvNeXt-T in bf16 0.91-1.44x cuDNN,
// geomean 1.19x (mbv2_dw3x3_144_56 0.0308 ms, tma/256/s2/px, 1.24x; cnxt_dw7x7_384_14 0.0285, window, 0.91x);
// 23 layers in f32 0.92-3.01x, geomean 1.20x. f32 NCHW (2026-12-05, the NCHW TMA kernel): 0.93-6.65x, geomean
// 1.76x (mbv2_dw3x3_144_56 0.0514 ms, 1.61x; mbv2_dw3x3_960_7 0.0198, 0.93x).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/overrides.hpp"
#include "core/registry.hpp"
#include "cuda/common/check.cuh"
#include "cuda/common/cuda_algorithm.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/common/epilogue.cuh"
#include "cuda/common/vec.cuh"
#include "cuda/direct/direct_common.cuh"
#include "cuda/tc/tc_common.cuh"

namespace convkit::detail {
namespace {

constexpr int kQt = 4;                     // outputs per thread
constexpr int kThreadsTarget = 256;        // threads per block the tile chooser aims at
constexpr int64_t kSmemBudget = 96 * 1024; // dynamic shared memory per block (opted in above 48 KB)

// The tile of one launch, chosen on the host (plan_nhwc / plan_nchw).
struct DwPlan {
  int tp = 1, tq = kQt;  // output tile (tq a multiple of kQt in NHWC, tp a multiple of kQt in NCHW)
  int ih = 1, iw = 1;    // staged input rows and columns (halo included)
  int lanes = 1;         // NHWC: channel vectors per block (kb = lanes * vec)
  int cb = 1;            // NHWC: staged input channels per pixel (the smem pixel pitch, a multiple of vec)
  int planes = 1;        // NCHW: (image, channel) planes per block
  int vec = 1;           // elements per vector access
  int tiles_p = 1, tiles_q = 1;
  int64_t smem = 0;      // bytes
  int threads = 0;
};

template <typename T>
__device__ __forceinline__ T zero_elem() {
  return float_to_elem<T>(0.0f);
}

// ---- NHWC ---------------------------------------------------------------------------------------
// Block (tile, kblock): thread = lane (channel vector) + lanes * strip; strip = (row ps, column qs), and the
// thread's outputs are columns qs, qs + tq/kQt, ... of output row p0 + ps.
template <typename T, int kVec>
__global__ void depthwise_nhwc_kernel(ConvDims d, DwPlan t, const T* __restrict__ src, const T* __restrict__ wei,
                                      T* dst, DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
  extern __shared__ float4 smem4[];
  const int RS = d.r * d.s, kb = t.lanes * kVec, M = d.kg;  // kg = K/groups = the channel multiplier
  float* s_w = reinterpret_cast<float*>(smem4);             // [R*S][kb]
  float* s_in = s_w + RS * kb;                              // [ih][iw][cb], converted to fp32 once

  int64_t tile = blockIdx.x;
  const int tq_i = int(tile % t.tiles_q);
  tile /= t.tiles_q;
  const int tp_i = int(tile % t.tiles_p);
  const int64_t n = tile / t.tiles_p;
  const int p0 = tp_i * t.tp, q0 = tq_i * t.tq;
  const int k0 = blockIdx.y * kb;
  const int c0 = k0 / M;  // first staged input channel
  const int h0 = p0 * d.stride_h - d.pad_h, w0 = q0 * d.stride_w - d.pad_w;
  const int tid = threadIdx.x, nthreads = blockDim.x;

  // Filter taps of the block's output channels, transposed to [tap][channel] in fp32 (depthwise KRSC and
  // KCRS are the same array: [K][R][S]).
  for (int i = tid; i < RS * kb; i += nthreads) {
    const int kk = i % kb, rs = i / kb, k = k0 + kk;
    s_w[i] = k < d.k ? elem_to_float<T>(wei[int64_t(k) * RS + rs]) : 0.0f;
  }
  // The input tile with its halo, zeros outside the image and past the last channel, converted to fp32
  // here once instead of at each of its R*S uses.
  const int npix = t.ih * t.iw;
  if (kVec > 1) {
    // NOTE: kVec > 1 means M == 1 and C % kVec == 0, so cb == kb, a thread's vector column v = tid % lanes
    // is fixed and its pixels step by nthreads / lanes (threads are a multiple of lanes): no division per
    // element, and kUnroll independent 16-byte loads are in flight per thread before the first store.
    constexpr int kUnroll = 4;
    const int v = tid % t.lanes, step = nthreads / t.lanes;
    const int c = c0 + v * kVec;
    const bool c_ok = c < d.c;
    for (int pix0 = tid / t.lanes; pix0 < npix; pix0 += kUnroll * step) {
      Vec<T, kVec> val[kUnroll];
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        const int pix = pix0 + j * step, y = pix / t.iw, x = pix - y * t.iw;
        const int h = h0 + y, w = w0 + x;
        if (pix < npix && c_ok && h >= 0 && h < d.h && w >= 0 && w < d.w) {
          val[j] = *reinterpret_cast<const Vec<T, kVec>*>(src + ((n * d.h + h) * d.w + w) * d.c + c);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) val[j].v[e] = zero_elem<T>();
        }
      }
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        const int pix = pix0 + j * step;
        if (pix >= npix) break;
        float* o = s_in + pix * t.cb + v * kVec;
#pragma unroll
        for (int e = 0; e < kVec; e += 4)
          *reinterpret_cast<float4*>(o + e) =
              make_float4(elem_to_float<T>(val[j].v[e]), elem_to_float<T>(val[j].v[e + 1]),
                          elem_to_float<T>(val[j].v[e + 2]), elem_to_float<T>(val[j].v[e + 3]));
      }
    }
  } else {
    for (int u = tid; u < npix * t.cb; u += nthreads) {
      const int cc = u % t.cb, pix = u / t.cb, y = pix / t.iw, x = pix - y * t.iw;
      const int h = h0 + y, w = w0 + x, c = c0 + cc;
      float val = 0.0f;
      if (h >= 0 && h < d.h && w >= 0 && w < d.w && c < d.c)
        val = elem_to_float<T>(src[((n * d.h + h) * d.w + w) * d.c + c]);
      s_in[u] = val;
    }
  }
  __syncthreads();

  const int lane = tid % t.lanes, strip = tid / t.lanes;
  const int qstrips = t.tq / kQt;
  const int ps = strip / qstrips, qs = strip % qstrips;
  if (ps >= t.tp) return;
  const int kl = lane * kVec;  // the thread's first channel within the block
  // The thread's input channel within the staged pixel: its own vector (M == 1) or k / M - c0.
  const int ci = kVec > 1 ? kl : (k0 + kl) / M - c0;

  float acc[kQt][kVec];
#pragma unroll
  for (int i = 0; i < kQt; ++i)
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc[i][j] = 0.0f;

  // Word offsets: of the thread's first output's window origin, between its outputs, per tap row / column.
  const float* ip0 = s_in + (ps * d.stride_h * t.iw + qs * d.stride_w) * t.cb + ci;
  const int out_step = qstrips * d.stride_w * t.cb, row_step = d.dil_h * t.iw * t.cb, col_step = d.dil_w * t.cb;
  const float* wp = s_w + kl;
  for (int r = 0; r < d.r; ++r) {
    const float* ipr = ip0 + r * row_step;
    for (int s = 0; s < d.s; ++s, wp += kb) {
      float wv[kVec];
      if (kVec == 4 || kVec == 8) {
#pragma unroll
        for (int j = 0; j < kVec; j += 4) {
          const float4 w4 = *reinterpret_cast<const float4*>(wp + j);
          wv[j] = w4.x, wv[j + 1] = w4.y, wv[j + 2] = w4.z, wv[j + 3] = w4.w;
        }
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) wv[j] = wp[j];
      }
      const float* ip = ipr + s * col_step;
#pragma unroll
      for (int i = 0; i < kQt; ++i) {
        if (kVec == 4 || kVec == 8) {
#pragma unroll
          for (int j = 0; j < kVec; j += 4) {
            const float4 x4 = *reinterpret_cast<const float4*>(ip + i * out_step + j);
            acc[i][j] = fmaf(x4.x, wv[j], acc[i][j]);
            acc[i][j + 1] = fmaf(x4.y, wv[j + 1], acc[i][j + 1]);
            acc[i][j + 2] = fmaf(x4.z, wv[j + 2], acc[i][j + 2]);
            acc[i][j + 3] = fmaf(x4.w, wv[j + 3], acc[i][j + 3]);
          }
        } else {
          acc[i][0] = fmaf(ip[i * out_step], wv[0], acc[i][0]);
        }
      }
    }
  }

  const int p = p0 + ps, k = k0 + kl;
  if (p >= d.p || k >= d.k) return;
#pragma unroll
  for (int i = 0; i < kQt; ++i) {
    const int q = q0 + qs + i * qstrips;
    if (q >= d.q) continue;
    const int64_t o = ((n * d.p + p) * d.q + q) * d.k + k;
    Vec<T, kVec> out;
    if (kVec > 1) {
      // NOTE: the bias and the residual as whole vectors too (the residual read before the store: it may
      // be dst itself).
      Vec<T, kVec> bv, rv;
      if (epi.bias) bv = *reinterpret_cast<const Vec<T, kVec>*>(epi.bias + k);
      if (epi.residual) rv = *reinterpret_cast<const Vec<T, kVec>*>(epi.residual + o);
#pragma unroll
      for (int j = 0; j < kVec; ++j)
        out.v[j] = float_to_elem<T>(apply_epilogue<float>(
            epi.activation, epi.alpha, epi.beta, acc[i][j], epi.bias != nullptr,
            epi.bias ? elem_to_float<T>(bv.v[j]) : 0.0f, epi.residual != nullptr,
            epi.residual ? elem_to_float<T>(rv.v[j]) : 0.0f));
    } else {
      out.v[0] = float_to_elem<T>(epi(acc[i][0], k, o));
    }
    *reinterpret_cast<Vec<T, kVec>*>(dst + o) = out;
  }
}

// ---- NCHW ---------------------------------------------------------------------------------------
// Block = `planes` (image, channel) planes x one tile; thread = column qs + tq * (row strip ps + strips *
// plane); its outputs are rows ps, ps + tp/kQt, ... of column q0 + qs.
template <typename T>
__global__ void depthwise_nchw_kernel(ConvDims d, DwPlan t, const T* __restrict__ src, const T* __restrict__ wei,
                                      T* dst, DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
  extern __shared__ float4 smem4[];
  const int RS = d.r * d.s, M = d.kg;
  const int ldw = t.iw;
  float* s_w = reinterpret_cast<float*>(smem4);  // [planes][R*S]
  float* s_in = s_w + t.planes * RS;             // [planes][ih][iw]

  int64_t b = blockIdx.x;
  const int tq_i = int(b % t.tiles_q);
  b /= t.tiles_q;
  const int tp_i = int(b % t.tiles_p);
  const int64_t plane0 = (b / t.tiles_p) * t.planes;  // plane = n * K + k
  const int64_t nplanes = int64_t(d.n) * d.k;
  const int p0 = tp_i * t.tp, q0 = tq_i * t.tq;
  const int h0 = p0 * d.stride_h - d.pad_h, w0 = q0 * d.stride_w - d.pad_w;
  const int tid = threadIdx.x, nthreads = blockDim.x;

  for (int i = tid; i < t.planes * RS; i += nthreads) {
    const int64_t pl = plane0 + i / RS;
    const int k = int(pl % d.k);
    s_w[i] = pl < nplanes ? elem_to_float<T>(wei[int64_t(k) * RS + i % RS]) : 0.0f;
  }
  const int per_plane = t.ih * t.iw;
  // NOTE: one warp per staged row (one division per row, not per element), its lanes along W: coalesced
  // loads; the row loop is unrolled so that several rows' loads are in flight before the first store.
  const int warp = tid / 32, lane32 = tid % 32, nwarps = nthreads / 32;
#pragma unroll 4
  for (int row = warp; row < t.planes * t.ih; row += nwarps) {
    const int pi = row / t.ih, y = row - pi * t.ih;
    const int64_t pl = plane0 + pi;
    const int h = h0 + y;
    const bool row_ok = pl < nplanes && h >= 0 && h < d.h;
    const T* srow = src;
    if (row_ok) srow = src + ((pl / d.k * d.c + (pl % d.k) / M) * d.h + h) * int64_t(d.w);
    float* o = s_in + row * t.iw;
    for (int x = lane32; x < t.iw; x += 32) {
      const int w = w0 + x;
      o[x] = row_ok && w >= 0 && w < d.w ? elem_to_float<T>(srow[w]) : 0.0f;
    }
  }
  __syncthreads();

  const int rstrips = t.tp / kQt;
  const int qs = tid % t.tq, rest = tid / t.tq, ps = rest % rstrips, pi = rest / rstrips;
  const int64_t pl = plane0 + pi;
  if (pi >= t.planes || pl >= nplanes) return;
  const float* wp = s_w + pi * RS;
  const float* ip = s_in + int64_t(pi) * per_plane;
  float acc[kQt];
#pragma unroll
  for (int i = 0; i < kQt; ++i) acc[i] = 0.0f;
  for (int r = 0; r < d.r; ++r)
    for (int s = 0; s < d.s; ++s) {
      const float wv = wp[r * d.s + s];
      const int x = qs * d.stride_w + s * d.dil_w;
#pragma unroll
      for (int i = 0; i < kQt; ++i) {
        const int y = (ps + i * rstrips) * d.stride_h + r * d.dil_h;
        acc[i] = fmaf(ip[y * ldw + x], wv, acc[i]);
      }
    }
  const int q = q0 + qs;
  if (q >= d.q) return;
  const int64_t k = pl % d.k;
#pragma unroll
  for (int i = 0; i < kQt; ++i) {
    const int p = p0 + ps + i * rstrips;
    if (p >= d.p) continue;
    const int64_t o = (pl * d.p + p) * d.q + q;
    dst[o] = float_to_elem<T>(epi(acc[i], k, o));
  }
}

// ---- the register window (stride 1, dilation 1 along W, S = kS of 3, 5 or 7) -------------------------
// The common depthwise layers. Each thread owns kQt CONSECUTIVE outputs of one row (NHWC) or one column
// (NCHW), so that along the filter's row every staged input is read from shared memory once and feeds up
// to kQt * kS FMAs from registers, with the row's kS taps held in registers too: per filter row kQt+kS-1
// input reads instead of kQt*kS, and (NHWC) the tile stays in the input dtype, 16 bytes per 8 bf16
// channels, brought in by cp.async (zero-filled outside the image).

// NHWC, M = 1, C % kVec == 0, 16-byte aligned: the block and thread layout of depthwise_nhwc_kernel except
// that the thread's outputs are columns 4*qs .. 4*qs+3 of its row.
template <typename T, int kVec, int kS>
// NOTE: 4 channels a thread in every dtype (8-byte reads of 16-bit tiles): with 8 (16-byte reads) the
// accumulators and taps took 78-92 registers, 3 blocks per SM and 35% occupancy (ncu), and capping them at
// 64 spilled. The tile still arrives in 16-byte cp.async pieces.
__global__ void __launch_bounds__(256) depthwise_nhwc_window_kernel(ConvDims d, DwPlan t, const T* __restrict__ src,
                                                                   const T* __restrict__ wei, T* dst, DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
  extern __shared__ float4 smem4[];
  const int kb = t.lanes * kVec, RS = d.r * kS;
  float* s_w = reinterpret_cast<float*>(smem4);   // [R*kS][kb] fp32
  T* s_in = reinterpret_cast<T*>(s_w + RS * kb);  // [ih][iw][kb] in T
  int64_t tile = blockIdx.x;
  const int tq_i = int(tile % t.tiles_q);
  tile /= t.tiles_q;
  const int tp_i = int(tile % t.tiles_p);
  const int64_t n = tile / t.tiles_p;
  const int p0 = tp_i * t.tp, q0 = tq_i * t.tq, k0 = blockIdx.y * kb;
  const int h0 = p0 * d.stride_h - d.pad_h, w0 = q0 - d.pad_w;
  const int tid = threadIdx.x, nthreads = blockDim.x;

  const int npix = t.ih * t.iw;
  {
    // 16-byte pieces of kPiece elements; the threads are a multiple of the pieces per pixel (lanes is even
    // for 16-bit types), so a thread's piece column v is fixed.
    constexpr int kPiece = int(16 / sizeof(T));
    const int cv = kb / kPiece, v = tid % cv, step = nthreads / cv, c = k0 + v * kPiece;
    for (int pix = tid / cv; pix < npix; pix += step) {
      const int y = pix / t.iw, x = pix - y * t.iw, h = h0 + y, w = w0 + x;
      const bool ok = c < d.c && h >= 0 && h < d.h && w >= 0 && w < d.w;
      cp_async16_zfill(s_in + pix * kb + v * kPiece, ok ? src + ((n * d.h + h) * d.w + w) * d.c + c : src, ok);
    }
    cp_async_commit();
  }
  for (int i = tid; i < RS * kb; i += nthreads) {
    const int kk = i % kb, rs = i / kb, k = k0 + kk;
    s_w[i] = k < d.k ? elem_to_float<T>(wei[int64_t(k) * RS + rs]) : 0.0f;
  }
  cp_async_wait<0>();
  __syncthreads();

  const int lane = tid % t.lanes, strip = tid / t.lanes, qstrips = t.tq / kQt;
  const int ps = strip / qstrips, qs = (strip % qstrips) * kQt;
  if (ps >= t.tp) return;
  const int kl = lane * kVec;
  float acc[kQt][kVec];
#pragma unroll
  for (int i = 0; i < kQt; ++i)
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[i][e] = 0.0f;
  for (int r = 0; r < d.r; ++r) {
    float wv[kS][kVec];
#pragma unroll
    for (int s = 0; s < kS; ++s)
#pragma unroll
      for (int e = 0; e < kVec; e += 4) {
        const float4 w4 = *reinterpret_cast<const float4*>(s_w + (r * kS + s) * kb + kl + e);
        wv[s][e] = w4.x, wv[s][e + 1] = w4.y, wv[s][e + 2] = w4.z, wv[s][e + 3] = w4.w;
      }
    const T* ip = s_in + ((ps * d.stride_h + r * d.dil_h) * t.iw + qs) * kb + kl;
#pragma unroll
    for (int j = 0; j < kQt + kS - 1; ++j) {
      float x[kVec];
      load_vec_f32<T, kVec>(ip + j * kb, x);
#pragma unroll
      for (int i = 0; i < kQt; ++i) {
        const int s = j - i;
        if (s >= 0 && s < kS) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[i][e] = fmaf(x[e], wv[s][e], acc[i][e]);
        }
      }
    }
  }
  const int p = p0 + ps, k = k0 + kl;
  if (p >= d.p || k >= d.k) return;
  // The epilogue in apply_epilogue's order, its activation chosen once for the thread's values.
  const int nq = min(kQt, d.q - q0 - qs);
  const int64_t o0 = ((n * d.p + p) * d.q + q0 + qs) * d.k + k;
  Vec<T, kVec> bv;
  if (epi.bias) bv = *reinterpret_cast<const Vec<T, kVec>*>(epi.bias + k);
#pragma unroll
  for (int i = 0; i < kQt; ++i)
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      acc[i][e] *= epi.alpha;
      if (epi.bias) acc[i][e] += elem_to_float<T>(bv.v[e]);
    }
  if (epi.residual) {
#pragma unroll
    for (int i = 0; i < kQt; ++i)
      if (i < nq) {
        const Vec<T, kVec> rv = *reinterpret_cast<const Vec<T, kVec>*>(epi.residual + o0 + i * d.k);  // before the store
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[i][e] += epi.beta * elem_to_float<T>(rv.v[e]);
      }
  }
  activate_all<kQt * kVec, float>(epi.activation, &acc[0][0]);
#pragma unroll
  for (int i = 0; i < kQt; ++i)
    if (i < nq) {
      Vec<T, kVec> out;
#pragma unroll
      for (int e = 0; e < kVec; ++e) out.v[e] = float_to_elem<T>(acc[i][e]);
      *reinterpret_cast<Vec<T, kVec>*>(dst + o0 + i * d.k) = out;
    }
}

// NCHW, R = S = kS, stride 1, dilation 1: depthwise_nchw_kernel's block layout, but each thread owns output
// rows 4*ps .. 4*ps+3 of its column, and the kS x kS taps sit in registers: per column of the filter,
// kQt+kS-1 input reads feed kQt*kS FMAs.
template <typename T, int kS>
__global__ void __launch_bounds__(256) depthwise_nchw_window_kernel(ConvDims d, DwPlan t, const T* __restrict__ src,
                                                                   const T* __restrict__ wei, T* dst, DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
  extern __shared__ float4 smem4[];
  constexpr int RS = kS * kS;
  const int M = d.kg;
  float* s_w = reinterpret_cast<float*>(smem4);  // [planes][kS*kS]
  float* s_in = s_w + t.planes * RS;             // [planes][ih][iw]
  int64_t b = blockIdx.x;
  const int tq_i = int(b % t.tiles_q);
  b /= t.tiles_q;
  const int tp_i = int(b % t.tiles_p);
  const int64_t plane0 = (b / t.tiles_p) * t.planes, nplanes = int64_t(d.n) * d.k;
  const int p0 = tp_i * t.tp, q0 = tq_i * t.tq, h0 = p0 - d.pad_h, w0 = q0 - d.pad_w;
  const int tid = threadIdx.x, nthreads = blockDim.x;
  for (int i = tid; i < t.planes * RS; i += nthreads) {
    const int64_t pl = plane0 + i / RS;
    s_w[i] = pl < nplanes ? elem_to_float<T>(wei[(pl % d.k) * RS + i % RS]) : 0.0f;
  }
  const int warp = tid / 32, lane32 = tid % 32, nwarps = nthreads / 32;
#pragma unroll 2
  for (int row = warp; row < t.planes * t.ih; row += nwarps) {
    const int pi = row / t.ih, y = row - pi * t.ih, h = h0 + y;
    const int64_t pl = plane0 + pi;
    const bool row_ok = pl < nplanes && h >= 0 && h < d.h;
    const T* srow = row_ok ? src + ((pl / d.k * d.c + (pl % d.k) / M) * d.h + h) * int64_t(d.w) : src;
    float* o = s_in + row * t.iw;
    for (int x = lane32; x < t.iw; x += 32) {
      const int w = w0 + x;
      o[x] = row_ok && w >= 0 && w < d.w ? elem_to_float<T>(srow[w]) : 0.0f;
    }
  }
  __syncthreads();
  const int rstrips = t.tp / kQt;
  const int qs = tid % t.tq, rest = tid / t.tq, ps = (rest % rstrips) * kQt, pi = rest / rstrips;
  const int64_t pl = plane0 + pi;
  if (pi >= t.planes || pl >= nplanes) return;
  float w[kS][kS];
#pragma unroll
  for (int r = 0; r < kS; ++r)
#pragma unroll
    for (int s = 0; s < kS; ++s) w[r][s] = s_w[pi * RS + r * kS + s];
  const float* ip = s_in + (int64_t(pi) * t.ih + ps) * t.iw + qs;
  float acc[kQt] = {};
#pragma unroll
  for (int y = 0; y < kQt + kS - 1; ++y)
#pragma unroll
    for (int s = 0; s < kS; ++s) {
      const float x = ip[y * t.iw + s];
#pragma unroll
      for (int i = 0; i < kQt; ++i) {
        const int r = y - i;
        if (r >= 0 && r < kS) acc[i] = fmaf(x, w[r][s], acc[i]);
      }
    }
  const int q = q0 + qs;
  if (q >= d.q) return;
  const int64_t k = pl % d.k;
#pragma unroll
  for (int i = 0; i < kQt; ++i) {
    const int p = p0 + ps + i;
    if (p >= d.p) break;
    const int64_t o = (pl * d.p + p) * d.q + q;
    dst[o] = float_to_elem<T>(epi(acc[i], k, o));
  }
}

}  // namespace
}  // namespace convkit::detail

#include "cuda/direct/depthwise_rows.cuh"
#include "cuda/direct/depthwise_cols.cuh"
#include "cuda/direct/depthwise_mma.cuh"
#include "cuda/direct/depthwise_tma.cuh"
#include "cuda/direct/depthwise_tma_nchw.cuh"

namespace convkit::detail {
namespace {

// ---- planning -----------------------------------------------------------------------------------
int round_up(int v, int m) { return (v + m - 1) / m * m; }

void finish_geometry(const Conv2dProblem& pb, DwPlan& t) {
  t.ih = int((t.tp - 1) * pb.stride_h + (pb.r - 1) * pb.dilation_h + 1);
  t.iw = int((t.tq - 1) * pb.stride_w + (pb.s - 1) * pb.dilation_w + 1);
  t.tiles_p = int((pb.p() + t.tp - 1) / t.tp);
  t.tiles_q = int((pb.q() + t.tq - 1) / t.tq);
}

// NHWC: the channel lanes first (a divisor of C/vec up to 8 where one exists, so no lane idles), then
// the tile: tq the smallest of 4, 8, 16 that covers Q (16 at most), tp to fill ~256 threads; shrunk (tp,
// then tq, then lanes) until the staged tile and the taps fit the shared-memory budget.
// max_lanes / lane_mult: the register-window kernel takes 4-channel vectors, up to 16 lanes, an even count
// of them for 16-bit types (its tile arrives in 16-byte pieces of 8 channels).
DwPlan plan_nhwc(const Conv2dProblem& pb, int vec, int max_lanes = 8, int lane_mult = 1) {
  DwPlan t;
  t.vec = vec;
  const int64_t K = pb.k, M = pb.k_per_group();
  if (vec > 1) {
    const int64_t nv = K / vec;
    t.lanes = 0;
    for (int l = max_lanes; l >= 1; --l)
      if (nv % l == 0 && l % lane_mult == 0) { t.lanes = l; break; }
    if (t.lanes == 0 || (t.lanes < 4 && nv >= 8)) t.lanes = max_lanes;  // accept a partly idle last block
    t.lanes = int(std::min<int64_t>(t.lanes, nv));
  } else {
    t.lanes = int(std::min<int64_t>(K, 32));
  }
  const int64_t Q = pb.q(), P = pb.p();
  t.tq = Q <= 4 ? 4 : Q <= 8 ? 8 : 16;
  for (;;) {
    const int kb = t.lanes * vec;
    t.cb = vec > 1 ? kb : int((kb - 1) / M + 2);  // M > 1: the chunk may straddle one more input channel
    const int strips_per_row = t.tq / kQt;
    t.tp = int(std::max<int64_t>(1, std::min<int64_t>(P, kThreadsTarget / (t.lanes * strips_per_row))));
    for (;;) {
      finish_geometry(pb, t);
      t.smem = (int64_t(pb.r) * pb.s * kb + int64_t(t.ih) * t.iw * t.cb) * 4;  // fp32 taps and tile
      if (t.smem <= kSmemBudget || t.tp == 1) break;
      t.tp = std::max(1, t.tp / 2);
    }
    if (t.smem <= kSmemBudget) break;
    if (t.tq > kQt) { t.tq /= 2; continue; }
    if (t.lanes > 1) { t.lanes = std::max(1, t.lanes / 2); continue; }
    break;  // does not fit: can_implement says so
  }
  t.threads = t.lanes * t.tp * (t.tq / kQt);
  return t;
}

// NCHW: tq the smallest of 8, 16, 32, 64 that covers Q, tp a multiple of kQt covering P up to 32, and as
// many planes per block as make ~256 threads; shrunk (planes, tp, tq) to the budget.
DwPlan plan_nchw(const Conv2dProblem& pb) {
  DwPlan t;
  const int64_t Q = pb.q(), P = pb.p();
  t.tq = Q <= 8 ? 8 : Q <= 16 ? 16 : Q <= 32 ? 32 : 64;
  t.tp = int(std::min<int64_t>(round_up(int(std::min<int64_t>(P, 32)), kQt), 32));
  while (t.tq * (t.tp / kQt) > kThreadsTarget) t.tp -= kQt;  // one plane's threads fit 256 (launch bounds)
  for (;;) {
    const int per_plane_threads = t.tq * (t.tp / kQt);
    t.planes = std::max(1, kThreadsTarget / per_plane_threads);
    for (;;) {
      finish_geometry(pb, t);
      t.smem = int64_t(t.planes) * (int64_t(pb.r) * pb.s + int64_t(t.ih) * t.iw) * 4;
      if (t.smem <= kSmemBudget || t.planes == 1) break;
      t.planes = std::max(1, t.planes / 2);
    }
    if (t.smem <= kSmemBudget) break;
    if (t.tp > kQt) { t.tp = std::max(kQt, round_up(t.tp / 2, kQt)); continue; }
    if (t.tq > 8) { t.tq /= 2; continue; }
    break;
  }
  t.threads = round_up(t.planes * t.tq * (t.tp / kQt), 32);  // whole warps: the staging loop is warp-wide
  return t;
}

int64_t elem_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

// The vector width of an NHWC call: 16 bytes where C allows it and M = 1; the pointers are checked at
// run time (a misaligned one takes the scalar instance of the same kernel).
int nhwc_vec(const Conv2dProblem& pb, DType dt) {
  const int v = int(16 / elem_bytes(dt));
  return pb.k_per_group() == 1 && pb.c % v == 0 ? v : 1;
}

// cuda_depthwise's kernels, its variants: the rows kernel (depthwise_rows.cuh), the register window and the
// general kernels (this file). variants() lists those that take the problem, the heuristic's choice first.
// The rows kernel's variants are "rows/<threads>/d<depth>": ~threads a block (128 or 256), depth steps of rows
// in flight ahead (1..3).
constexpr const char* kWindow = "window";
constexpr const char* kGeneral = "general";

// The rows kernel: NHWC, the 16-byte vector path (M = 1, C a multiple of the vector), S of 3, 5 or 7,
// stride 1 or 2 and dilation 1 along W.
// One image's input and output under 2^31 elements (its offsets are 32-bit).
bool rows_fits(const Conv2dProblem& pb, Layout layout, int vec) {
  return layout == Layout::nhwc && vec > 1 && (pb.s == 3 || pb.s == 5 || pb.s == 7) &&
         (pb.stride_w == 1 || pb.stride_w == 2) && pb.dilation_w == 1 && pb.h * pb.w * pb.c < INT_MAX &&
         pb.p() * pb.q() * pb.k < INT_MAX;
}

struct RowsChoice {
  int threads = kThreadsTarget, depth = 1;
};

std::string rows_name(RowsChoice c) { return "rows/" + std::to_string(c.threads) + "/d" + std::to_string(c.depth); }

// "rows/<threads>/d<depth>" -> its choice; false for another name.
bool parse_rows_variant(const std::string& v, RowsChoice& c) {
  int th = 0, dp = 0;
  char tail = 0;
  if (std::sscanf(v.c_str(), "rows/%d/d%d%c", &th, &dp, &tail) != 2) return false;
  if ((th != 128 && th != 256) || dp < 1 || dp > 3) return false;
  c.threads = th, c.depth = dp;
  return true;
}

// The register-window kernels' filter width (3, 5 or 7), or 0 where they do not apply: NHWC needs the
// 16-byte vector path, stride and dilation 1 along W; NCHW a square filter with stride and dilation 1.
int window_size(const Conv2dProblem& pb, Layout layout, int vec) {
  if ((pb.s != 3 && pb.s != 5 && pb.s != 7) || pb.stride_w != 1 || pb.dilation_w != 1) return 0;
  if (layout == Layout::nhwc) return vec > 1 ? int(pb.s) : 0;
  return pb.r == pb.s && pb.stride_h == 1 && pb.dilation_h == 1 ? int(pb.s) : 0;
}

// NHWC rows tile: the channel lanes as plan_nhwc's window form chooses them (4-channel vectors, up to 16,
// even for 16-bit types), tq = 4m output columns with the m in 1..7 (1..4 at stride 2) that wastes the
// fewest columns of Q (the larger on a tie), rp rows a step to fill ~256 threads, shrunk to 64 KB of
// shared memory; then as many steps a block as leave ~1024 blocks (of 256 threads) (each block's first window is its only
// load that nothing overlaps).
DwRows plan_rows(const Conv2dProblem& pb, int64_t elem, RowsChoice choice = {}) {
  const int threads = choice.threads;
  DwRows t;
  t.depth = choice.depth;
  const int lane_mult = elem == 2 ? 2 : 1;
  const int64_t nv = pb.k / 4, P = pb.p(), Q = pb.q();
  t.lanes = 0;
  for (int l = 16; l >= 1; --l)
    if (nv % l == 0 && l % lane_mult == 0) { t.lanes = l; break; }
  if (t.lanes == 0 || (t.lanes < 4 && nv >= 8)) t.lanes = 16;
  t.lanes = int(std::min<int64_t>(t.lanes, nv));
  int best_m = 1;
  int64_t best_cols = INT64_MAX;
  for (int m = 1; m <= (pb.stride_w == 2 ? 4 : 7); ++m) {
    const int64_t cols = (Q + 4 * m - 1) / (4 * m) * (4 * m);
    if (cols <= best_cols) best_cols = cols, best_m = m;
  }
  int m = best_m;
  t.rp = int(std::max<int64_t>(1, std::min<int64_t>(P, threads / (t.lanes * m))));
  for (;;) {
    const int kb = t.lanes * 4;
    t.tq = 4 * m;
    t.iw = int((t.tq - 1) * pb.stride_w + pb.s);
    t.ih0 = int((t.rp - 1) * pb.stride_h + (pb.r - 1) * pb.dilation_h + 1);
    t.nslot = int(t.ih0 + t.depth * t.rp * pb.stride_h);
    t.smem = (int64_t(pb.r) * pb.s * kb * 4 + int64_t(t.nslot) * t.iw * kb * elem + 15) / 16 * 16;
    if (t.smem <= 64 * 1024) break;
    if (t.rp > 1) { t.rp = (t.rp + 1) / 2; continue; }
    if (m > 1) { --m; continue; }
    if (t.lanes > lane_mult && t.lanes % (2 * lane_mult) == 0) { t.lanes /= 2; continue; }
    break;  // does not fit: rows_plan_ok says so
  }
  t.tiles_q = int((Q + t.tq - 1) / t.tq);
  const int64_t total = (P + t.rp - 1) / t.rp;
  const int64_t kblocks = (pb.k + t.lanes * 4 - 1) / (t.lanes * 4);
  const int64_t base = int64_t(pb.n) * t.tiles_q * kblocks;
  const int64_t target = 1024 * kThreadsTarget / threads;
  t.steps = int(std::clamp<int64_t>((total * base + target - 1) / target, 1, total));
  t.chunks_p = int((total + t.steps - 1) / t.steps);
  t.threads = std::min(threads, round_up(t.lanes * m * t.rp, 32));  // whole warps
  return t;
}

bool rows_plan_ok(const DwRows& t) { return t.smem <= 64 * 1024; }

// The column kernel (depthwise_cols.cuh), variant "cols": NHWC, M = 1, a 3x3 filter, the same stride
// (1 or 2) both ways, dilation 1, C a multiple of 4, one image under 2^31 elements.
constexpr const char* kCols = "cols";

bool cols_take(const Conv2dProblem& pb, const ConvConfig& cfg) {
  return cfg.layout == Layout::nhwc && pb.k_per_group() == 1 && pb.r == kColsK && pb.s == kColsK &&
         pb.stride_h == pb.stride_w && (pb.stride_h == 1 || pb.stride_h == 2) && pb.dilation_h == 1 &&
         pb.dilation_w == 1 && pb.c % kColsVec == 0 && pb.h * pb.w * pb.c < INT_MAX && pb.p() * pb.q() * pb.k < INT_MAX;
}

// The column walk: as many groups of tp rows a thread as leave about 4 resident waves of threads
// (132 SMs x 2048), so the rows two groups share come from L1 and the taps are loaded once a walk.
DwCols plan_cols(const Conv2dProblem& pb) {
  DwCols t;
  t.cv = int(pb.c / kColsVec);
  const int64_t per_col = (pb.p() + kColsTP - 1) / kColsTP;
  const int64_t cols = int64_t(pb.n) * pb.q() * t.cv;
  const int64_t target = int64_t(4) * 132 * 2048;
  t.groups = int(std::clamp<int64_t>(cols * per_col / target, 1, per_col));
  t.strips = int((per_col + t.groups - 1) / t.groups);
  t.total = cols * t.strips;
  return t;
}

// The tensor-core kernel (depthwise_mma.cuh), variants "mma/<pixels>/s<steps>": ~pixels output pixels a
// channel block of 8 in a tile, up to `steps` tiles a block walks down the image. NHWC, f16/bf16, M = 1, C a
// multiple of 8, a square 3x3, 5x5 or 7x7 filter, one image under 2^31 elements.
struct MmaChoice {
  int pixels = 128, steps = 4;
};
constexpr MmaChoice kMmaChoices[] = {{128, 4}, {128, 1}, {128, 16}, {64, 4}, {64, 16}, {256, 4}};

std::string mma_name(MmaChoice c) { return "mma/" + std::to_string(c.pixels) + "/s" + std::to_string(c.steps); }

bool parse_mma_variant(const std::string& v, MmaChoice& c) {
  int px = 0, st = 0;
  char tail = 0;
  if (std::sscanf(v.c_str(), "mma/%d/s%d%c", &px, &st, &tail) != 2) return false;
  for (MmaChoice k : kMmaChoices)
    if (k.pixels == px && k.steps == st) { c = k; return true; }
  return false;
}

// ncb channel blocks a block (4, 2 where C/8 is not a multiple of 4, C/8 below 4 otherwise); tq the width in
// [min(Q, 8), min(Q, 32)] that wastes the fewest columns of Q (the widest on a tie); tp rows to make ~pixels
// output pixels a channel block, fewer while the block would pass 8 warps or 96 KB of shared memory.
DwMma plan_mma(const Conv2dProblem& pb, MmaChoice choice) {
  const int pixels = choice.pixels;
  DwMma t;
  const int64_t nv = pb.c / 8, P = pb.p(), Q = pb.q();
  t.ncb = nv % 4 == 0 ? 4 : nv % 2 == 0 ? 2 : int(std::min<int64_t>(nv, 4));
  int64_t best_waste = INT64_MAX;
  for (int64_t w = std::min<int64_t>(Q, 8); w <= std::min<int64_t>(Q, 32); ++w) {
    const int64_t waste = (Q + w - 1) / w * w - Q;
    if (waste <= best_waste) best_waste = waste, t.tq = int(w);
  }
  t.tp = int(std::clamp<int64_t>(pixels / t.tq, 1, P));
  for (;;) {
    t.mtiles = (t.tp * t.tq + 15) / 16;
    t.wm = (t.mtiles + kMmaTiles - 1) / kMmaTiles;
    t.ih = int((t.tp - 1) * pb.stride_h + (pb.r - 1) * pb.dilation_h + 1);
    t.iw = int((t.tq - 1) * pb.stride_w + (pb.s - 1) * pb.dilation_w + 1);
    t.pitch = round_up(t.ih * t.iw, 8) + 8 / t.ncb;
    t.smem = int64_t(t.ncb) * t.pitch * 16 * 2;  // two buffers
    if ((t.ncb * t.wm <= 8 && t.smem <= kSmemBudget) || t.tp == 1) break;
    --t.tp;
  }
  t.threads = t.ncb * t.wm * 32;
  t.tiles_p = int((P + t.tp - 1) / t.tp);
  t.tiles_q = int((Q + t.tq - 1) / t.tq);
  t.chunks = int((pb.c / 8 + t.ncb - 1) / t.ncb);
  t.steps = std::min(choice.steps, t.tiles_p);
  t.walks = (t.tiles_p + t.steps - 1) / t.steps;
  return t;
}

bool mma_take(const Conv2dProblem& pb, const ConvConfig& cfg, MmaChoice choice) {
  if (cfg.layout != Layout::nhwc || cfg.dtype == DType::f32 || pb.k_per_group() != 1 || pb.c % 8 != 0 ||
      pb.r != pb.s || (pb.r != 3 && pb.r != 5 && pb.r != 7) || pb.h * pb.w * pb.c >= INT_MAX ||
      pb.p() * pb.q() * pb.k >= INT_MAX)
    return false;
  const DwMma t = plan_mma(pb, choice);
  return t.ncb * t.wm <= 8 && t.smem <= kSmemBudget && int64_t(pb.n) * t.walks * t.tiles_q * t.chunks < INT_MAX;
}

// The TMA kernel (depthwise_tma.cuh), variants "tma/<threads>/s<stages>": up to `threads` a block, `stages`
// tiles in flight. NHWC, M = 1, a square 3x3, 5x5 or 7x7 filter, the same stride (1 or 2) both ways,
// dilation 1, C * element size a multiple of 16 bytes, one image's output under 2^31 elements, a device and
// a build of compute capability 9.0 or later (the copy engine).
// cl: channels a lane, 0 = tma_lane_channels' choice; 2 ("/c2") = two 16-bit channels a lane where C % 64 != 0
// too (the last chunk's box runs past C: the copy engine fills zeros, the lanes past C store nothing), for
// 128-byte box rows instead of 64.
// px ("/px"): whole pixels. A tile holds every channel of its pixels (or of an equal part of C, where C is
// over 256 channels: a box row's limit), a group of C / kCl threads shares each patch of outputs (a group
// may straddle warps), so no lane idles on channels past C (at C = 144 the 64-channel chunks spend a quarter
// of their work past C), 16-bit types take two channels a lane at any C, and a thread's taps load once.
struct TmaChoice {
  int threads = 256, stages = 2, cl = 0, px = 0;  // cl: 0 the default, 2 two 16-bit channels a lane at any C
                                                   // (chunks), 1 one channel a lane and 4 x 4 outputs a thread
                                                   // (whole pixels at 7x7 stride 1: the /c1 variants)
};
constexpr TmaChoice kTmaChoices[] = {{256, 2, 0},    {256, 3, 0},    {256, 4, 0},    {128, 3, 0},
                                    {128, 4, 0},    {256, 2, 2},    {256, 3, 2},    {256, 2, 0, 1},
                                    {256, 3, 0, 1}, {128, 3, 0, 1}, {256, 2, 1, 1}, {128, 3, 1, 1}};

std::string tma_name(TmaChoice c) {
  return "tma/" + std::to_string(c.threads) + "/s" + std::to_string(c.stages) + (c.cl == 2 ? "/c2" : "") +
         (c.px ? "/px" : "") + (c.cl == 1 ? "/c1" : "");
}

bool parse_tma_variant(const std::string& v, TmaChoice& c) {
  for (TmaChoice k : kTmaChoices)
    if (tma_name(k) == v) { c = k; return true; }
  return false;
}

// A thread's outputs (rows kPw x columns kQt) for a filter size and stride: as many as keep the taps, the
// accumulators and one input row in registers (under ~128). `wide` (the /px/c1 variants at 7x7 stride 1, one
// channel a lane): 4 x 4 outputs, whose window is 100 shared-memory loads for 16 outputs instead of 64 for 4 (the
// 2 x 2 patch's loads kept the shared-memory pipe as busy as the FMAs); two 16-bit channels a lane have 98 taps
// to hold and stay at 2 x 2.
struct TmaShape {
  int pw, qt;
};
constexpr TmaShape tma_shape(int k, int u, bool wide = false) {
  return k == 3 ? (u == 1 ? TmaShape{4, 4} : TmaShape{2, 4})
         : k == 5 ? (u == 1 ? TmaShape{2, 4} : TmaShape{2, 2})
                  : (u == 1 ? (wide ? TmaShape{4, 4} : TmaShape{2, 2}) : TmaShape{1, 2});
}

// Channels a lane: two 16-bit ones (a 32-bit word) where C is a multiple of 64, else one (so that the last
// chunk of 32 * kCl channels idles fewer lanes); one fp32.
int tma_lane_channels(const Conv2dProblem& pb, int64_t elem) { return elem == 2 && pb.c % 64 == 0 ? 2 : 1; }

// Whole pixels' channels a lane: two 16-bit ones, except in the /c1 variants; one fp32.
int tma_pixel_lane_channels(int64_t elem, TmaChoice choice) { return elem == 2 && choice.cl != 1 ? 2 : 1; }

// Whole pixels: the fewest equal parts of C whose channels fit a box row (256), are a multiple of 16 bytes
// (a tensor map's box row) and whose threads (two 16-bit channels or one fp32 a thread) fit the block;
// 0 where none does.
int tma_pixel_parts(const Conv2dProblem& pb, int64_t elem, int threads, int64_t cl) {
  for (int64_t n = 1; n <= pb.c; ++n) {
    const int64_t ch = pb.c / n;
    if (pb.c % n == 0 && ch <= 256 && (ch * elem) % 16 == 0 && ch % cl == 0 && ch / cl <= threads) return int(n);
  }
  return 0;
}

// Whether this process's device and build run the TMA kernel: compute capability 9.0 or later, and the
// kernel's code built for it (a build for older targets only has an empty body).
bool tma_device_ok();

// wc warps across the columns: the count up to threads/32 whose tile wastes the fewest columns of Q (the
// larger on a tie); then wr warps down the rows, as many as the rest of the block allows without passing P;
// then nsub row groups a warp, the count with the fewest input rows staged plus output rows computed down
// the image (halo re-reads against rows past P; the larger on a tie) while a stage stays under 32 KB (so
// that 2-3 blocks fit an SM) and the launch keeps at least 512 tiles (about 4 a multiprocessor): fewer,
// taller tiles re-read fewer halo rows and pay the per-tile wait, barrier and index arithmetic less often.
DwTma plan_tma(const Conv2dProblem& pb, int64_t elem, TmaChoice choice) {
  DwTma t;
  const TmaShape sh = tma_shape(int(pb.r), int(pb.stride_h), choice.px && choice.cl == 1);  // (tma_take: 7x7 stride 1)
  const int K = int(pb.r), U = int(pb.stride_h);
  t.px = choice.px;
  if (choice.px) {
    t.cl = tma_pixel_lane_channels(elem, choice);
    t.chunks = tma_pixel_parts(pb, elem, choice.threads, t.cl);
    t.chunk_ch = int(pb.c / std::max(t.chunks, 1));
    t.lanes = std::max(t.chunk_ch / t.cl, 1);
  } else {
    t.cl = choice.cl ? choice.cl : tma_lane_channels(pb, elem);
    t.chunk_ch = 32 * t.cl;
    t.lanes = 32;
    t.chunks = int((pb.c + t.chunk_ch - 1) / t.chunk_ch);
  }
  t.pix = int(t.chunk_ch * elem);
  const int max_warps = std::max(choice.threads / t.lanes, 1);  // thread groups a block
  const int64_t P = pb.p(), Q = pb.q();
  int64_t best_cols = INT64_MAX;
  for (int m = 1; m <= max_warps; ++m) {
    const int64_t cols = (Q + sh.qt * m - 1) / (sh.qt * m) * (sh.qt * m);
    if (cols <= best_cols) best_cols = cols, t.wc = m;
  }
  t.wr = int(std::clamp<int64_t>((P + sh.pw - 1) / sh.pw, 1, max_warps / t.wc));
  t.tile_q = sh.qt * t.wc;
  t.iw = (t.tile_q - 1) * U + K;
  t.tiles_q = int((Q + t.tile_q - 1) / t.tile_q);
  const int64_t groups = (P + int64_t(sh.pw) * t.wr - 1) / (int64_t(sh.pw) * t.wr);  // row groups of wr warps
  const int64_t per_group = int64_t(pb.n) * t.chunks * t.tiles_q;
  int64_t best_cost = INT64_MAX;
  for (int64_t m = 1; m <= groups; ++m) {
    const int64_t rows = sh.pw * t.wr * m, ih = (rows - 1) * U + K, tiles = (groups + m - 1) / m;
    if (m > 1 && (ih * t.iw * t.pix > 32 * 1024 || per_group * tiles < 512)) break;
    const int64_t cost = tiles * (ih + rows);
    if (cost <= best_cost) best_cost = cost, t.nsub = int(m);
  }
  t.tile_p = sh.pw * t.wr * t.nsub;
  t.ih = (t.tile_p - 1) * U + K;
  t.stages = choice.stages;
  // NOTE: a TMA destination is 128-byte aligned, so every stage is a multiple of 128 bytes.
  t.box_bytes = int(t.ih * t.iw * t.pix);
  t.stage_bytes = (t.box_bytes + 127) / 128 * 128;
  t.smem = int64_t(t.stages) * t.stage_bytes;
  t.tiles_p = int((P + t.tile_p - 1) / t.tile_p);
  t.items = int(std::min<int64_t>(per_group * t.tiles_p, INT_MAX));
  t.threads = t.lanes * t.wc * t.wr;
  t.div_p = FastDiv(uint32_t(t.tiles_p));
  t.div_q = FastDiv(uint32_t(t.tiles_q));
  t.div_n = FastDiv(uint32_t(std::max<int64_t>(pb.n, 1)));
  return t;
}

bool tma_take(const Conv2dProblem& pb, const ConvConfig& cfg, TmaChoice choice) {
  if (cfg.layout != Layout::nhwc || pb.k_per_group() != 1 || pb.r != pb.s || (pb.r != 3 && pb.r != 5 && pb.r != 7) ||
      pb.stride_h != pb.stride_w || (pb.stride_h != 1 && pb.stride_h != 2) || pb.dilation_h != 1 ||
      pb.dilation_w != 1 || (pb.c * elem_bytes(cfg.dtype)) % 16 != 0 || pb.p() * pb.q() * pb.k >= INT_MAX)
    return false;
  if (choice.cl == 2 && (elem_bytes(cfg.dtype) != 2 || pb.c % 64 == 0)) return false;  // (else the same as cl 0)
  if (choice.cl == 1 && (!choice.px || pb.r != 7 || pb.stride_h != 1)) return false;
  if (choice.px && tma_pixel_parts(pb, elem_bytes(cfg.dtype), choice.threads,
                                   tma_pixel_lane_channels(elem_bytes(cfg.dtype), choice)) == 0)
    return false;
  if (!tma_device_ok()) return false;
  const DwTma t = plan_tma(pb, elem_bytes(cfg.dtype), choice);
  return t.smem <= 200 * 1024 && t.ih <= 256 && t.iw <= 256 && int64_t(pb.n) * t.chunks * t.tiles_q * t.tiles_p < INT_MAX;
}

// The NCHW TMA kernel (depthwise_tma_nchw.cuh), variants "tma/<threads>/s<stages>/nchw": fp32 NCHW, M = 1, a
// square 3x3, 5x5 or 7x7 filter, the same stride (1 or 2) both ways, dilation 1; W a multiple of 4 with the
// padding along W (R - 1) / 2 modulo 4 (tiles with their halo) or an image of at most 256 pixels (whole planes,
// any padding), a device and build of compute capability 9.0.
constexpr TmaChoice kTmaNchwChoices[] = {{256, 2}, {256, 3}, {128, 3}, {64, 4}};

std::string tma_nchw_name(TmaChoice c) { return tma_name(c) + "/nchw"; }

bool parse_tma_nchw_variant(const std::string& v, TmaChoice& c) {
  for (TmaChoice k : kTmaNchwChoices)
    if (tma_nchw_name(k) == v) { c = k; return true; }
  return false;
}

// A thread's output rows (kPw; its columns are always 4): as many as keep the taps, the accumulators and a
// window row in registers.
constexpr int tma_nchw_rows(int k, int u) { return k == 3 ? (u == 1 ? 4 : 2) : k == 5 ? 2 : (u == 1 ? 2 : 1); }

// Tiles (W % 4 == 0): tx threads across the columns (the most, up to 32, whose box row stays within 256
// columns), then the (ty, nsub) with the fewest input rows staged plus output rows computed down the image
// (halo re-reads against rows past P; more threads on a tie) while a channel's stage stays under 32 KB; then
// cb channels a tile with the rest of the block, as long as a stage stays under 32 KB and the launch keeps
// 512 tiles. Planes (other W, up to 256 pixels): the whole image a tile, cb planes of it (a multiple of g).
DwTmaNchw plan_tma_nchw(const Conv2dProblem& pb, TmaChoice choice) {
  DwTmaNchw t;
  const int K = int(pb.r), U = int(pb.stride_h), pw = tma_nchw_rows(K, U), qt = 4;
  const int64_t P = pb.p(), Q = pb.q(), HW = pb.h * pb.w;
  const int64_t groups = (P + pw - 1) / pw;  // row groups of the image
  t.stages = choice.stages;
  t.plane = pb.w % 4 != 0;
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  if (t.plane) {
    while ((t.g * HW * 4) % 16 != 0) ++t.g;
    t.tx = int(ceil_div(Q, qt));
    t.nsub = 1;
    while (t.tx * ceil_div(groups, t.nsub) > choice.threads && t.nsub < groups) ++t.nsub;
    t.ty = int(ceil_div(groups, t.nsub));
    t.tile_q = int(Q), t.tile_p = int(P);
    t.iw = int(pb.w), t.ih = int(pb.h);
    const int64_t per_ch = int64_t(t.tx) * t.ty;
    t.cb = int(std::max<int64_t>(t.g, choice.threads / std::max<int64_t>(per_ch, 1) / t.g * t.g));
    while (t.cb > t.g && (t.cb * HW * 4 > 32 * 1024 || int64_t(pb.n) * ceil_div(pb.c, t.cb) < 512)) t.cb -= t.g;
  } else {
    // (the box from tma_nchw_off(K) columns left of the first window through the last window's 16-byte loads)
    const int off = tma_nchw_off(K), cols = (qt - 1) * U + K;
    auto iw_of = [&](int64_t tx) { return int(((tx - 1) * qt * U + (off + cols + 3) / 4 * 4 + 3) / 4 * 4); };
    t.tx = int(std::min<int64_t>({ceil_div(Q, qt), 32, choice.threads}));
    while (t.tx > 1 && iw_of(t.tx) > 256) --t.tx;
    t.iw = iw_of(t.tx);
    t.tile_q = t.tx * qt;
    int64_t best = INT64_MAX;
    for (int64_t ty = 1; ty <= std::min<int64_t>(groups, choice.threads / t.tx); ++ty)
      for (int64_t m = 1; m <= ceil_div(groups, ty); ++m) {
        const int64_t rows = pw * ty * m, ih = (rows - 1) * U + K, tiles = ceil_div(groups, ty * m);
        if ((ih > 256 || ih * t.iw * 4 > 32 * 1024) && (ty > 1 || m > 1)) break;  // (taller only grows)
        const int64_t cost = tiles * (ih + rows);
        if (cost <= best) best = cost, t.ty = int(ty), t.nsub = int(m);
      }
    t.tile_p = pw * t.ty * t.nsub;
    t.ih = (t.tile_p - 1) * U + K;
    const int64_t tiles = ceil_div(Q, t.tile_q) * ceil_div(P, t.tile_p);
    t.cb = int(std::clamp<int64_t>(choice.threads / (int64_t(t.tx) * t.ty), 1, std::min<int64_t>(pb.c, 256)));
    while (t.cb > 1 && (int64_t(t.cb) * t.ih * t.iw * 4 > 32 * 1024 || int64_t(pb.n) * ceil_div(pb.c, t.cb) * tiles < 512))
      --t.cb;
  }
  t.chunks = int(ceil_div(pb.c, t.cb));
  t.tiles_q = int(ceil_div(Q, t.tile_q));
  t.tiles_p = int(ceil_div(P, t.tile_p));
  t.box_bytes = int(int64_t(t.cb) * t.ih * t.iw * 4);
  t.stage_bytes = (t.box_bytes + 127) / 128 * 128;
  // Outputs of rows not a multiple of 4 where a tile is whole planes (one contiguous run of the output): staged
  // for the block to store in 16-byte pieces (each thread's own 4 columns would be scalar stores 4 apart, every
  // 32-byte sector written piecemeal by 4 instructions). At 3x3 and on 7-column images (H100, f32 NCHW batch 32,
  // docs/perf.md 2026-12-05): 960@7 0.0194 -> 0.0123 ms, 576@14 0.0324 -> 0.0215, 240@28 stride 2 0.0236 ->
  // 0.0228; not at 5x5 and 7x7 on 14 columns, where each output's 25-49 FMAs dwarf its store and the extra pass
  // through shared memory cost 1-5% (672@14 5x5 0.0317 -> 0.0333).
  if (t.tiles_q == 1 && t.tiles_p == 1 && Q % 4 != 0 && (K == 3 || Q <= 8))
    t.out_bytes = int((int64_t(t.cb) * P * Q * 4 + 15) / 16 * 16);
  t.smem = int64_t(t.stages) * t.stage_bytes + 2 * int64_t(t.out_bytes);
  t.items = int(std::min<int64_t>(int64_t(pb.n) * t.chunks * t.tiles_q * t.tiles_p, INT_MAX));
  t.threads = t.cb * t.tx * t.ty;
  t.div_p = FastDiv(uint32_t(t.tiles_p));
  t.div_q = FastDiv(uint32_t(t.tiles_q));
  t.div_n = FastDiv(uint32_t(std::max<int64_t>(pb.n, 1)));
  return t;
}

bool tma_nchw_take(const Conv2dProblem& pb, const ConvConfig& cfg, TmaChoice choice) {
  if (cfg.layout != Layout::nchw || cfg.dtype != DType::f32 || pb.k_per_group() != 1 || pb.r != pb.s ||
      (pb.r != 3 && pb.r != 5 && pb.r != 7) || pb.stride_h != pb.stride_w || (pb.stride_h != 1 && pb.stride_h != 2) ||
      pb.dilation_h != 1 || pb.dilation_w != 1 || pb.n <= 0)
    return false;
  const int64_t HW = pb.h * pb.w;
  if (pb.w % 4 != 0) {  // planes: g planes a box row, within a box row's 256 elements
    int64_t g = 1;
    while ((g * HW * 4) % 16 != 0) ++g;
    if (g * HW > 256 || pb.c % g != 0) return false;
  } else if (pb.pad_w % 4 != (pb.r - 1) / 2 % 4) {  // tiles: a box's first column a multiple of 4
    return false;
  }
  if (!tma_device_ok()) return false;
  const DwTmaNchw t = plan_tma_nchw(pb, choice);
  return t.threads <= choice.threads && t.smem <= 200 * 1024 && t.ih <= 256 && t.iw <= 256 && t.cb <= 256 &&
         int64_t(pb.n) * t.chunks * t.tiles_q * t.tiles_p < INT_MAX;
}

// The kernel of one call: the rows kernel with its tile choice, the tensor-core kernel with its tile, the
// column, the window or the general kernel.
struct DwKernel {
  enum Kind { rows, mma, cols, window, general, tma, tma_nchw } kind = general;
  RowsChoice rows_choice;
  MmaChoice mma_choice;
  TmaChoice tma_choice;
};

std::string name_of(const DwKernel& k) {
  return k.kind == DwKernel::rows     ? rows_name(k.rows_choice)
         : k.kind == DwKernel::mma    ? mma_name(k.mma_choice)
         : k.kind == DwKernel::tma    ? tma_name(k.tma_choice)
         : k.kind == DwKernel::tma_nchw ? tma_nchw_name(k.tma_choice)
         : k.kind == DwKernel::cols   ? kCols
         : k.kind == DwKernel::window ? kWindow
                                      : kGeneral;
}

bool rows_take(const Conv2dProblem& pb, const ConvConfig& cfg, RowsChoice c) {
  const int vec = cfg.layout == Layout::nhwc ? nhwc_vec(pb, cfg.dtype) : 1;
  return rows_fits(pb, cfg.layout, vec) && rows_plan_ok(plan_rows(pb, elem_bytes(cfg.dtype), c));
}

bool window_takes(const Conv2dProblem& pb, const ConvConfig& cfg) {
  return window_size(pb, cfg.layout, cfg.layout == Layout::nhwc ? nhwc_vec(pb, cfg.dtype) : 1) > 0;
}

// The rows kernel's tile choices in the order variants() lists them.
constexpr RowsChoice kRowsChoices[] = {{256, 1}, {256, 2}, {256, 3}, {128, 1}, {128, 2}, {128, 3}};

// The heuristic, from the bf16 and f32 NHWC suites on the H200 (docs/perf.md, 2026-12-01): at stride 2 the
// rows kernel in blocks of ~128 threads (it beats the general kernel 1.5-2.5x; no window kernel applies); at
// stride 1 the rows kernel in blocks of ~256 on images of 28 columns or more, and the window kernel on
// smaller ones (7x7, 14x14: its one-shot tiles keep more blocks in flight than a walk down 7 or 14 rows can;
// the rows kernel won by 0-10% from Q = 28 up and lost by 4-25% below). Allocation-free: run() asks it on
// every launch.
// The column kernel (2026-12-03, the same suites): at f32 3x3 stride 2, where it beat the best of the rows
// and window kernels on each of MobileNetV2's four layers by 1-29%, and wherever neither of those takes the
// problem (C a multiple of 4 but not of the 16-byte vector), where it beat the general kernel 1.2-1.4x.
// The tensor-core kernel (2026-12-03): 0.67-1.04x the rows and window kernels on the bf16 suites' layers, but
// 1.6-2.6x the general kernel (and 3.4-9x cuDNN) on a stride-3 and two dilated bf16 layers: it takes the
// 16-bit 3x3/5x5/7x7 layers that only the general kernel would (strides above 2, dilation along W).
// The TMA kernel (2026-12-04, the bf16 and f32 NHWC suites at batch 32 on the H200, docs/perf.md): its
// variant tma/256/s2 (the most often fastest of its variants, within 10% of the best on all but two layers)
// wherever it beat the other kernels' best: 3x3 at stride 1 (bf16 1.02-1.17x from 7 to 112 columns; f32
// 1.09-1.28x up to 28 columns, 0.88x at 56), 3x3 at stride 2 on outputs of 14 columns or fewer (1.01-1.22x;
// 0.87-0.99x wider), 5x5 (f32 1.01-1.56x; bf16 1.07-1.12x from 28 columns, 0.88-1.00x below) and 7x7 from
// 28 columns (bf16 0.99-1.08x, f32 1.15-1.40x; 0.69-0.87x at 14 and 7 columns, where its 2x2 outputs a
// thread leave too few warps and the window kernel's one-shot tiles win).
// 2026-12-04 (EfficientNet-B0 and MobileNetV2 in bf16, the kernel with several row groups a warp): bf16 5x5
// below 28 columns too (1.13x and 1.31x the window kernel at 14 columns, 1.36x the rows kernel at 7 columns
// stride 2), there in blocks of 128 threads and 3 stages where Q <= 7 (1.09x the window kernel where 256/s2
// lost 0.88x); two channels a lane (/c2) for 16-bit 3x3 with C % 64 != 0 from 128 channels (1.01-1.09x the
// one-channel lanes; at 32 channels half the lanes would idle: 0.72x).
// 2026-12-05 (the three suites in bf16 and f32 on an H100, docs/perf.md): whole pixels (tma/256/s2/px) for
// every layer of up to 256 channels, each filter and stride: 1.03-1.54x the rule above in bf16 (144@56
// 1.54x, 96@112 stride 2 1.35x, 5x5 stride 2 at 144 1.34x, 7x7 192@28 1.31x) and 1.01-1.34x in f32; s2 the
// best of its variants or within 3% of it on each. Past 256 channels (parts of C, two or three thread groups
// a block) it lost where the filter is 5x5 or 7x7 (0.68-0.97x) and tied at 3x3: not taken there.
// 2026-12-05 (ConvNeXt-T's 7x7 layers on an H100): at 7x7 stride 1 from 14 columns whole pixels at any C, 16-bit
// with one channel a lane and 4 x 4 outputs a thread (tma/256/s2/px/c1): bf16 96@56 0.0431 ms against /px's
// 0.0525 (cuDNN 0.0724), 192@28 0.0259 against 0.0314, 384@14 (two parts of 192) 0.0221 against the window
// kernel's 0.0287; f32 /px (one channel a lane already, 2 x 2 outputs) at 384@14 0.0264 against the window's
// 0.0340. At 768@7 the window kernel stays (bf16 0.0180 against /c1's 0.0180-0.0199; f32 0.0192 against /px's
// 0.0240). f32 takes /c1 there too (one fp32 a lane as in /px, but 4 x 4 outputs; H200): 96@56 0.0412 against
// /px's 0.0621, 192@28 0.0312 against 0.0357, 384@14 0.0257 against 0.0260.
// 2026-12-05 (MobileNetV2's bf16 3x3 layers past 256 channels, an H100): whole pixels in parts of C there too,
// where the chunks had tied before: 384@14 0.0118 ms against the chunks' 0.0126 (cuDNN 0.0125), 576@14 0.0136
// against 0.0141 (0.0145), 576@14 stride 2 0.0099 against 0.0108 (0.0123), 960@7 0.0093 against 0.0095.
// 2026-12-06, with the rule (another H100): EfficientNet-B0's 480@14 0.0123 against /c2's 0.0127 (0.0142),
// 1152@7 0.0095 against the chunks' 0.0103 (0.0114), 576@14 0.0131 against 0.0151; 960@7 0.0101 against
// 0.0093, the one loss.
constexpr TmaChoice kTmaPixels{256, 2, 0, 1}, kTmaPixelsC1{256, 2, 1, 1};
TmaChoice tma_pixels_choice(const Conv2dProblem& pb, const ConvConfig& cfg) {
  if (pb.r == 7 && pb.stride_h == 1 && pb.q() >= 14 && tma_take(pb, cfg, kTmaPixelsC1)) return kTmaPixelsC1;
  const bool parts_win = pb.r == 3 && elem_bytes(cfg.dtype) == 2;  // (past 256 channels: 16-bit 3x3 only)
  return (pb.c <= 256 || parts_win) && tma_take(pb, cfg, kTmaPixels) ? kTmaPixels : TmaChoice{};
}
bool tma_pixels_take(const Conv2dProblem& pb, const ConvConfig& cfg) { return tma_pixels_choice(pb, cfg).px != 0; }

// The NCHW TMA kernel (2026-12-05, the three suites in f32 NCHW on an H100, docs/perf.md): wherever it takes
// the problem (2.2-4.9x the window and general kernels on all 26 layers). On whole planes at stride 1 in
// blocks of 64 threads and 4 stages (more, smaller tiles: 1.04-1.11x 128/s3 at 3x3, 1.01-1.06x at 5x5 and
// 7x7); on whole planes at stride 2 and outputs of 16 columns or fewer in blocks of 128 and 3 stages (3-12%
// ahead of 256/s2 there; 64/s4 0.96-1.01x); elsewhere 256/s2 (at 56 and 112 columns 128/s3 lost up to 25%,
// 64/s4 up to 55%).
TmaChoice tma_nchw_choice(const Conv2dProblem& pb, const ConvConfig& cfg) {
  const TmaChoice planes{64, 4}, small{128, 3};
  const bool plane = pb.w % 4 != 0;
  if (plane && pb.stride_h == 1 && tma_nchw_take(pb, cfg, planes)) return planes;
  return (plane || pb.q() <= 16) && tma_nchw_take(pb, cfg, small) ? small : kTmaNchwChoices[0];
}

bool tma_heuristic_takes(const Conv2dProblem& pb, const ConvConfig& cfg) {
  if (!tma_take(pb, cfg, TmaChoice{})) return false;
  if (tma_pixels_take(pb, cfg)) return true;
  const bool f32 = cfg.dtype == DType::f32;
  const int64_t Q = pb.q();
  if (pb.r == 3) return pb.stride_h == 1 ? (!f32 || Q <= 28) : Q <= 14;
  if (pb.r == 5) return true;
  return Q >= 28;
}

// (Where tma_heuristic_takes said yes: the default choice takes the problem; another only where it does too.)
TmaChoice tma_heuristic_choice(const Conv2dProblem& pb, const ConvConfig& cfg) {
  const bool b16 = elem_bytes(cfg.dtype) == 2;
  auto if_taken = [&](TmaChoice c) { return tma_take(pb, cfg, c) ? c : TmaChoice{}; };
  if (const TmaChoice px = tma_pixels_choice(pb, cfg); px.px) return px;
  if (b16 && pb.r == 5 && pb.q() <= 7) return if_taken({128, 3, 0});
  if (b16 && pb.r == 3 && pb.c >= 128) return if_taken({256, 2, 2});
  return {};
}

DwKernel heuristic_kernel(const Conv2dProblem& pb, const ConvConfig& cfg) {
  if (tma_nchw_take(pb, cfg, kTmaNchwChoices[0])) {
    DwKernel k;
    k.kind = DwKernel::tma_nchw;
    k.tma_choice = tma_nchw_choice(pb, cfg);
    return k;
  }
  if (tma_heuristic_takes(pb, cfg)) {
    DwKernel k;
    k.kind = DwKernel::tma;
    k.tma_choice = tma_heuristic_choice(pb, cfg);
    return k;
  }
  const bool window = window_takes(pb, cfg), cols = cols_take(pb, cfg);
  if (cols && cfg.dtype == DType::f32 && pb.stride_h == 2) return {DwKernel::cols, {}};
  if (pb.stride_w == 2 || pb.q() >= 28 || !window) {
    const RowsChoice pick{pb.stride_w == 2 ? 128 : 256, 1};
    if (rows_take(pb, cfg, pick)) return {DwKernel::rows, pick};
    for (RowsChoice c : kRowsChoices)
      if (rows_take(pb, cfg, c)) return {DwKernel::rows, c};
  }
  if (window) return {DwKernel::window, {}};
  if (cols) return {DwKernel::cols, {}};
  if (mma_take(pb, cfg, MmaChoice{})) return {DwKernel::mma, {}, MmaChoice{}};
  return {DwKernel::general, {}};
}

// The variants that take the problem (the pointers' alignment is checked at run time: a misaligned one
// takes the scalar general kernel), the heuristic's first.
std::vector<std::string> variants_of(const Conv2dProblem& pb, const ConvConfig& cfg) {
  const DwKernel first = heuristic_kernel(pb, cfg);
  std::vector<std::string> v{name_of(first)};
  for (RowsChoice c : kRowsChoices)
    if (rows_take(pb, cfg, c) && (first.kind != DwKernel::rows || first.rows_choice.threads != c.threads ||
                                  first.rows_choice.depth != c.depth))
      v.push_back(rows_name(c));
  for (MmaChoice c : kMmaChoices)
    if (mma_take(pb, cfg, c) && (first.kind != DwKernel::mma || first.mma_choice.pixels != c.pixels ||
                                 first.mma_choice.steps != c.steps))
      v.push_back(mma_name(c));
  for (TmaChoice c : kTmaChoices)
    if (tma_take(pb, cfg, c) && (first.kind != DwKernel::tma || first.tma_choice.threads != c.threads ||
                                 first.tma_choice.stages != c.stages || first.tma_choice.cl != c.cl ||
                                 first.tma_choice.px != c.px))
      v.push_back(tma_name(c));
  for (TmaChoice c : kTmaNchwChoices)
    if (tma_nchw_take(pb, cfg, c) && (first.kind != DwKernel::tma_nchw || first.tma_choice.threads != c.threads ||
                                      first.tma_choice.stages != c.stages))
      v.push_back(tma_nchw_name(c));
  if (cols_take(pb, cfg) && first.kind != DwKernel::cols) v.push_back(kCols);
  if (window_takes(pb, cfg) && first.kind != DwKernel::window) v.push_back(kWindow);
  if (first.kind != DwKernel::general) v.push_back(kGeneral);
  return v;
}

template <typename KernelT>
void set_smem_attr(KernelT kernel, int64_t bytes) {
  if (bytes > 48 * 1024) opt_in_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemBudget);
}

// The kernel a call runs: the named variant (it must take the problem) or the heuristic's.
DwKernel kernel_for(const ConvCall& call) {
  const Conv2dProblem& pb = call.problem;
  const ConvConfig& cfg = call.config;
  if (call.variant.empty()) return heuristic_kernel(pb, cfg);
  DwKernel k;
  if (call.variant == kGeneral) return k;
  if (call.variant == kWindow && window_takes(pb, cfg)) return {DwKernel::window, {}};
  if (parse_rows_variant(call.variant, k.rows_choice) && rows_take(pb, cfg, k.rows_choice)) {
    k.kind = DwKernel::rows;
    return k;
  }
  if (call.variant == kCols && cols_take(pb, cfg)) return {DwKernel::cols, {}};
  if (parse_tma_variant(call.variant, k.tma_choice) && tma_take(pb, cfg, k.tma_choice)) {
    k.kind = DwKernel::tma;
    return k;
  }
  if (parse_tma_nchw_variant(call.variant, k.tma_choice) && tma_nchw_take(pb, cfg, k.tma_choice)) {
    k.kind = DwKernel::tma_nchw;
    return k;
  }
  if (parse_mma_variant(call.variant, k.mma_choice) && mma_take(pb, cfg, k.mma_choice)) {
    k.kind = DwKernel::mma;
    return k;
  }
  std::string takes;
  for (const std::string& v : variants_of(pb, cfg)) takes += (takes.empty() ? "" : ", ") + v;
  throw Error(StatusCode::unsupported, "cuda_depthwise: variant '" + call.variant +
                                           "' does not take this problem (it takes: " + takes + ")");
}

template <typename T>
void launch_rows(const ConvCall& call, const ConvDims& d, const DeviceEpilogue<T>& epi, cudaStream_t st, RowsChoice choice) {
  const Conv2dProblem& pb = call.problem;
  const DwRows t = plan_rows(pb, int64_t(sizeof(T)), choice);
  const dim3 grid(unsigned(int64_t(pb.n) * t.chunks_p * t.tiles_q), unsigned((pb.k + t.lanes * 4 - 1) / (t.lanes * 4)));
  const bool s2 = pb.stride_w == 2;
  auto kernel = pb.s == 3 ? (s2 ? depthwise_nhwc_rows_kernel<T, 3, 2> : depthwise_nhwc_rows_kernel<T, 3, 1>)
                : pb.s == 5 ? (s2 ? depthwise_nhwc_rows_kernel<T, 5, 2> : depthwise_nhwc_rows_kernel<T, 5, 1>)
                            : (s2 ? depthwise_nhwc_rows_kernel<T, 7, 2> : depthwise_nhwc_rows_kernel<T, 7, 1>);
  set_smem_attr(kernel, t.smem);
  launch_pdl(kernel, dim3(grid), dim3(t.threads), size_t(t.smem), st, d, t, static_cast<const T*>(call.src.data),
             static_cast<const T*>(call.wei.data), static_cast<T*>(call.dst.data), epi);
  CK_LAUNCH("depthwise_nhwc_rows_kernel");
}

template <typename T>
void launch_cols(const ConvCall& call, const ConvDims& d, const DeviceEpilogue<T>& epi, cudaStream_t st) {
  const Conv2dProblem& pb = call.problem;
  const DwCols t = plan_cols(pb);
  auto kernel = pb.stride_h == 2 ? depthwise_nhwc_cols_kernel<T, 2> : depthwise_nhwc_cols_kernel<T, 1>;
  constexpr int kThreads = 256;
  launch_pdl(kernel, dim3(unsigned((t.total + kThreads - 1) / kThreads)), dim3(kThreads), size_t(0), st, d, t,
             static_cast<const T*>(call.src.data), static_cast<const T*>(call.wei.data),
             static_cast<T*>(call.dst.data), epi);
  CK_LAUNCH("depthwise_nhwc_cols_kernel");
}

template <typename T>
void launch_mma(const ConvCall& call, const ConvDims& d, const DeviceEpilogue<T>& epi, cudaStream_t st, MmaChoice choice) {
  if constexpr (sizeof(T) == 2) {
    const Conv2dProblem& pb = call.problem;
    const DwMma t = plan_mma(pb, choice);
    const dim3 grid(unsigned(int64_t(pb.n) * t.walks * t.tiles_q * t.chunks));
    auto kernel = pb.r == 3   ? depthwise_nhwc_mma_kernel<T, 3>
                  : pb.r == 5 ? depthwise_nhwc_mma_kernel<T, 5>
                              : depthwise_nhwc_mma_kernel<T, 7>;
    set_smem_attr(kernel, t.smem);
    launch_pdl(kernel, dim3(grid), dim3(t.threads), size_t(t.smem), st, d, t, static_cast<const T*>(call.src.data),
               static_cast<const T*>(call.wei.data), static_cast<T*>(call.dst.data), epi);
    CK_LAUNCH("depthwise_nhwc_mma_kernel");
  } else {
    throw Error(StatusCode::internal, "cuda_depthwise: the tensor-core kernel has no fp32 instance");
  }
}

template <typename T, int kK, int kU, int kCl, bool kPx, bool kWide = false>
void launch_tma_k(const ConvCall& call, const ConvDims& d, const DeviceEpilogue<T>& epi, cudaStream_t st, const DwTma& t) {
  constexpr TmaShape sh = tma_shape(kK, kU, kWide);
  auto kernel = depthwise_nhwc_tma_kernel<T, kK, kU, sh.pw, sh.qt, kCl, kPx ? 0 : 32 * kCl * int(sizeof(T))>;
  const void* kp = reinterpret_cast<const void*>(kernel);
  opt_in_dynamic_smem(kp, t.smem);
  const int64_t grid = std::min<int64_t>(t.items, int64_t(blocks_per_sm(kp, t.threads, t.smem)) * sm_count_of_current_device());
  // The input as the 4-D tensor (C, W, H, N), innermost first; boxes of one tile's chunk_ch channels x
  // iw columns x ih rows of one image; coordinates outside the tensor (the padding) arrive as zeros.
  const Conv2dProblem& pb = call.problem;
  const int64_t es = sizeof(T);
  const cuuint64_t dims[4] = {cuuint64_t(pb.c), cuuint64_t(pb.w), cuuint64_t(pb.h), cuuint64_t(pb.n)};
  const cuuint64_t strides[3] = {cuuint64_t(pb.c * es), cuuint64_t(pb.w * pb.c * es), cuuint64_t(pb.h * pb.w * pb.c * es)};
  const cuuint32_t box[4] = {cuuint32_t(t.chunk_ch), cuuint32_t(t.iw), cuuint32_t(t.ih), 1};
  // The kernel's mbarrier waits for exactly this many bytes a tile: any other count never completes (a hang).
  if (int64_t(box[0]) * box[1] * box[2] * es != t.box_bytes)
    throw Error(StatusCode::internal, "cuda_depthwise: the TMA box of " + pb.to_string() + " is not the " +
                                          std::to_string(t.box_bytes) + " bytes its barrier waits for.");
  const cuuint32_t estrides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type = std::is_same_v<T, float>    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  CUtensorMap map;
  const CUresult r = tensor_map_encoder()(&map, type, 4, const_cast<void*>(call.src.data), dims, strides, box, estrides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(StatusCode::cuda_error, "cuda_depthwise: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) +
                                            ") for the input of " + pb.to_string() + ".");
  launch_pdl(kernel, dim3(unsigned(grid)), dim3(t.threads), size_t(t.smem), st, map, d, t,
             static_cast<const T*>(call.wei.data), static_cast<T*>(call.dst.data), epi);
  CK_LAUNCH("depthwise_nhwc_tma_kernel");
}

template <typename T, int kCl, bool kPx>
void launch_tma_k2(const ConvCall& call, const ConvDims& d, const DeviceEpilogue<T>& epi, cudaStream_t st, const DwTma& t) {
  const Conv2dProblem& pb = call.problem;
  const bool s2 = pb.stride_h == 2;
  if (pb.r == 3)
    return s2 ? launch_tma_k<T, 3, 2, kCl, kPx>(call, d, epi, st, t) : launch_tma_k<T, 3, 1, kCl, kPx>(call, d, epi, st, t);
  if (pb.r == 5)
    return s2 ? launch_tma_k<T, 5, 2, kCl, kPx>(call, d, epi, st, t) : launch_tma_k<T, 5, 1, kCl, kPx>(call, d, epi, st, t);
  return s2 ? launch_tma_k<T, 7, 2, kCl, kPx>(call, d, epi, st, t) : launch_tma_k<T, 7, 1, kCl, kPx>(call, d, epi, st, t);
}

template <typename T>
void launch_tma(const ConvCall& call, const ConvDims& d, const DeviceEpilogue<T>& epi, cudaStream_t st, TmaChoice choice) {
  const Conv2dProblem& pb = call.problem;
  const DwTma t = plan_tma(pb, int64_t(sizeof(T)), choice);
  // Whole pixels: two channels a lane for 16-bit types (plan_tma), one fp32.
  if (choice.cl == 1) {  // (7x7 stride 1 whole pixels only: tma_take)
    if (pb.r != 7 || pb.stride_h != 1 || !t.px || t.cl != 1)
      throw Error(StatusCode::internal, "cuda_depthwise: the /px/c1 variants take 7x7 stride 1 only");
    return launch_tma_k<T, 7, 1, 1, true, true>(call, d, epi, st, t);
  }
  if constexpr (sizeof(T) == 2) {
    if (t.px) return launch_tma_k2<T, 2, true>(call, d, epi, st, t);
    if (t.cl == 2) return launch_tma_k2<T, 2, false>(call, d, epi, st, t);
  } else {
    if (t.px) return launch_tma_k2<T, 1, true>(call, d, epi, st, t);
  }
  return launch_tma_k2<T, 1, false>(call, d, epi, st, t);
}

template <int kK, int kU, bool kPlane>
void launch_tma_nchw_k(const ConvCall& call, const ConvDims& d, const DeviceEpilogue<float>& epi, cudaStream_t st,
                       const DwTmaNchw& t) {
  auto kernel = depthwise_nchw_tma_kernel<kK, kU, tma_nchw_rows(kK, kU), kPlane>;
  const void* kp = reinterpret_cast<const void*>(kernel);
  opt_in_dynamic_smem(kp, t.smem);
  const int64_t grid = std::min<int64_t>(t.items, int64_t(blocks_per_sm(kp, t.threads, t.smem)) * sm_count_of_current_device());
  // Tiles: the input as the 4-D tensor (W, H, C, N), innermost first, boxes of iw columns x ih rows x cb
  // channels of one image (the padding arrives as zeros). Planes: (g * H * W, C / g, N, 1), boxes of cb / g
  // runs of g whole planes.
  const Conv2dProblem& pb = call.problem;
  const int64_t es = 4, hw = pb.h * pb.w;
  cuuint64_t dims[4], strides[3];
  cuuint32_t box[4];
  if (kPlane) {
    const int64_t g = t.g;
    dims[0] = cuuint64_t(g * hw), dims[1] = cuuint64_t(pb.c / g), dims[2] = cuuint64_t(pb.n), dims[3] = 1;
    strides[0] = cuuint64_t(g * hw * es), strides[1] = cuuint64_t(pb.c * hw * es), strides[2] = cuuint64_t(pb.n * pb.c * hw * es);
    box[0] = cuuint32_t(g * hw), box[1] = cuuint32_t(t.cb / g), box[2] = 1, box[3] = 1;
  } else {
    dims[0] = cuuint64_t(pb.w), dims[1] = cuuint64_t(pb.h), dims[2] = cuuint64_t(pb.c), dims[3] = cuuint64_t(pb.n);
    strides[0] = cuuint64_t(pb.w * es), strides[1] = cuuint64_t(hw * es), strides[2] = cuuint64_t(pb.c * hw * es);
    box[0] = cuuint32_t(t.iw), box[1] = cuuint32_t(t.ih), box[2] = cuuint32_t(t.cb), box[3] = 1;
  }
  // Every box's first column must sit on 16 bytes (else the copy is an illegal instruction): the tiles' column
  // origins tq * tile_q * U - pad_w - kOff are multiples of 4 (tma_nchw_take's padding rule).
  if (!kPlane && ((t.tile_q * int64_t(pb.stride_w)) % 4 != 0 || (pb.pad_w + tma_nchw_off(kK)) % 4 != 0))
    throw Error(StatusCode::internal, "cuda_depthwise: the NCHW TMA boxes of " + pb.to_string() +
                                          " would start off 16 bytes along W.");
  if (!kPlane && kU == 1 && t.out_bytes != 0)
    throw Error(StatusCode::internal, "cuda_depthwise: the NCHW TMA kernel's stride-1 tiles have no staged outputs (" +
                                          pb.to_string() + ").");
  // The kernel's mbarrier waits for exactly this many bytes a tile: any other count never completes (a hang).
  if (int64_t(box[0]) * box[1] * box[2] * box[3] * es != t.box_bytes)
    throw Error(StatusCode::internal, "cuda_depthwise: the NCHW TMA box of " + pb.to_string() + " is not the " +
                                          std::to_string(t.box_bytes) + " bytes its barrier waits for.");
  const cuuint32_t estrides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, const_cast<void*>(call.src.data), dims,
                                          strides, box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(StatusCode::cuda_error, "cuda_depthwise: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) +
                                            ") for the NCHW input of " + pb.to_string() + ".");
  launch_pdl(kernel, dim3(unsigned(grid)), dim3(t.threads), size_t(t.smem), st, map, d, t,
             static_cast<const float*>(call.wei.data), static_cast<float*>(call.dst.data), epi);
  CK_LAUNCH("depthwise_nchw_tma_kernel");
}

template <typename T>
void launch_tma_nchw(const ConvCall& call, const ConvDims& d, const DeviceEpilogue<T>& epi, cudaStream_t st, TmaChoice choice) {
  if constexpr (std::is_same_v<T, float>) {
    const Conv2dProblem& pb = call.problem;
    const DwTmaNchw t = plan_tma_nchw(pb, choice);
    const bool s2 = pb.stride_h == 2;
    if (t.plane) {
      if (pb.r == 3) return s2 ? launch_tma_nchw_k<3, 2, true>(call, d, epi, st, t) : launch_tma_nchw_k<3, 1, true>(call, d, epi, st, t);
      if (pb.r == 5) return s2 ? launch_tma_nchw_k<5, 2, true>(call, d, epi, st, t) : launch_tma_nchw_k<5, 1, true>(call, d, epi, st, t);
      return s2 ? launch_tma_nchw_k<7, 2, true>(call, d, epi, st, t) : launch_tma_nchw_k<7, 1, true>(call, d, epi, st, t);
    }
    if (pb.r == 3) return s2 ? launch_tma_nchw_k<3, 2, false>(call, d, epi, st, t) : launch_tma_nchw_k<3, 1, false>(call, d, epi, st, t);
    if (pb.r == 5) return s2 ? launch_tma_nchw_k<5, 2, false>(call, d, epi, st, t) : launch_tma_nchw_k<5, 1, false>(call, d, epi, st, t);
    return s2 ? launch_tma_nchw_k<7, 2, false>(call, d, epi, st, t) : launch_tma_nchw_k<7, 1, false>(call, d, epi, st, t);
  } else {
    throw Error(StatusCode::internal, "cuda_depthwise: the NCHW TMA kernel has fp32 instances only");
  }
}

bool tma_device_ok() {
  if (!cuda_present() || cc_major_of_current_device() < 9) return false;
  static const bool built = [] {
    cudaFuncAttributes a{};
    if (cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(depthwise_nhwc_tma_kernel<float, 3, 1, 4, 4, 1, 128>)) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return a.ptxVersion >= 90 && a.binaryVersion >= 90;
  }();
  return built;
}

template <typename T>
void launch(const ConvCall& call) {
  const Conv2dProblem& pb = call.problem;
  const ConvDims d = make_dims(pb);
  const auto* src = static_cast<const T*>(call.src.data);
  const auto* wei = static_cast<const T*>(call.wei.data);
  auto* dst = static_cast<T*>(call.dst.data);
  const DeviceEpilogue<T> epi = DeviceEpilogue<T>::from(call.epilogue);
  cudaStream_t st = as_stream(call.stream);
  DwKernel choice = kernel_for(call);
  if (pb.output_elems() == 0) return;
  if (call.config.layout == Layout::nhwc) {
    int vec = nhwc_vec(pb, call.config.dtype);
    const auto& e = call.epilogue;
    // A misaligned pointer takes the scalar instance of the general kernel (the vector kernels read and
    // write 16-byte pieces).
    // (The column kernel reads the taps as vectors too.)
    if (!aligned16(src) || !aligned16(dst) || (e.bias && !aligned16(e.bias)) || (e.residual && !aligned16(e.residual)) ||
        (choice.kind == DwKernel::cols && !aligned16(call.wei.data))) {
      vec = 1;
      choice.kind = DwKernel::general;
    }
    if (choice.kind == DwKernel::rows) return launch_rows<T>(call, d, epi, st, choice.rows_choice);
    if (choice.kind == DwKernel::cols) return launch_cols<T>(call, d, epi, st);
    if (choice.kind == DwKernel::mma) return launch_mma<T>(call, d, epi, st, choice.mma_choice);
    if (choice.kind == DwKernel::tma) return launch_tma<T>(call, d, epi, st, choice.tma_choice);
    const DwPlan t = plan_nhwc(pb, vec);
    const dim3 grid(unsigned(int64_t(pb.n) * t.tiles_p * t.tiles_q), unsigned((pb.k + t.lanes * vec - 1) / (t.lanes * vec)));
    constexpr int kV = int(16 / sizeof(T));
    const int wnd = choice.kind == DwKernel::window ? window_size(pb, Layout::nhwc, vec) : 0;
    const int lane_mult = sizeof(T) == 2 ? 2 : 1;
    const DwPlan tw = wnd > 0 ? plan_nhwc(pb, 4, 16, lane_mult) : t;
    if (wnd > 0 && tw.lanes % lane_mult == 0) {
      // The tile in T instead of fp32: smaller than plan_nhwc's budget allowed for.
      const int kbw = tw.lanes * 4;
      const int64_t smem = (int64_t(pb.r) * pb.s * kbw * 4 + int64_t(tw.ih) * tw.iw * tw.cb * int64_t(sizeof(T)) + 15) / 16 * 16;
      const dim3 gw(unsigned(int64_t(pb.n) * tw.tiles_p * tw.tiles_q), unsigned((pb.k + kbw - 1) / kbw));
      auto kernel = wnd == 3 ? depthwise_nhwc_window_kernel<T, 4, 3>
                    : wnd == 5 ? depthwise_nhwc_window_kernel<T, 4, 5> : depthwise_nhwc_window_kernel<T, 4, 7>;
      set_smem_attr(kernel, smem);
      launch_pdl(kernel, dim3(gw), dim3(tw.threads), size_t(smem), st, d, tw, src, wei, dst, epi);
      CK_LAUNCH("depthwise_nhwc_window_kernel");
      return;
    }
    if (vec > 1) {
      set_smem_attr(depthwise_nhwc_kernel<T, kV>, t.smem);
      launch_pdl(depthwise_nhwc_kernel<T, kV>, dim3(grid), dim3(t.threads), size_t(t.smem), st, d, t, src, wei, dst,
                 epi);
    } else {
      set_smem_attr(depthwise_nhwc_kernel<T, 1>, t.smem);
      launch_pdl(depthwise_nhwc_kernel<T, 1>, dim3(grid), dim3(t.threads), size_t(t.smem), st, d, t, src, wei, dst,
                 epi);
    }
    CK_LAUNCH("depthwise_nhwc_kernel");
  } else {
    if (choice.kind == DwKernel::tma_nchw) {
      // (the copy engine reads from a 16-byte aligned address; the stores and residual reads are 16 bytes)
      const auto& e = call.epilogue;
      if (aligned16(src) && aligned16(dst) && (!e.residual || aligned16(e.residual)))
        return launch_tma_nchw<T>(call, d, epi, st, choice.tma_choice);
      choice.kind = DwKernel::general;
    }
    const DwPlan t = plan_nchw(pb);
    const int64_t blocks = (int64_t(pb.n) * pb.k + t.planes - 1) / t.planes * t.tiles_p * t.tiles_q;
    const int wnd = choice.kind == DwKernel::window ? window_size(pb, Layout::nchw, 1) : 0;
    if (wnd > 0) {
      auto kernel = wnd == 3 ? depthwise_nchw_window_kernel<T, 3>
                    : wnd == 5 ? depthwise_nchw_window_kernel<T, 5> : depthwise_nchw_window_kernel<T, 7>;
      set_smem_attr(kernel, t.smem);
      launch_pdl(kernel, dim3(unsigned(blocks)), dim3(t.threads), size_t(t.smem), st, d, t, src, wei, dst, epi);
      CK_LAUNCH("depthwise_nchw_window_kernel");
      return;
    }
    set_smem_attr(depthwise_nchw_kernel<T>, t.smem);
    launch_pdl(depthwise_nchw_kernel<T>, dim3(unsigned(blocks)), dim3(t.threads), size_t(t.smem), st, d, t, src, wei,
               dst, epi);
    CK_LAUNCH("depthwise_nchw_kernel");
  }
}

class CudaDepthwise final : public CudaAlgorithm {
 public:
  std::string name() const override { return "cuda_depthwise"; }
  std::string description() const override {
    return "depthwise conv (groups = C, any multiplier): each input staged once in shared memory (tiles "
           "copied by the TMA engine on Hopper, a row ring walked down the image, a register window, a general "
           "tile), 16-byte channel vectors in NHWC, f32/f16/bf16, fp32 accumulation";
  }
  Support can_implement(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    if (pb.groups != pb.c || pb.c_per_group() != 1)
      return Support::no("it computes depthwise convolutions only (groups = C, one input channel per group).");
    if (cfg.dtype == DType::f32 && cfg.math == MathMode::tf32)
      return Support::no("it computes in strict fp32 (a depthwise layer has too few FMAs per byte for tf32 to "
                         "matter); ask for strict f32.");
    if (Support s = dims_fit_int(pb); !s) return s;
    if (int64_t(pb.h) * pb.w > INT_MAX / 2 || int64_t(pb.p()) * pb.q() > INT_MAX / 2)
      return Support::no("an image plane passes 2^30 pixels (32-bit shared-memory indexing).");
    const DwPlan t = cfg.layout == Layout::nhwc ? plan_nhwc(pb, nhwc_vec(pb, cfg.dtype))
                                                 : plan_nchw(pb);
    if (t.smem > kSmemBudget)
      return Support::no("the dilated filter extent is too large: even the smallest tile with its halo needs " +
                         std::to_string(t.smem) + " bytes of shared memory (" + std::to_string(kSmemBudget) +
                         " available).");
    if (cfg.layout == Layout::nhwc && (pb.k + t.lanes * t.vec - 1) / (t.lanes * t.vec) > 65535)
      return Support::no("more than 65535 channel blocks (grid.y).");
    return Support::yes();
  }
  std::vector<std::string> variants(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    return variants_of(pb, cfg);
  }
  std::string detail(const Conv2dProblem& pb, const ConvConfig& cfg) const override {
    return "kernel " + variants_of(pb, cfg).front();
  }
  void run(const ConvCall& call) const override {
    check_residual_overlap(call.epilogue.residual, call.dst.data,
                           size_t(call.problem.output_elems()) * size_t(elem_bytes(call.config.dtype)));
    switch (call.config.dtype) {
      case DType::f32: launch<float>(call); break;
      case DType::f16: launch<__half>(call); break;
      case DType::bf16: launch<__nv_bfloat16>(call); break;
    }
  }
};

}  // namespace

const Algorithm* make_cuda_depthwise() {
  static CudaDepthwise algo;
  return &algo;
}

}  // namespace convkit::detail
