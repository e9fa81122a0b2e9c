// cpu_depthwise: depthwise convolution (groups = C = K: each channel filtered by its own R x S filter) on the
// CPU, vectorised along the axis that is contiguous in memory.
//
// What it adds over cpu_direct and cpu_im2col_gemm, which treat a depthwise layer as C convolutions of one
// channel each (a 1-wide GEMM per group, or a direct kernel whose register tile spans 32 output channels
// of which one is real): nothing but the R*S multiply-adds per output, laid out for the vector units.
//   NHWC: one output row (all Q pixels, all C channels) at a time, in blocks of up to 8 pixels x 16 channels
//         accumulated in registers over the taps that lie inside the image, the edges included. At dilation
//         1, stride 1 or 2 and a 3-, 5- or 7-wide filter (row_taps) each input column a block's filter row
//         reaches is read once and multiplied by the row's taps, held in registers, into every pixel it feeds
//         (a 3x3 row of a multiple of 8 or 7 pixels in whole blocks of 8 or 7 from its start, so none is short);
//         otherwise each pixel's range of taps along W is computed once a block, the taps inside for the whole
//         block run unchecked. The channels past the last 16 one tap at a time over the row (per tap the
//         pixels whose input column lies inside the image form one range). The filters are transposed once
//         per call to [r][s][c].
//   NCHW: each (image, channel) plane copied into a zero-padded buffer, its columns split by the stride's
//         phase, then blocks of 4 output rows x 16 columns accumulated in registers over all the taps; the
//         row pass (one output row at a time, per tap the outputs whose input column lies inside the image
//         as one range) for a filter with a non-finite value.
// Any R, S, stride, dilation and padding; f32; fp32 sums in tap order (bit-equal to cpu_ref on small
// integers). The epilogue (alpha, bias, residual, activation) is applied as each output is stored; the
// residual may alias the output (each element is read, then written, by the thread that computes it).
// Parallelism: OpenMP over (image, output row) in NHWC, or over blocks of 16 channels where those divide more
// evenly among the threads (few rows of many channels: each thread then transposes and reads only its own
// filters); over (image, channel) planes in NCHW.
// Workspace: the transposed filters (R*S*C floats) in NHWC; none in NCHW (the padded plane is per thread).
// f16/bf16: the same float32 computation (fp32 sums, as the GPU kernels), the output rounded once. NHWC reads
// x, the bias and the residual in their 16-bit dtype, 16 channels widened as they are loaded, and rounds each
// output row as it stores it (bit-equal to the float32 run on the widened values); NCHW goes through widened
// copies in the workspace, a pass of images at a time (float32 copies of input and output in NHWC too were
// 1.1-2.9x the time at batch 8: 2026-12-06, docs/perf.md).
// measured (2-vCPU Zen 4, batch 1, vs oneDNN 2.6.3): the 26 depthwise layers of MobileNetV2, EfficientNet-B0
// and ConvNeXt-T in NCHW 0.27-1.91x one thread (geomean 0.98x; 3.53 ms summed against 4.19), 0.67-2.62x two
// threads (geomean 1.54x; 1.86 against 3.10), the 7x7 planes the slowest (2026-12-05); NHWC the 26 layers'
// sum 1.38 ms on one thread (oneDNN's 1.25 in that day's earlier runs), the 3x3 layers 0.66-0.84x oneDNN
// (2026-12-06).
// docs/kernels.md, docs/perf.md.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/activation.hpp"
#include "common/element.hpp"
#include "core/registry.hpp"
#include "cpu/epilogue_span.hpp"
#include "cpu/vec16.hpp"

#include <omp.h>

