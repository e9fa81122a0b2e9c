// cuda_depthwise's rows kernel: NHWC depthwise (M = 1) that walks down the image with its input rows in a
// shared-memory ring, the next rows' cp.async in flight while this step's FMAs run.
//
// Adds over the register-window kernel (depthwise.cu): that one stages a whole tile with its halo, waits,
// computes and exits, so its loads and its FMAs never overlap inside a block and every tile re-reads
// (R-1) halo rows; this one keeps a block on a column strip for several steps of `rp` output rows. The
// ring holds the current step's window of input rows plus the next step's new rows, so each input row is
// brought in once per block, and the next `depth` steps' rows arrive while the current ones are used. Stride 1 and 2
// along W (kSW), any stride and dilation along H, S of 3, 5 or 7 (kS), any R.
//
// Work mapping: a block = one image x a column strip of tq outputs x kb = 4 * lanes channels x `steps`
// steps of rp output rows; thread = lane (4 channels) + lanes * (column strip qs + qstrips * row rr). Each
// thread owns kQt consecutive outputs of one row per step, so along a filter row each staged input is read
// once from shared memory and feeds up to kQt FMAs from registers (the row's kS taps in registers).
// Shared memory: the taps [R*kS][kb] in fp32, then the ring [nslot][iw][kb] in the input type (nslot = one
// step's window + depth steps' new rows), filled in 16-byte cp.async pieces (zero-filled outside the image).
#pragma once

#include "cuda/common/launch.cuh"

namespace convkit::detail {
namespace {

// The tile of one launch of the rows kernel, chosen on the host (plan_rows in depthwise.cu).
struct DwRows {
  int lanes = 1, tq = 4, rp = 1;  // channel vectors of 4; output columns and rows per step
  int steps = 1;                  // steps per block: the block covers rp * steps output rows
  int depth = 1;                  // steps whose new rows are in flight ahead of the one computed (1..3)
  int iw = 1, ih0 = 1, nslot = 1; // staged columns; input rows of one step's window; ring rows
  int tiles_q = 1, chunks_p = 1;
  int64_t smem = 0;
  int threads = 0;
};

// Waits until at most `pending` of this thread's cp.async groups are still in flight (0..3).
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    default: cp_async_wait<3>(); break;
  }
}

