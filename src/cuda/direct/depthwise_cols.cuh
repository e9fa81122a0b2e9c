// cuda_depthwise's column kernel: NHWC depthwise (M = 1) with no shared memory and no barrier. Each thread
// owns one output column of kVec channels and walks down it, its filter taps in registers.
//
// Adds over the rows kernel (depthwise_rows.cuh): that one stages every input row in a shared-memory ring
// and reads each tap's input back from it, so its time goes to staging loops, shared-memory loads and
// barriers, not FMAs (ncu: issue-bound at 0.70 warps a scheduler a cycle). Here a thread loads the input
// of its own taps straight from global memory: its kK columns of a row are neighbouring pixels, which the
// neighbouring threads of the same warp load too (L1 hits), and each input row serves up to kK of the
// thread's kTP outputs from registers. The taps (kK * kK * kVec, fp32) stay in registers for the whole
// walk. Every input byte comes from DRAM once per block of columns: the rows that two groups of kTP
// outputs share are loaded again by the same thread a moment later, from L1.
//
// Work mapping: thread = (channel vector cv, output column q, strip, image n), cv fastest, so a warp's
// loads and stores are one contiguous run of pixels x channels; a strip is `groups` groups of kTP output
// rows. 3x3 filters, stride kStride (1 or 2) in both directions, dilation 1, any padding; C a multiple of
// kVec = 4; one image's input and output under 2^31 elements (32-bit offsets inside an image).
// nvcc -Xptxas -v (sm_90): 94-128 registers, no spills.
// measured (H200, 2026-12-03, batch 32): f32 NHWC stride 2, mbv2_dw3x3s2_192_28 0.0148 ms (the rows kernel
// 0.0190, cuDNN 0.0132) and mbv2_dw3x3s2_144_56 0.0316 ms (0.0365, 0.0280); bf16 mbv2_dw3x3_144_56 0.0679 ms
// (the rows kernel 0.0383): 25% occupancy, bound by the latency of its L1 loads (ncu: 0.42 warps issued a
// scheduler a cycle, DRAM 12% of peak).
#pragma once

#include "cuda/common/launch.cuh"

namespace convkit::detail {
namespace {

// The walk of one launch, chosen on the host (plan_cols in depthwise.cu).
struct DwCols {
  int cv = 1;          // channel vectors a pixel (C / kVec)
  int groups = 1;      // groups of kTP output rows a thread walks
  int strips = 1;      // strips of groups * kTP rows down a column
  int64_t total = 0;   // threads: N * strips * Q * cv
};

constexpr int kColsK = 3;    // filter size
constexpr int kColsTP = 2;   // output rows a group
constexpr int kColsVec = 4;  // channels a thread

template <typename T, int kStride>
__global__ void __launch_bounds__(256) depthwise_nhwc_cols_kernel(ConvDims d, DwCols t, const T* __restrict__ src,
                                                                 const T* __restrict__ wei, T* dst, DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
  constexpr int kK = kColsK, kTP = kColsTP, kVec = kColsVec;
  constexpr int kRows = (kTP - 1) * kStride + kK;  // input rows of one group of kTP outputs
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= t.total) return;
  const int cvi = int(g % t.cv);
  int64_t rest = g / t.cv;
  const int q = int(rest % d.q);
  rest /= d.q;
  const int strip = int(rest % t.strips);
  const int64_t n = rest / t.strips;
  const int c = cvi * kVec;

  // The taps of channels c .. c + kVec - 1: kVec * kK * kK consecutive elements ([K][R][S]), as vectors.
  float w[kK * kK][kVec];
  {
    const T* wp = wei + int64_t(c) * kK * kK;
#pragma unroll
    for (int i = 0; i < kK * kK; ++i) {
      float x[kVec];
      load_vec_f32<T, kVec>(wp + i * kVec, x);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const int f = i * kVec + e;  // flat index: channel f / (kK*kK), tap f % (kK*kK)
        w[f % (kK * kK)][f / (kK * kK)] = x[e];
      }
    }
  }
  float bv[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) bv[e] = 0.0f;
  if (epi.bias) load_vec_f32<T, kVec>(epi.bias + c, bv);

  const T* src_n = src + n * d.h * d.w * d.c + c;
  T* dst_n = dst + n * d.p * d.q * d.k + c;
  const T* res_n = epi.residual ? epi.residual + n * d.p * d.q * d.k + c : nullptr;
  const int w0 = q * kStride - d.pad_w;
  const int p_begin = strip * t.groups * kTP, p_end = min(d.p, p_begin + t.groups * kTP);
  for (int p = p_begin; p < p_end; p += kTP) {
    float acc[kTP][kVec];
#pragma unroll
    for (int j = 0; j < kTP; ++j)
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[j][e] = 0.0f;
    const int h0 = p * kStride - d.pad_h;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int h = h0 + i;
      const bool h_ok = unsigned(h) < unsigned(d.h);
#pragma unroll
      for (int s = 0; s < kK; ++s) {
        const int wc = w0 + s;
        float x[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) x[e] = 0.0f;
        if (h_ok && unsigned(wc) < unsigned(d.w)) load_vec_f32<T, kVec>(src_n + (h * d.w + wc) * d.c, x);
#pragma unroll
        for (int j = 0; j < kTP; ++j) {
          const int r = i - j * kStride;  // the filter row this input row is for output p + j
          if (r >= 0 && r < kK) {
#pragma unroll
            for (int e = 0; e < kVec; ++e) acc[j][e] = fmaf(x[e], w[r * kK + s][e], acc[j][e]);
          }
        }
      }
    }
    // The epilogue's arithmetic in apply_epilogue's order, the activation chosen once for the group.
#pragma unroll
    for (int j = 0; j < kTP; ++j)
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        acc[j][e] *= epi.alpha;
        if (epi.bias) acc[j][e] += bv[e];
      }
    if (res_n) {
#pragma unroll
      for (int j = 0; j < kTP; ++j)
        if (p + j < p_end) {
          float rv[kVec];
          load_vec_f32<T, kVec>(res_n + ((p + j) * d.q + q) * d.k, rv);  // read before the store
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[j][e] += epi.beta * rv[e];
        }
    }
    activate_all<kTP * kVec, float>(epi.activation, &acc[0][0]);
#pragma unroll
    for (int j = 0; j < kTP; ++j)
      if (p + j < p_end) {
        Vec<T, kVec> out;
#pragma unroll
        for (int e = 0; e < kVec; ++e) out.v[e] = float_to_elem<T>(acc[j][e]);
        *reinterpret_cast<Vec<T, kVec>*>(dst_n + ((p + j) * d.q + q) * d.k) = out;
      }
  }
}

}  // namespace
}  // namespace convkit::detail