namespace convkit::detail {
namespace {

// 16 floats a vector (v16, cpu/vec16.hpp), kept in registers.
inline void load16(v16& v, const float* p) { std::memcpy(&v, p, sizeof(v)); }
inline void store16(float* p, const v16& v) { std::memcpy(p, &v, sizeof(v)); }

// The NHWC pass reads x in its own dtype D: float32, or the 16-bit bits (uint16_t) widened as they are loaded
// (exactly: every f16 and bf16 value is a float), so that a 16-bit layer's sums are the float32 run's on the
// widened values, bit for bit.
template <DType D>
using elem_t = std::conditional_t<D == DType::f32, float, uint16_t>;
template <DType D>
__attribute__((always_inline)) inline void load16(v16& v, const elem_t<D>* p) {
  if constexpr (D == DType::f32)
    std::memcpy(&v, p, sizeof(v));
  else if constexpr (D == DType::bf16)
    bf16_to_floats(v, p);
  else
    f16_to_floats(v, p);
}
template <DType D>
inline float widen(elem_t<D> v) {
  if constexpr (D == DType::f32)
    return v;
  else if constexpr (D == DType::bf16)
    return bf16_to_float(v);
  else
    return half_to_float(v);
}
constexpr int64_t kQB = 8;  // NHWC: output pixels accumulated together in registers (8 of 32 vector registers)


// One filter row of a block of B (kQB, or 7) pixels at stride U (1 or 2), dilation 1, for a 3-, 5- or 7-wide
// filter: each input column of the block's span (U * (B - 1) + S columns from xq, the block's first pixel's tap 0)
// that lies inside the image, [c_lo, c_hi), is read once and multiplied by the row's S taps (in registers)
// into every pixel it feeds: at most U * (kQB - 1) + S loads of x for kQB * S multiply-adds, instead of one
// load each; a column outside the image is skipped, which skips exactly the taps outside. Each pixel still
// sums its taps in order (for pixel j, tap s = column - U * j rises with the column). Pixels past the
// block's own (a last, short block) get sums that are never stored.
// kEdge false: every column inside (no tests).
template <DType D, int S, int U, bool kEdge, int B = int(kQB)>
__attribute__((always_inline)) inline void row_taps(v16 (&a)[B], const elem_t<D>* xq, const float* wr, int64_t C,
                                                    int c_lo, int c_hi) {
  v16 wv[S];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) load16(wv[s], wr + s * C);
#pragma GCC unroll 32
  for (int c = 0; c < U * (B - 1) + S; ++c) {
    if (kEdge && (c < c_lo || c >= c_hi)) continue;
    v16 xv;
    load16<D>(xv, xq + c * C);
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const int d = c - s;
      if (d >= 0 && d % U == 0 && d / U < B) a[d / U] += xv * wv[s];
    }
  }
}
// A block of nb <= B pixels of one output row by row_taps (dilation 1 along W, stride U, an S-wide filter), every
// vector channel [cs, cv): the input columns its filter rows reach read once each, tested against the image's
// edges only where the block reaches past one; the sums stored in acc (the row's [Q][C] buffer), pixels past nb
// not stored. A function of its own for each (S, U, B), so that each compiles as one loop nest.
template <DType D>
struct BlockRow {
  const elem_t<D>* x;  // the input
  const float* wt;  // the filters as [r][s][c]
  float* acc;       // the output row's sums, [Q][C]
  int64_t n, p, H, W, C, R, stride_h, pad_h, dilation_h, pad_w, cs, cv;
};
template <DType D, int S, int U, int B>
__attribute__((noinline)) void block_by_columns(const BlockRow<D>& k, int64_t q0, int64_t nb) {
  constexpr int64_t span = (B - 1) * U + S;  // the input columns the block's taps reach
  const int64_t col0 = q0 * U - k.pad_w;     // its first (tap 0 of pixel 0)
  const int c_lo = int(std::max<int64_t>(0, -col0)), c_hi = int(std::min(span, k.W - col0));
  const bool edge = c_lo > 0 || c_hi < span;
  for (int64_t c0 = k.cs; c0 < k.cv; c0 += 16) {
    v16 a[B] = {};
    for (int64_t r = 0; r < k.R; ++r) {
      const int64_t h = k.p * k.stride_h - k.pad_h + r * k.dilation_h;
      if (h < 0 || h >= k.H) continue;
      const elem_t<D>* xq = k.x + ((k.n * k.H + h) * k.W + col0) * k.C + c0;
      const float* wr = k.wt + r * S * k.C + c0;
      if (edge)
        row_taps<D, S, U, true, B>(a, xq, wr, k.C, c_lo, c_hi);
      else
        row_taps<D, S, U, false, B>(a, xq, wr, k.C, c_lo, c_hi);
    }
#pragma GCC unroll 8
    for (int64_t j = 0; j < B; ++j)
      if (j < nb) store16(k.acc + (q0 + j) * k.C + c0, a[j]);
  }
}
template <DType D>
using BlockFn = void (*)(const BlockRow<D>&, int64_t, int64_t);
// block_by_columns for an S of 3, 5 or 7 and a U of 1 or 2 (checked by the caller).
template <DType D, int B>
BlockFn<D> block_fn(int64_t S, int64_t U) {
  if (U == 1)
    return S == 3 ? block_by_columns<D, 3, 1, B> : S == 5 ? block_by_columns<D, 5, 1, B> : block_by_columns<D, 7, 1, B>;
  return S == 3 ? block_by_columns<D, 3, 2, B> : S == 5 ? block_by_columns<D, 5, 2, B> : block_by_columns<D, 7, 2, B>;
}