template <typename T, int kS, int kSW>
__global__ void __launch_bounds__(256) depthwise_nhwc_rows_kernel(ConvDims d, DwRows t, const T* __restrict__ src,
                                                                 const T* __restrict__ wei, T* dst, DeviceEpilogue<T> epi) {
  pdl_enter();  // (launch.cuh: before any global access)
  constexpr int kQtR = 4;                    // outputs per thread per step
  constexpr int kPiece = int(16 / sizeof(T)); // elements of one 16-byte cp.async piece
  extern __shared__ float4 smem4[];
  const int kb = t.lanes * 4, RS = d.r * kS;
  float* s_w = reinterpret_cast<float*>(smem4);  // [R*kS][kb] fp32
  T* s_in = reinterpret_cast<T*>(s_w + RS * kb); // [nslot][iw][kb]
  int64_t b = blockIdx.x;
  const int tq_i = int(b % t.tiles_q);
  b /= t.tiles_q;
  const int ch_i = int(b % t.chunks_p);
  const int64_t n = b / t.chunks_p;
  // One image's input and output are under 2^31 elements (rows_fits): 32-bit offsets from here on.
  const T* src_n = src + n * d.h * d.w * d.c;
  T* dst_n = dst + n * d.p * d.q * d.k;
  const T* res_n = epi.residual ? epi.residual + n * d.p * d.q * d.k : nullptr;
  const int q0 = tq_i * t.tq, k0 = blockIdx.y * kb;
  const int p_begin = ch_i * t.rp * t.steps;
  const int h_begin = p_begin * d.stride_h - d.pad_h, w0 = q0 * kSW - d.pad_w;
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int rows_per_step = t.rp * d.stride_h;

  // Issues the cp.async pieces of local input rows [lr0, lr1) into their ring slots, then commits them as
  // one group (an empty group when the range is empty: the wait counts below stay uniform).
  // (The block may have a few more threads than lanes * strips * rp, rounded to whole warps: those past
  // the last multiple of cv neither stage nor compute.)
  const int cv = kb / kPiece, v = tid % cv, pstep = nthreads / cv, c = k0 + v * kPiece;
  const bool loader = tid < pstep * cv;
  // The thread's pieces are pixels u0, u0 + pstep, ... of the rows issued: (y, x) advanced by (dy, dx)
  // with a carry, no division per piece.
  const int u0 = tid / cv, y0 = u0 / t.iw, x0 = u0 - y0 * t.iw, dy = pstep / t.iw, dx = pstep - dy * t.iw;
  auto issue_rows = [&](int lr0, int lr1) {
    const int nrows = loader ? lr1 - lr0 : 0, slot0 = lr0 % t.nslot;
    for (int y = y0, x = x0; y < nrows;) {
      const int h = h_begin + lr0 + y, w = w0 + x;
      const int slot = slot0 + y < t.nslot ? slot0 + y : slot0 + y - t.nslot;  // y < nslot
      const bool ok = c < d.c && h >= 0 && h < d.h && w >= 0 && w < d.w;
      cp_async16_zfill(s_in + (slot * t.iw + x) * kb + v * kPiece, ok ? src_n + (h * d.w + w) * d.c + c : src, ok);
      x += dx, y += dy;
      if (x >= t.iw) x -= t.iw, ++y;
    }
    cp_async_commit();
  };

  const int p_end = min(d.p, p_begin + t.rp * t.steps);
  const int nsteps = (p_end - p_begin + t.rp - 1) / t.rp;
  // Group 0: the first step's window; group i (1..depth): step i's new rows, empty past the last step.
  issue_rows(0, t.ih0);
  for (int i = 1; i <= t.depth; ++i) {
    const int lr0 = t.ih0 + (i - 1) * rows_per_step;
    issue_rows(lr0, i < nsteps ? lr0 + rows_per_step : lr0);
  }
  for (int i = tid; i < RS * kb; i += nthreads) {
    const int kk = i % kb, rs = i / kb, k = k0 + kk;
    s_w[i] = k < d.k ? elem_to_float<T>(wei[int64_t(k) * RS + rs]) : 0.0f;
  }

  const int lane = tid % t.lanes, strip = tid / t.lanes, qstrips = t.tq / kQtR;
  const int rr = strip / qstrips, qs = (strip % qstrips) * kQtR;
  const int kl = lane * 4, k = k0 + kl;
  const bool active = rr < t.rp;  // threads past the last row strip only stage
  Vec<T, 4> bv;
  if (epi.bias && active && k < d.k) bv = *reinterpret_cast<const Vec<T, 4>*>(epi.bias + k);

  for (int step = 0; step < nsteps; ++step) {
    cp_async_wait_pending(t.depth);  // this step's rows have landed (the next `depth` steps' may not)
    __syncthreads();
    float acc[kQtR][4];
#pragma unroll
    for (int i = 0; i < kQtR; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;
    // The ring slot of the thread's first filter row (local row (step * rp + rr) * stride_h), then one
    // dilation further per filter row (dil_h < nslot whenever R > 1).
    int slot = ((step * t.rp + rr) * d.stride_h) % t.nslot;
    if (active) {
      for (int r = 0; r < d.r; ++r, slot = slot + d.dil_h < t.nslot ? slot + d.dil_h : slot + d.dil_h - t.nslot) {
        float wv[kS][4];
#pragma unroll
        for (int s = 0; s < kS; ++s) {
          const float4 w4 = *reinterpret_cast<const float4*>(s_w + (r * kS + s) * kb + kl);
          wv[s][0] = w4.x, wv[s][1] = w4.y, wv[s][2] = w4.z, wv[s][3] = w4.w;
        }
        const T* ip = s_in + (slot * t.iw + qs * kSW) * kb + kl;
#pragma unroll
        for (int j = 0; j < (kQtR - 1) * kSW + kS; ++j) {
          float x[4];
          load_vec_f32<T, 4>(ip + j * kb, x);
#pragma unroll
          for (int i = 0; i < kQtR; ++i) {
            const int s = j - i * kSW;
            if (s >= 0 && s < kS) {
#pragma unroll
              for (int e = 0; e < 4; ++e) acc[i][e] = fmaf(x[e], wv[s][e], acc[i][e]);
            }
          }
        }
      }
    }
    __syncthreads();  // every thread is done with the oldest rows: their slots take step + depth + 1's
    {
      const int lr0 = t.ih0 + (step + t.depth) * rows_per_step;
      issue_rows(lr0, step + t.depth + 1 < nsteps ? lr0 + rows_per_step : lr0);
    }
    const int p = p_begin + step * t.rp + rr;
    if (!active || p >= p_end || k >= d.k) continue;
    // The epilogue's arithmetic in apply_epilogue's order, its activation chosen once for all 16 values.
    const int o0 = (p * d.q + q0 + qs) * d.k + k;
    const int nq = min(kQtR, d.q - q0 - qs);
#pragma unroll
    for (int i = 0; i < kQtR; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[i][e] *= epi.alpha;
        if (epi.bias) acc[i][e] += elem_to_float<T>(bv.v[e]);
      }
    if (res_n) {
#pragma unroll
      for (int i = 0; i < kQtR; ++i)
        if (i < nq) {
          const Vec<T, 4> rv = *reinterpret_cast<const Vec<T, 4>*>(res_n + o0 + i * d.k);  // read before the store
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][e] += epi.beta * elem_to_float<T>(rv.v[e]);
        }
    }
    activate_all<kQtR * 4, float>(epi.activation, &acc[0][0]);
#pragma unroll
    for (int i = 0; i < kQtR; ++i)
      if (i < nq) {
        Vec<T, 4> out;
#pragma unroll
        for (int e = 0; e < 4; ++e) out.v[e] = float_to_elem<T>(acc[i][e]);
        *reinterpret_cast<Vec<T, 4>*>(dst_n + o0 + i * d.k) = out;
      }
  }
  cp_async_wait<0>();  // no copy outlives the block's shared memory
}

}  // namespace
}  // namespace convkit::detail
