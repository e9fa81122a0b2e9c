// The column matrix of a convolution on the CPU (im2col), as cpu_im2col_gemm and the GEMM weight gradient
// (wgrad_gemm.cpp) build it: one image and group, a range of its output pixels, zeros in the padding.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/element.hpp"
#include "convkit/problem.hpp"
#include "convkit/tensor.hpp"

namespace convkit::detail {

// Element i of x as a float (a 16-bit one widened), and n consecutive elements of x into o.
inline float element(const float* x, int64_t i, DType) { return x[i]; }
inline float element(const uint16_t* x, int64_t i, DType dt) { return load_as_float(x, dt, i); }
inline void copy_elements(const float* x, float* o, int64_t n, DType) { std::memcpy(o, x, sizeof(float) * n); }
inline void copy_elements(const uint16_t* x, float* o, int64_t n, DType dt) {
  if (dt == DType::bf16) {  // (the dtype decided once a run: the loops vectorise)
    for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_float(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = half_to_float(x[i]);
  }
}

// Columns [pq0, pq1) of col[(c*R + r)*S + s][p*Q + q] = x[g*Cg + c][h][w] (0 in the padding), NCHW;
// col's leading dimension is P*Q. T: float, or uint16_t for f16/bf16 (dt says which), widened.
template <typename T>
void im2col_nchw(const Conv2dProblem& pb, const T* x /* image n */, DType dt, int64_t g, float* col, int64_t pq0,
                 int64_t pq1) {
  const int64_t P = pb.p(), Q = pb.q(), Cg = pb.c_per_group(), HW = pb.h * pb.w;
  const int64_t rows = Cg * pb.r * pb.s;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t c = row / (pb.r * pb.s), r = (row / pb.s) % pb.r, s = row % pb.s;
    const T* xc = x + (g * Cg + c) * HW;
    float* out = col + row * P * Q;
    const int64_t w0 = s * pb.dilation_w - pb.pad_w;
    for (int64_t pq = pq0; pq < pq1;) {
      const int64_t p = pq / Q, q_end = std::min(Q, pq1 - p * Q);
      const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
      for (int64_t q = pq - p * Q; q < q_end; ++q, ++pq) {
        const int64_t w = w0 + q * pb.stride_w;
        out[pq] = (h >= 0 && h < pb.h && w >= 0 && w < pb.w) ? element(xc, h * pb.w + w, dt) : 0.0f;
      }
    }
  }
}

// 16-bit elements copied as they are (the bfloat16 dot-product path's columns).
inline void copy_elements(const uint16_t* x, uint16_t* o, int64_t n, DType) {
  std::memcpy(o, x, sizeof(uint16_t) * size_t(n));
}

// Rows [pq0, pq1) of col[p*Q + q][(r*S + s)*Cg + c] = x[h][w][g*Cg + c] (0 in the padding), NHWC, rows of
// ld >= R*S*Cg elements (past R*S*Cg zeros: the bfloat16 path pads the reduction to an even length). T -> O:
// float -> float, uint16_t -> float (widened; dt says from what) or uint16_t -> uint16_t (as it is). col holds
// the rows from first_row on (row pq at col + (pq - first_row) * ld).
template <typename T, typename O>
void im2col_nhwc(const Conv2dProblem& pb, const T* x /* image n */, DType dt, int64_t g, O* col, int64_t ld,
                 int64_t pq0, int64_t pq1, int64_t first_row = 0) {
  const int64_t Q = pb.q(), Cg = pb.c_per_group();
  const int64_t width = pb.r * pb.s * Cg;
  // One group and no dilation along W: a filter row's taps inside the image read consecutive pixels, whose
  // channels are consecutive in NHWC, so the row is one copy (a stem's 7 taps of 3 channels: one copy of 21
  // elements where there were 7 of 3; the copies' calls were as much of a stem's weight gradient as its GEMM).
  const bool rows_whole = pb.groups == 1 && pb.dilation_w == 1;
  for (int64_t pq = pq0; pq < pq1; ++pq) {
    const int64_t p = pq / Q, q = pq % Q;
    O* out = col + (pq - first_row) * ld;
    for (int64_t r = 0; r < pb.r; ++r) {
      const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
      if (rows_whole) {
        O* o = out + r * pb.s * Cg;
        const int64_t w0 = q * pb.stride_w - pb.pad_w;  // tap s reads column w0 + s
        const int64_t s0 = h < 0 || h >= pb.h ? pb.s : std::clamp<int64_t>(-w0, 0, pb.s);
        const int64_t s1 = h < 0 || h >= pb.h ? pb.s : std::clamp<int64_t>(pb.w - w0, s0, pb.s);
        std::fill(o, o + s0 * Cg, O(0));
        if (s1 > s0) copy_elements(x + (h * pb.w + w0 + s0) * pb.c, o + s0 * Cg, (s1 - s0) * Cg, dt);
        std::fill(o + s1 * Cg, o + pb.s * Cg, O(0));
        continue;
      }
      for (int64_t s = 0; s < pb.s; ++s) {
        const int64_t w = q * pb.stride_w - pb.pad_w + s * pb.dilation_w;
        O* o = out + (r * pb.s + s) * Cg;
        if (h < 0 || h >= pb.h || w < 0 || w >= pb.w)
          std::fill(o, o + Cg, O(0));
        else
          copy_elements(x + (h * pb.w + w) * pb.c + g * Cg, o, Cg, dt);
      }
    }
    std::fill(out + width, out + ld, O(0));
  }
}

// Rows [r0, r1) of the column matrix of consecutive NHWC images (x: the first image; row r is image r / PQ's
// output pixel r % PQ, at col + (r - first_row) * ld): a range may span images, as where several images'
// pixels are the rows of one GEMM.
template <typename T, typename O>
void im2col_nhwc_images(const Conv2dProblem& pb, const T* x, DType dt, int64_t g, O* col, int64_t ld, int64_t r0,
                        int64_t r1, int64_t first_row = 0) {
  const int64_t PQ = pb.p() * pb.q(), img = pb.c * pb.h * pb.w;
  for (int64_t r = r0; r < r1;) {
    const int64_t i = r / PQ, pq0 = r % PQ, pq1 = std::min(PQ, pq0 + (r1 - r));
    im2col_nhwc(pb, x + i * img, dt, g, col, ld, pq0, pq1, first_row - i * PQ);
    r += pq1 - pq0;
  }
}

}  // namespace convkit::detail