// The part of the epilogue after the sum, for n outputs of one channel (NCHW: bias[k] for all) starting at
// output index idx, out = y + idx.
inline void finish_channel(const Epilogue& e, const float* bias, const float* res, const float* acc, float* out,
                           int64_t n, int64_t k, int64_t idx) {
  epilogue_span(e, e.alpha, DType::f32, acc, out, n, bias ? bias + k : nullptr, SpanBias::one, res ? res + idx : nullptr);
}

// NHWC in dtype D: x, w, y, the bias and the residual all D's elements, the filters widened into wt, each
// output row's sums in float32 and rounded once as it is stored (epilogue_span).
template <DType D>
void run_nhwc(const Conv2dProblem& pb, const elem_t<D>* x, const elem_t<D>* w, elem_t<D>* y, const Epilogue& e,
              float* wt) {
  using E = elem_t<D>;
  const int64_t C = pb.c, H = pb.h, W = pb.w, P = pb.p(), Q = pb.q(), RS = pb.r * pb.s;
  const E* bias = static_cast<const E*>(e.bias);
  const E* res = static_cast<const E*>(e.residual);
  const bool plain = bias == nullptr && res == nullptr && e.activation == Activation::none && e.alpha == 1.0f;
  const int64_t sw = pb.stride_w, pw = pb.pad_w, dw = pb.dilation_w;
  const int64_t C16 = C / 16 * 16, pix = sw * C;  // pix: one output pixel's step in the input row
  // The threads split the output rows, or the channels where that divides the work more evenly (few rows of many
  // channels: 768@7 has 7 rows and 48 blocks of 16 channels). Split by channels, a thread transposes and reads
  // only its own filters and no barrier is needed; split by rows, every thread reads every filter.
  const int64_t T = omp_get_max_threads(), rows = pb.n * P, blocks = (C + 15) / 16;
  auto evenness = [T](int64_t units) { return double(units) / double(T * ((units + T - 1) / T)); };
  const bool by_channel = T > 1 && evenness(blocks) > evenness(rows);
#pragma omp parallel num_threads(int(T))
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    // This thread's rows [row0, row1) and channels [cs, ce) (cs a multiple of 16): its vector channels [cs, cv),
    // the rest [std::max(cs, C16), ce) one at a time.
    const int64_t row0 = by_channel ? 0 : rows * t / nt, row1 = by_channel ? rows : rows * (t + 1) / nt;
    const int64_t cs = by_channel ? blocks * t / nt * 16 : 0, ce = by_channel ? std::min(C, blocks * (t + 1) / nt * 16) : C;
    const int64_t cv = std::min(ce, C16), cr = std::max(cs, C16);
    // wt[(r*S + s)*C + c] = w[c][r][s] (KRSC with one input channel per group: w[c*R*S + r*S + s]), 16 channels
    // at a time (their R*S taps in L1; a store of every tap a channel C floats apart was 18% of a 7x7 layer's
    // time at 768@7, perf annotate).
    auto transpose = [&](int64_t c0) {
      const int64_t nc = std::min<int64_t>(16, C - c0);
      for (int64_t tap = 0; tap < RS; ++tap) {
        float* __restrict d = wt + tap * C + c0;
        const E* __restrict src = w + c0 * RS + tap;
        for (int64_t c = 0; c < nc; ++c) d[c] = widen<D>(src[c * RS]);
      }
    };
    if (by_channel) {
      for (int64_t c0 = cs; c0 < ce; c0 += 16) transpose(c0);
    } else {
#pragma omp for schedule(static)
      for (int64_t c0 = 0; c0 < C; c0 += 16) transpose(c0);
    }
    std::vector<float> row(static_cast<size_t>(Q * C));  // one output row, all channels: acc[q*C + c]
    for (int64_t np = row0; np < row1; ++np) {
      const int64_t n = np / P, p = np % P;
      float* acc = row.data();
      if (cr < ce) std::fill(row.begin(), row.end(), 0.0f);  // (the vector channels are stored whole)
      // Channels [0, C16) in vectors of 16, nb <= kQB output pixels q0.. at a time, accumulated in registers
      // over the taps inside the image (in tap order) and stored once. Pixel j's taps along W are [s_lo[j],
      // s_hi[j]); the taps inside for all of a block's pixels, [sf_lo, sf_hi), take kQB FMAs unchecked, the
      // others test each pixel; a block of one pixel runs its own range unchecked. The blocks start at the
      // first pixel whose taps are all inside (in_lo), so that the interior is whole blocks; the pixels
      // before it and after the last whole block make blocks of their own.
      const int64_t in_lo = std::min(Q, pw <= 0 ? 0 : (pw + sw - 1) / sw);  // q*sw - pw >= 0
      // Dilation 1, stride 1 or 2, a 3-, 5- or 7-wide filter: row_taps, each input column read once a row.
      const bool by_columns = dw == 1 && (sw == 1 || sw == 2) && (pb.s == 3 || pb.s == 5 || pb.s == 7);
      // Blocks from the row's start, edges included, all by row_taps: 5- and 7-wide filters in blocks of kQB (a
      // 7x7 image is one block; a short last block computes pixels it does not store); 3-wide ones on rows of a
      // multiple of 8 or of 7 pixels (every layer of MobileNetV2 and EfficientNet-B0) in blocks of that many, so
      // that none is short. Other 3x3 rows take the blocks below: an edge pixel and a short last block on the
      // per-pixel path, the whole blocks between by row_taps (from the row's start, the short 3x3 edge and tail
      // blocks of 8 lost 8-24% at 14x14 and 28x28).
      const int64_t from_start = !by_columns ? 0 : pb.s != 3 || Q % kQB == 0 ? kQB : Q % 7 == 0 ? 7 : 0;
      const BlockRow<D> blk{x, wt, acc, n, p, H, W, C, pb.r, pb.stride_h, pb.pad_h, pb.dilation_h, pw, cs, cv};
      if (from_start != 0 && cs < cv) {
        const BlockFn<D> f = from_start == 7 ? block_fn<D, 7>(pb.s, sw) : block_fn<D, int(kQB)>(pb.s, sw);
        for (int64_t q0 = 0; q0 < Q; q0 += from_start) f(blk, q0, std::min(from_start, Q - q0));
      }
      const BlockFn<D> whole = by_columns ? block_fn<D, int(kQB)>(pb.s, sw) : nullptr;
      for (int64_t q0 = 0, nb = 0; q0 < Q && cs < cv && from_start == 0; q0 += nb) {
        nb = std::min(kQB, (q0 < in_lo ? in_lo : Q) - q0);
        if (whole != nullptr && nb == kQB) {
          whole(blk, q0, kQB);
          continue;
        }
        int64_t s_lo[kQB], s_hi[kQB], sf_lo = 0, sf_hi = pb.s;
        for (int64_t j = 0; j < kQB; ++j) {
          s_lo[j] = pb.s, s_hi[j] = 0;  // (none: a pixel past the block)
          if (j < nb) {
            const int64_t c0 = (q0 + j) * sw - pw;  // tap s reads column c0 + s*dw, inside for [lo, hi)
            s_lo[j] = c0 >= 0 ? 0 : (-c0 + dw - 1) / dw;
            s_hi[j] = c0 > W - 1 ? 0 : std::min<int64_t>(pb.s, (W - 1 - c0) / dw + 1);
            sf_lo = std::max(sf_lo, s_lo[j]), sf_hi = std::min(sf_hi, s_hi[j]);  // (over the block's pixels)
          }
        }
        sf_hi = std::max(sf_hi, sf_lo);
        if (nb == 1) {  // one pixel (an edge's): its taps inside, unchecked
          for (int64_t c0 = cs; c0 < cv; c0 += 16) {
            v16 a0 = {};
            for (int64_t r = 0; r < pb.r; ++r) {
              const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
              if (h < 0 || h >= H) continue;
              const E* xq = x + ((n * H + h) * W + q0 * sw - pw) * C + c0;
              const float* wr = wt + r * pb.s * C + c0;
              for (int64_t s = s_lo[0]; s < s_hi[0]; ++s) {
                v16 wv, xv;
                load16(wv, wr + s * C);
                load16<D>(xv, xq + s * dw * C);
                a0 += xv * wv;
              }
            }
            store16(acc + q0 * C + c0, a0);
          }
          continue;
        }
        for (int64_t c0 = cs; c0 < cv; c0 += 16) {
          v16 a[kQB] = {};
          for (int64_t r = 0; r < pb.r; ++r) {
            const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
            if (h < 0 || h >= H) continue;
            // (xq: tap 0 of pixel 0, possibly outside the image: only offsets inside are read)
            const E* xq = x + ((n * H + h) * W + q0 * sw - pw) * C + c0;
            const float* wr = wt + r * pb.s * C + c0;
            for (int64_t s = 0; s < pb.s; ++s) {
              const E* xs = xq + s * dw * C;
              v16 wv;
              load16(wv, wr + s * C);
              if (s >= sf_lo && s < sf_hi && nb == kQB) {
                // (a pointer stepped a pixel at a time: fewer address registers than eight offsets j * sw * C,
                // which the compiler kept on the stack)
                const E* xj = xs;
#pragma GCC unroll 8
                for (int64_t j = 0; j < kQB; ++j, xj += pix) {
                  v16 xv;
                  load16<D>(xv, xj);
                  a[j] += xv * wv;
                }
              } else if (s >= sf_lo && s < sf_hi) {  // (a partial block: its pixels only)
#pragma GCC unroll 8
                for (int64_t j = 0; j < kQB; ++j)
                  if (j < nb) {
                    v16 xv;
                    load16<D>(xv, xs + j * sw * C);
                    a[j] += xv * wv;
                  }
              } else {
#pragma GCC unroll 8
                for (int64_t j = 0; j < kQB; ++j)
                  if (s >= s_lo[j] && s < s_hi[j]) {
                    v16 xv;
                    load16<D>(xv, xs + j * sw * C);
                    a[j] += xv * wv;
                  }
              }
            }
          }
          // (constant bounds, unrolled: the accumulators stay in registers)
#pragma GCC unroll 8
          for (int64_t j = 0; j < kQB; ++j)
            if (j < nb) store16(acc + (q0 + j) * C + c0, a[j]);
        }
      }
      // The channels [C16, C) among this thread's, one tap at a time over the row.
      for (int64_t r = 0; r < pb.r && cr < ce; ++r) {
        const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
        if (h < 0 || h >= H) continue;
        const E* xr = x + (n * H + h) * W * C;
        for (int64_t s = 0; s < pb.s; ++s) {
          const float* wp = wt + (r * pb.s + s) * C;
          // The outputs q whose input column q*sw - pw + s*dw lies in [0, W): [q_lo, q_hi).
          const int64_t off = s * dw - pw;
          const int64_t q_lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
          const int64_t q_hi = std::min(Q, W - off <= 0 ? int64_t(0) : (W - off + sw - 1) / sw);
          for (int64_t q = q_lo; q < q_hi; ++q) {
            const E* xp = xr + (q * sw + off) * C;
            float* ap = acc + q * C;
#pragma omp simd
            for (int64_t c = cr; c < ce; ++c) ap[c] += widen<D>(xp[c]) * wp[c];
          }
        }
      }
      const int64_t base = (n * P + p) * Q * C;
      if (plain && D == DType::f32 && cs == 0 && ce == C) {
        std::memcpy(y + base, acc, sizeof(float) * size_t(Q * C));
      } else if (plain && D == DType::f32) {
        for (int64_t q = 0; q < Q; ++q) std::memcpy(y + base + q * C + cs, acc + q * C + cs, sizeof(float) * size_t(ce - cs));
      } else if (plain && cs == 0 && ce == C) {  // 16-bit: the row rounded
        epilogue_span(Epilogue{}, 1.0f, D, acc, y + base, Q * C, nullptr, SpanBias::none, nullptr);
      } else {
        for (int64_t q = 0; q < Q; ++q)  // a pixel's channels [cs, ce): bias[c] for channel c
          epilogue_span(e, e.alpha, D, acc + q * C + cs, y + base + q * C + cs, ce - cs, bias ? bias + cs : nullptr,
                        SpanBias::per_element, res ? res + base + q * C + cs : nullptr);
      }
    }
  }
}

// NCHW, one (image, channel) plane, one output row at a time, tap by tap over the row: per tap the outputs
// whose input column lies inside the image form one range. Used where the padded plane cannot be: a
// non-finite filter value (padding zeros times it would give NaN where the sum skips the tap).
void nchw_plane_rows(const Conv2dProblem& pb, const float* xc, const float* wc, float* yc, float* acc,
                     const Epilogue& e, int64_t c, int64_t plane_base) {
  const int64_t H = pb.h, W = pb.w, P = pb.p(), Q = pb.q();
  const int64_t sw = pb.stride_w, pw = pb.pad_w, dw = pb.dilation_w;
  const float* bias = static_cast<const float*>(e.bias);
  const float* res = static_cast<const float*>(e.residual);
  const bool plain = bias == nullptr && res == nullptr && e.activation == Activation::none && e.alpha == 1.0f;
  for (int64_t p = 0; p < P; ++p) {
    std::fill(acc, acc + Q, 0.0f);
    for (int64_t r = 0; r < pb.r; ++r) {
      const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
      if (h < 0 || h >= H) continue;
      const float* xr = xc + h * W;
      for (int64_t s = 0; s < pb.s; ++s) {
        const float wv = wc[r * pb.s + s];
        const int64_t off = s * dw - pw;
        const int64_t q_lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
        const int64_t q_hi = std::min(Q, W - off <= 0 ? int64_t(0) : (W - off + sw - 1) / sw);
        if (sw == 1) {
          const float* xs = xr + off;
#pragma omp simd
          for (int64_t q = q_lo; q < q_hi; ++q) acc[q] += xs[q] * wv;
        } else {
          for (int64_t q = q_lo; q < q_hi; ++q) acc[q] += xr[q * sw + off] * wv;
        }
      }
    }
    float* yr = yc + p * Q;
    if (plain) {
      std::memcpy(yr, acc, sizeof(float) * size_t(Q));
    } else {
      finish_channel(e, bias, res, acc, yr, Q, c, plane_base + p * Q);
    }
  }
}

// NCHW: each (image, channel) plane is first copied into a zero-padded buffer, its columns split by the
// stride's phase (padded column x goes to phase x % u at x / u), so that every tap of every output reads
// a contiguous run: no per-tap ranges. Then blocks of 4 output rows x 16 columns are accumulated in
// registers over all the taps, in tap order (the sums are the row pass's, plus exact zeros).
// NOTE: the row pass alone spent most of its time on each tap's range and loop setup over short rows
// (~17 GFLOP/s on 3x3 144@56, batch 1); register blocks that kept it for the edge columns were slower
// still (docs/perf.md, 2026-12-01, commit a69d578).
void run_nchw(const Conv2dProblem& pb, const float* x, const float* w, float* y, const Epilogue& e) {
  const int64_t C = pb.c, H = pb.h, W = pb.w, P = pb.p(), Q = pb.q(), R = pb.r, S = pb.s, RS = R * S;
  const int64_t sh = pb.stride_h, sw = pb.stride_w, ph = pb.pad_h, pw = pb.pad_w, dh = pb.dilation_h,
                dw = pb.dilation_w;
  const float* bias = static_cast<const float*>(e.bias);
  const float* res = static_cast<const float*>(e.residual);
  const bool plain = bias == nullptr && res == nullptr && e.activation == Activation::none && e.alpha == 1.0f;
  constexpr int64_t kPB = 4, kQV = 16;
  const int64_t P4 = (P + kPB - 1) / kPB * kPB, Q16 = (Q + kQV - 1) / kQV * kQV;
  const int64_t Hp = (P4 - 1) * sh + (R - 1) * dh + 1;  // padded rows the blocks read
  const int64_t Wph = Q16 + (S - 1) * dw / sw + 1;      // columns per stride phase
  const int64_t phase_elems = Hp * Wph;
  // Each stride phase's first input column, its place in the phase's row and its count (the same for every row
  // of every plane: computed once, not with three divisions a row; `perf annotate` put those divisions at
  // ~40% of a 14x14 stride-2 plane's time).
  std::vector<int64_t> phase_w0(static_cast<size_t>(sw)), phase_idx0(static_cast<size_t>(sw)), phase_cnt(static_cast<size_t>(sw));
  for (int64_t f = 0; f < sw; ++f) {
    const int64_t w0 = ((f - pw) % sw + sw) % sw, idx0 = (w0 + pw) / sw;
    phase_w0[size_t(f)] = w0, phase_idx0[size_t(f)] = idx0;
    phase_cnt[size_t(f)] = std::max<int64_t>(0, std::min((W - w0 + sw - 1) / sw, Wph - idx0));
  }
  // Tap (r, s)'s offset in the padded plane from a block's first output (its phase, row and column): a table,
  // not a division by the stride a tap (perf annotate: the tap loop's idiv).
  std::vector<int64_t> tap_off(static_cast<size_t>(RS));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t col = s * dw;
      tap_off[size_t(r * S + s)] = (col % sw) * phase_elems + r * dh * Wph + col / sw;
    }
#pragma omp parallel
  {
    std::vector<float> xp(static_cast<size_t>(sw * phase_elems)), acc(static_cast<size_t>(Q));
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < pb.n; ++n)
      for (int64_t c = 0; c < C; ++c) {
        const float* xc = x + (n * C + c) * H * W;
        const float* wc = w + c * RS;
        float* yc = y + (n * C + c) * P * Q;
        const int64_t plane_base = (n * C + c) * P * Q;
        bool finite = true;
        for (int64_t t = 0; t < RS; ++t) finite = finite && std::isfinite(wc[t]);
        if (!finite) {
          nchw_plane_rows(pb, xc, wc, yc, acc.data(), e, c, plane_base);
          continue;
        }
        // The padded, phase-split plane: padded row hr = h + ph, column xq = w + pw -> [xq % sw][hr][xq / sw].
        // (Every plane writes the same elements of it, so the padding's zeros from the buffer's construction stay.)
        for (int64_t hr = 0; hr < Hp; ++hr) {
          const int64_t h = hr - ph;
          if (h < 0 || h >= H) continue;
          const float* xr = xc + h * W;
          if (sw == 1) {
            const int64_t w_hi = std::min(W, Wph - pw);  // columns past the blocks' reach are not needed
            if (w_hi > 0) std::memcpy(xp.data() + hr * Wph + pw, xr, sizeof(float) * size_t(w_hi));
          } else {
            // Phase f holds the input columns wi with (wi + pw) % sw == f, at (wi + pw) / sw.
            for (int64_t f = 0; f < sw; ++f) {
              const int64_t w0 = phase_w0[size_t(f)], cnt = phase_cnt[size_t(f)];
              float* dst = xp.data() + f * phase_elems + hr * Wph + phase_idx0[size_t(f)];
              const float* src = xr + w0;
              if (sw == 2) {  // (a constant stride: the compiler vectorizes the de-interleave)
                for (int64_t i = 0; i < cnt; ++i) dst[i] = src[2 * i];
              } else {
                for (int64_t i = 0; i < cnt; ++i) dst[i] = src[i * sw];
              }
            }
          }
        }
        for (int64_t p0 = 0; p0 < P; p0 += kPB)
          for (int64_t q0 = 0; q0 < Q; q0 += kQV) {
            v16 a0 = {}, a1 = {}, a2 = {}, a3 = {};
            const float* xb = xp.data() + p0 * sh * Wph + q0;
            for (int64_t r = 0; r < R; ++r)
              for (int64_t s = 0; s < S; ++s) {
                const float t = wc[r * S + s];  // (vector * scalar: the scalar broadcast)
                const float* xs = xb + tap_off[size_t(r * S + s)];
                v16 v0, v1, v2, v3;
                load16(v0, xs);
                load16(v1, xs + sh * Wph);
                load16(v2, xs + 2 * sh * Wph);
                load16(v3, xs + 3 * sh * Wph);
                a0 += v0 * t;
                a1 += v1 * t;
                a2 += v2 * t;
                a3 += v3 * t;
              }
            const v16* rows[kPB] = {&a0, &a1, &a2, &a3};
            const int64_t cnt = std::min(kQV, Q - q0);
            for (int64_t j = 0; j < kPB && p0 + j < P; ++j) {
              float* yr = yc + (p0 + j) * Q + q0;
              alignas(64) float v[kQV];
              store16(v, *rows[j]);
              if (plain) {
                if (cnt == kQV) {
                  std::memcpy(yr, v, sizeof(v));
                } else {
                  for (int64_t i = 0; i < cnt; ++i) yr[i] = v[i];
                }
              } else {
                const int64_t base = plane_base + (p0 + j) * Q + q0;
                finish_channel(e, bias, res, v, yr, cnt, c, base);
              }
            }
          }
      }
  }
}

class CpuDepthwise final : public Algorithm {
 public:
  std::string name() const override { return "cpu_depthwise"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    return "depthwise (groups = C = K) direct convolution: NHWC vectorised over channels (f16/bf16 widened as "
           "loaded), NCHW on a zero-padded plane in 4x16 register blocks (f16/bf16 on widened copies); OpenMP";
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (cfg.device != Device::cpu) return Support::no("runs on the CPU only.");
    if (cfg.math == MathMode::tf32) return Support::no("the CPU has no tf32 mode; ask for strict f32.");
    if (Status s = p.validate(); !s.ok()) return Support::no(s.message);
    if (p.groups != p.c || p.k != p.c)
      return Support::no("depthwise with channel multiplier 1 only (groups = C = K); multipliers > 1 and other "
                         "grouped layers go to the next algorithm (cpu_im2col_gemm).");
    return Support::yes();
  }
  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!can_implement(p, cfg)) return 0;
    size_t floats = cfg.layout == Layout::nhwc ? size_t(p.r * p.s * p.c) : 0;  // the transposed filters
    if (cfg.dtype != DType::f32 && cfg.layout == Layout::nchw) {  // widened filters and bias; input and output (and a residual) of a pass
      const int64_t nb = images_a_pass(p);
      floats += size_t(p.r * p.s * p.c + p.k + nb * (image_in(p) + 2 * image_out(p)));
    }
    return sizeof(float) * floats;
  }
  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok) throw Error(StatusCode::unsupported, "cpu_depthwise: " + ok.reason);
    const DType dt = call.config.dtype;
    if (call.config.layout == Layout::nchw) {
      if (dt != DType::f32) return run16_nchw(call);
      run_nchw(pb, static_cast<const float*>(call.src.data), static_cast<const float*>(call.wei.data),
               static_cast<float*>(call.dst.data), call.epilogue);
      return;
    }
    const size_t need = workspace_bytes(pb, call.config);
    if (call.workspace == nullptr || call.workspace_bytes < need)
      throw Error(StatusCode::invalid_tensor, "cpu_depthwise needs " + std::to_string(need) +
                                                  " bytes of workspace but was given " +
                                                  std::to_string(call.workspace_bytes) + ".");
    auto nhwc = [&](auto tag) {
      constexpr DType D = decltype(tag)::value;
      run_nhwc<D>(pb, static_cast<const elem_t<D>*>(call.src.data), static_cast<const elem_t<D>*>(call.wei.data),
                  static_cast<elem_t<D>*>(call.dst.data), call.epilogue, static_cast<float*>(call.workspace));
    };
    if (dt == DType::bf16)
      nhwc(std::integral_constant<DType, DType::bf16>{});
    else if (dt == DType::f16)
      nhwc(std::integral_constant<DType, DType::f16>{});
    else
      nhwc(std::integral_constant<DType, DType::f32>{});
  }

 private:
  // f16/bf16 NCHW (the file's header): widened copies in the workspace, the float32 run, the output rounded.
  // 16-bit tensors go through float32 copies a pass of images_a_pass images at a time (a batch's whole copies
  // were 38 MB at 96 channels of 64x64, batch 8: past glibc's largest reused block, fresh pages from the kernel
  // every call through the PyTorch op).
  static int64_t image_in(const Conv2dProblem& p) { return p.c * p.h * p.w; }
  static int64_t image_out(const Conv2dProblem& p) { return p.k * p.p() * p.q(); }
  static int64_t images_a_pass(const Conv2dProblem& p) {
    constexpr int64_t kPassFloats = int64_t(1) << 21;  // 8 MB
    return std::clamp<int64_t>(kPassFloats / std::max<int64_t>(1, image_in(p) + 2 * image_out(p)), 1,
                               std::max<int64_t>(1, p.n));
  }

  void run16_nchw(const ConvCall& call) const {
    const Conv2dProblem& pb = call.problem;
    const DType dt = call.config.dtype;
    const size_t need = workspace_bytes(pb, call.config);
    if (call.workspace == nullptr || call.workspace_bytes < need)
      throw Error(StatusCode::invalid_tensor, "cpu_depthwise needs " + std::to_string(need) +
                                                  " bytes of workspace but was given " +
                                                  std::to_string(call.workspace_bytes) + ".");
    const int64_t nb_max = images_a_pass(pb), nw = pb.r * pb.s * pb.c;
    const int64_t in_img = image_in(pb), out_img = image_out(pb);
    float* w = static_cast<float*>(call.workspace);
    float* bias = w + nw;
    float* x = bias + pb.k;
    float* y = x + nb_max * in_img;
    float* res = y + nb_max * out_img;
    auto widen_all = [dt](const void* src, float* dst, int64_t n) {
      const auto* s16 = static_cast<const uint16_t*>(src);  // (the dtype decided once, not once an element)
      if (dt == DType::bf16) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s16[i]);
      } else {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(s16[i]);
      }
    };
    widen_all(call.wei.data, w, nw);
    Epilogue e = call.epilogue;
    if (e.bias != nullptr) {
      widen_all(e.bias, bias, pb.k);
      e.bias = bias;
    }
    const void* residual = e.residual;
    const auto* src = static_cast<const uint16_t*>(call.src.data);
    auto* dst = static_cast<uint16_t*>(call.dst.data);
    for (int64_t n0 = 0; n0 < pb.n; n0 += nb_max) {
      Conv2dProblem sub = pb;  // images [n0, n0 + sub.n)
      sub.n = std::min(nb_max, pb.n - n0);
      const int64_t ny = sub.n * out_img;
      widen_all(src + n0 * in_img, x, sub.n * in_img);
      if (residual != nullptr) {  // (read before dst is written: it may be dst itself)
        widen_all(static_cast<const uint16_t*>(residual) + n0 * out_img, res, ny);
        e.residual = res;
      }
      run_nchw(sub, x, w, y, e);
      const Epilogue plain;  // (the epilogue was applied in float32: only the rounding is left)
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < ny; i += 4096)
        epilogue_span(plain, 1.0f, dt, y + i, dst + n0 * out_img + i, std::min<int64_t>(4096, ny - i), nullptr,
                      SpanBias::none, nullptr);
    }
  }
};

}  // namespace

const Algorithm* make_cpu_depthwise() {
  static CpuDepthwise algo;
  return &algo;
}

}  // namespace convkit::detail
