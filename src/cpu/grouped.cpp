// cpu_grouped: grouped convolutions with as many output as input channels a group (ResNeXt's and RegNet's
// 3x3 layers: 2 to 64 and more channels a group) on the CPU, vectorised along the output channels.
//
// What it adds over cpu_im2col_gemm, which runs one GEMM a group (Kg output channels x Cg*R*S, so 4 to 32
// columns wide, a tiny SGEMM per group per pixel band; 0.2-0.4x oneDNN on ResNeXt-50's grouped layers): the
// output channels of several groups in one 16-lane vector, all taps accumulated in registers.
//   Cg = 2, 4 or 8 (a vector holds 16 / Cg groups): the 16 input channels of the vector's groups are loaded
//     once a pixel and tap, and for each c < Cg a shuffle spreads input channel c of each group over that
//     group's lanes (lane l takes channel (l / Cg) * Cg + c), multiplied by the filter values of the lanes'
//     output channels for that c. No multiply on a zero, unlike a block-diagonal filter.
//   Cg a multiple of 16 (a vector within one group): input channel c of the group broadcast, times the 16
//     output channels' filter values. Where the filter rows have 3 taps read at stride 1 along W (ResNeXt's
//     3x3), a broadcast value feeds the up to 3 output pixels of its row that read it (row_block_sums), and
//     with one slice a group two output rows at a time (two_row_block_sums).
// Work mapping: OpenMP over units of (image, output rows, 16-channel slices), a slice at a time within a
// unit (its filters stay in L1 over the unit's rows). The shuffle path: per row, blocks of 8 output pixels
// (the row's rest in blocks of 4, 2 and 1); the broadcast path: a row in blocks of up to 8 of equal size
// (3-tap rows at stride 1 along W), else the unit's pixels as one list in blocks of 8; one accumulator a pixel
// over every tap and channel, the padding read as zeros. A unit's sums ([pixels]
// [channels] floats a thread) then go through the epilogue (epilogue_span.hpp) into the output: a pixel's
// channels in NHWC; in NCHW, transposed 16 x 16 at a time in registers, a channel's pixels of the unit.
// Where the input is not read in place (NCHW, 16-bit), a unit first stages the input rows and channels it
// reads (its band, halo included) as NHWC floats in a buffer of its thread (NCHW: 16 x 16 transposes in
// registers), so the copy is still in cache when the taps read it. plan_units says how many rows and slices.
// Workspace: the filters packed [K/16 slices][R*S taps][Cg][16 lanes] as floats (16 x 16 transposes). f32
// sums over taps in (r, s, c) order: bit-equal to cpu_ref on small integers; f16/bf16 within the 16-bit
// bound (the output rounded once).
// Needs K = C (Cg = Kg), groups > 1, Cg of 2, 4, 8 or a multiple of 16. Where C is not a multiple of 16 (2-8
// channels a group: RegNet's 104 and 440), the last slice is partly past C: its filters there are zeros, its
// staged input there zeros, and its lanes there are not stored.
// measured (2-vCPU AMD EPYC, batch 1, float32, 2 threads, ms, oneDNN in brackets; docs/perf.md 2026-12-06):
// ResNeXt-50 at 224x224, NHWC: 128@56 (4 channels a group) 0.135 (0.260), 256@28 (8) 0.110 (0.127), 512@14
// (16) 0.076 (0.060), 1024@7 (32) 0.069 (0.055), 512@28 s2 (16) 0.120 (0.103), 1024@14 s2 (32) 0.085 (0.061).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/element.hpp"
#include "convkit/system.hpp"
#include "core/registry.hpp"
#include "cpu/epilogue_span.hpp"

#include <omp.h>

namespace convkit::detail {
namespace {

constexpr int kL = 16;   // lanes a vector: output channels a slice
constexpr int kQB = 8;   // output pixels accumulated together

// 16 floats as one value of the compiler's vector extension (one AVX-512 register, two AVX2 ones), passed by
// reference (a vector argument or return value changes the ABI where the machine's vectors are narrower).
typedef float v16 __attribute__((vector_size(64)));
inline void load16(v16& v, const float* p) { std::memcpy(&v, p, sizeof(v)); }
inline void store16(float* p, const v16& v) { std::memcpy(p, &v, sizeof(v)); }

// y[l] = x[(l / Cg) * Cg + c]: input channel c of each lane's group. (__builtin_shufflevector: clang, g++ 12
// and later; older g++ has __builtin_shuffle with a mask vector.)
template <int Cg, int c, size_t... L>
inline void spread(const v16& x, v16& y, std::index_sequence<L...>) {
#if defined(__clang__) || !defined(__GNUC__) || __GNUC__ >= 12
  y = __builtin_shufflevector(x, x, ((int(L) / Cg) * Cg + c)...);
#else
  typedef int i16 __attribute__((vector_size(64)));
  y = __builtin_shuffle(x, i16{((int(L) / Cg) * Cg + c)...});
#endif
}

// One step of a 16 x 16 transpose held as 16 row vectors: swaps bit B of the row index with bit B of the
// column index between rows lo (bit B clear) and hi (set). After B = 8, 4, 2 and 1 the rows are the columns.
template <int B, size_t... L>
inline void swap_bit(v16& lo, v16& hi, std::index_sequence<L...>) {
  const v16 a = lo, b = hi;
#if defined(__clang__) || !defined(__GNUC__) || __GNUC__ >= 12
  lo = __builtin_shufflevector(a, b, int((L & B) ? 16 + (L & ~size_t(B)) : L)...);
  hi = __builtin_shufflevector(a, b, int((L & B) ? 16 + L : (L | B))...);
#else
  typedef int i16 __attribute__((vector_size(64)));
  lo = __builtin_shuffle(a, b, i16{int((L & B) ? 16 + (L & ~size_t(B)) : L)...});
  hi = __builtin_shuffle(a, b, i16{int((L & B) ? 16 + L : (L | B))...});
#endif
}
template <int B>
inline void transpose_step(v16 (&r)[kL]) {
  for (int i = 0; i < kL; ++i)
    if ((i & B) == 0) swap_bit<B>(r[i], r[i | B], std::make_index_sequence<kL>{});
}
// r[i][j] -> r[j][i]
inline void transpose16(v16 (&r)[kL]) {
  transpose_step<8>(r);
  transpose_step<4>(r);
  transpose_step<2>(r);
  transpose_step<1>(r);
}

// r[i] = the 16 consecutive elements of dtype D at element base + i * stride of src, as floats, i < 16 (the
// rows of a 16 x 16 block that transpose16 turns).
template <DType D>
inline void load_rows16(v16 (&r)[kL], const void* src, int64_t base, int64_t stride) {
  for (int i = 0; i < kL; ++i) {
    if constexpr (D == DType::f32) {
      load16(r[i], static_cast<const float*>(src) + base + i * stride);
    } else {
      float t[kL];
      for (int j = 0; j < kL; ++j) t[j] = load_as_float(src, D, base + i * stride + j);
      load16(r[i], t);
    }
  }
}

// One tap, Cg < 16: acc[j] += sum over c of spread_c(x[j]) * w[c] (w: [Cg][16] of the tap).
template <int Cg, int NB, int c = 0>
inline void tap_small(v16 (&acc)[NB], const v16 (&x)[NB], const float* w) {
  if constexpr (c < Cg) {
    v16 wv;
    load16(wv, w + c * kL);
    for (int j = 0; j < NB; ++j) {
      v16 t;
      spread<Cg, c>(x[j], t, std::make_index_sequence<kL>{});
      acc[j] += t * wv;
    }
    tap_small<Cg, NB, c + 1>(acc, x, w);
  }
}

struct Geometry {
  int64_t n, c, h, w, k, p, q, r, s, cg, su, sv, pu, pv, du, dv;
  explicit Geometry(const Conv2dProblem& pb)
      : n(pb.n), c(pb.c), h(pb.h), w(pb.w), k(pb.k), p(pb.p()), q(pb.q()), r(pb.r), s(pb.s), cg(pb.c_per_group()),
        su(pb.stride_h), sv(pb.stride_w), pu(pb.pad_h), pv(pb.pad_w), du(pb.dilation_h), dv(pb.dilation_w) {}
};

// Where a unit's input comes from and its sums go. x: NHWC floats of one image from input row h0 on, xc
// floats a pixel starting at input channel c0 (every row and channel in the image that the unit reads is
// there); sums: the unit's output rows, [pixel of the unit][output channel - k0], sk floats a pixel.
struct View {
  const float* x;
  int64_t h0, xc, c0;
  float* sums;
  int64_t sk, k0;
};

// The sums of output pixels q0 .. q0 + NB - 1 of output row p and slice sl into out[q * sk + k - k0] (out:
// row p's first pixel in the unit's sums). wp: the packed filters; zeros: at least max(16, Cg) zeros. CG: Cg
// for the shuffle path, 0 for the broadcast path (Cg % 16 == 0).
template <int CG, int NB>
void block_sums(const Geometry& g, const View& v, const float* wp, const float* zeros, int64_t p, int64_t sl,
                int64_t q0, float* out) {
  const int64_t taps = g.r * g.s, k0 = sl * kL;
  const int64_t ci0 = CG > 0 ? k0 : k0 / g.cg * g.cg;  // the first input channel the slice reads
  v16 acc[NB];
  for (auto& a : acc) a = v16{};
  for (int64_t r = 0; r < g.r; ++r) {
    const int64_t h = p * g.su - g.pu + r * g.du;
    if (h < 0 || h >= g.h) continue;
    const float* xr = v.x + (h - v.h0) * g.w * v.xc + (ci0 - v.c0);
    for (int64_t s = 0; s < g.s; ++s) {
      const float* px[NB];  // each pixel's input channels for this tap (zeros in the padding)
      for (int j = 0; j < NB; ++j) {
        const int64_t w = (q0 + j) * g.sv - g.pv + s * g.dv;
        px[j] = w >= 0 && w < g.w ? xr + w * v.xc : zeros;
      }
      const float* wt = wp + (sl * taps + r * g.s + s) * g.cg * kL;
      if constexpr (CG > 0) {
        v16 xv[NB];
        for (int j = 0; j < NB; ++j) load16(xv[j], px[j]);
        tap_small<CG, NB>(acc, xv, wt);
      } else {
        for (int64_t c = 0; c < g.cg; ++c) {
          v16 wv;
          load16(wv, wt + c * kL);
          for (int j = 0; j < NB; ++j) acc[j] += px[j][c] * wv;
        }
      }
    }
  }
  for (int j = 0; j < NB; ++j) store16(out + (q0 + j) * v.sk + (k0 - v.k0), acc[j]);
}

// The broadcast path over a unit's pixels as one list (rows joined): the sums of its pixels i0 .. i0 + kQB
// - 1 (those under m; the rest repeat pixel i0, not stored) of slices sl .. sl + MS - 1 (of one group) into
// sums[i * sk + k - k0]. Eight independent sums a slice whatever the row length (a row of 5 or 7 pixels in
// blocks of 4, 2 and 1 left the multiply waiting on its own chain of Cg * R * S dependent FMAs); with MS = 2
// (32 or more channels a group) each input value broadcast feeds both slices' multiply-adds.
template <int MS>
void flat_block_sums(const Geometry& g, const View& v, const float* wp, const float* zeros, int64_t p0, int64_t i0,
                     int64_t m, int64_t sl) {
  const int64_t taps = g.r * g.s, k0 = sl * kL, ci0 = k0 / g.cg * g.cg;
  int64_t hb[kQB], wb[kQB];  // each pixel's first input row and column
  for (int j = 0; j < kQB; ++j) {
    const int64_t i = i0 + j < m ? i0 + j : i0;
    hb[j] = (p0 + i / g.q) * g.su - g.pu, wb[j] = (i % g.q) * g.sv - g.pv;
  }
  v16 acc[MS][kQB];
  for (auto& row : acc)
    for (auto& a : row) a = v16{};
  for (int64_t r = 0; r < g.r; ++r)
    for (int64_t s = 0; s < g.s; ++s) {
      const float* px[kQB];
      for (int j = 0; j < kQB; ++j) {
        const int64_t h = hb[j] + r * g.du, w = wb[j] + s * g.dv;
        px[j] = h >= 0 && h < g.h && w >= 0 && w < g.w ? v.x + ((h - v.h0) * g.w + w) * v.xc + (ci0 - v.c0) : zeros;
      }
      const int64_t tap = r * g.s + s, slice_stride = taps * g.cg * kL;
      const float* wt = wp + (sl * taps + tap) * g.cg * kL;
      for (int64_t c = 0; c < g.cg; ++c) {
        v16 wv[MS];
        for (int e = 0; e < MS; ++e) load16(wv[e], wt + e * slice_stride + c * kL);
        for (int j = 0; j < kQB; ++j) {
          const float xv = px[j][c];
          for (int e = 0; e < MS; ++e) acc[e][j] += xv * wv[e];
        }
      }
    }
  for (int e = 0; e < MS; ++e)
    for (int j = 0; j < kQB && i0 + j < m; ++j)
      store16(v.sums + (i0 + j) * v.sk + (k0 + e * kL - v.k0), acc[e][j]);
}

// The broadcast path for 3-tap rows read at stride 1 (ResNeXt's 3x3 layers of 16 and 32 channels a group):
// the sums of output pixels q0 .. q0 + B - 1 of row p, slices sl .. sl + MS - 1 (of one group), into out[q *
// sk + k - k0] (out: row p's first pixel in the unit's sums). An input value broadcast feeds the up to three
// output pixels of the row whose taps read it (acc[t - s] with tap s's filter vector), where the flat list
// fed it to one: one broadcast load for 3 multiply-adds instead of one for each, and the three taps' filter
// vectors loaded once a channel for the B pixels. B + 2 input columns a filter row, the padding read as zeros.
template <int MS, int B>
void row_block_sums(const Geometry& g, const View& v, const float* wp, const float* zeros, int64_t p, int64_t q0,
                    int64_t sl, float* out) {
  constexpr int S = 3, T = B + S - 1;
  const int64_t taps = g.r * S, k0 = sl * kL, ci0 = k0 / g.cg * g.cg, slice_stride = taps * g.cg * kL;
  v16 acc[MS][B];
  for (auto& row : acc)
    for (auto& a : row) a = v16{};
  for (int64_t r = 0; r < g.r; ++r) {
    const int64_t h = p * g.su - g.pu + r * g.du;
    if (h < 0 || h >= g.h) continue;
    const float* xr = v.x + (h - v.h0) * g.w * v.xc + (ci0 - v.c0);
    const float* px[T];  // input columns q0 - pv .. q0 - pv + B + 1 (zeros in the padding)
    for (int t = 0; t < T; ++t) {
      const int64_t w = q0 - g.pv + t;
      px[t] = w >= 0 && w < g.w ? xr + w * v.xc : zeros;
    }
    const float* wt = wp + (sl * taps + r * S) * g.cg * kL;  // tap (r, 0); tap (r, s) g.cg * kL floats on
    for (int64_t c = 0; c < g.cg; ++c) {
      v16 wv[MS][S];
      for (int e = 0; e < MS; ++e)
        for (int s = 0; s < S; ++s) load16(wv[e][s], wt + e * slice_stride + s * g.cg * kL + c * kL);
      for (int t = 0; t < T; ++t) {
        const float xv = px[t][c];
        for (int s = 0; s < S; ++s) {
          const int j = t - s;
          if (j >= 0 && j < B)
            for (int e = 0; e < MS; ++e) acc[e][j] += xv * wv[e][s];
        }
      }
    }
  }
  for (int e = 0; e < MS; ++e)
    for (int j = 0; j < B; ++j) store16(out + (q0 + j) * v.sk + (k0 + e * kL - v.k0), acc[e][j]);
}

// One input row's taps for output rows p (A: filter row wa) and p + 1 (N: filter row wn) at once, stride 1
// down the rows: acc[0] and acc[1], B pixels each, from the row's B + 2 columns px.
template <int B, bool A, bool N>
[[gnu::always_inline]] inline void two_row_taps(v16 (&acc)[2][B], const float* const (&px)[B + 2], const float* wa,
                                                const float* wn, int64_t cg) {
  constexpr int S = 3;
  for (int64_t c = 0; c < cg; ++c) {
    v16 va[S], vn[S];
    for (int s = 0; s < S; ++s) {
      if constexpr (A) load16(va[s], wa + s * cg * kL + c * kL);
      if constexpr (N) load16(vn[s], wn + s * cg * kL + c * kL);
    }
    for (int t = 0; t < B + 2; ++t) {
      const float xv = px[t][c];
      for (int s = 0; s < S; ++s) {
        const int j = t - s;
        if (j < 0 || j >= B) continue;
        if constexpr (A) acc[0][j] += xv * va[s];
        if constexpr (N) acc[1][j] += xv * vn[s];
      }
    }
  }
}

// row_block_sums<1, B> for output rows p and p + 1 together where the rows are read at stride 1 without
// dilation (ResNeXt's 16 channels a group, one slice a group): each input row's broadcast values feed both
// rows' sums, 2 x B of them in registers where one row had B (8 sums a row left the multiply-adds waiting on
// their own chains: 3 dependent ones a sum per channel). out: row p's first pixel; row p + 1's follows q on.
template <int B>
void two_row_block_sums(const Geometry& g, const View& v, const float* wp, const float* zeros, int64_t p,
                        int64_t q0, int64_t sl, float* out) {
  constexpr int S = 3, T = B + S - 1;
  const int64_t taps = g.r * S, k0 = sl * kL, ci0 = k0 / g.cg * g.cg;
  v16 acc[2][B];
  for (auto& row : acc)
    for (auto& a : row) a = v16{};
  for (int64_t i = 0; i <= g.r; ++i) {  // input row p - pu + i: filter row i of row p, i - 1 of row p + 1
    const int64_t h = p - g.pu + i;
    if (h < 0 || h >= g.h) continue;
    const float* xr = v.x + (h - v.h0) * g.w * v.xc + (ci0 - v.c0);
    const float* px[T];
    for (int t = 0; t < T; ++t) {
      const int64_t w = q0 - g.pv + t;
      px[t] = w >= 0 && w < g.w ? xr + w * v.xc : zeros;
    }
    const float* wa = wp + (sl * taps + i * S) * g.cg * kL;
    const float* wn = wa - S * g.cg * kL;
    if (i == 0)
      two_row_taps<B, true, false>(acc, px, wa, wn, g.cg);
    else if (i == g.r)
      two_row_taps<B, false, true>(acc, px, wa, wn, g.cg);
    else
      two_row_taps<B, true, true>(acc, px, wa, wn, g.cg);
  }
  for (int e = 0; e < 2; ++e)
    for (int j = 0; j < B; ++j) store16(out + (e * g.q + q0 + j) * v.sk + (k0 - v.k0), acc[e][j]);
}

// Row p's pixels (rows p and p + 1 where two) in as few blocks of at most 8 pixels as hold them, of equal
// sizes (14 pixels two blocks of 7, 20 three of 6, 7 and 7), slices sl .. sl + MS - 1: by row_block_sums<MS>,
// or two_row_block_sums (MS = 1). A block of B pixels keeps B x MS sums (two rows: 2 x B) in registers with
// the 3 x MS filter vectors (two rows: 6), at most 23 of the 32 AVX-512 registers.
template <int MS, size_t... B>
constexpr auto row_block_table(std::index_sequence<B...>) {
  return std::array{&row_block_sums<MS, int(B) + 1>...};
}
template <size_t... B>
constexpr auto two_row_block_table(std::index_sequence<B...>) {
  return std::array{&two_row_block_sums<int(B) + 1>...};
}
template <int MS>
void row_sums(const Geometry& g, const View& v, const float* wp, const float* zeros, int64_t p, int64_t sl,
              float* out, bool two) {
  static constexpr auto one_row = row_block_table<MS>(std::make_index_sequence<kQB>{});
  static constexpr auto two_rows = two_row_block_table(std::make_index_sequence<kQB>{});
  const int64_t blocks = (g.q + kQB - 1) / kQB;
  for (int64_t b = 0, q0 = 0; b < blocks; ++b) {
    const int64_t q1 = (b + 1) * g.q / blocks;
    (two ? two_rows : one_row)[q1 - q0 - 1](g, v, wp, zeros, p, q0, sl, out);
    q0 = q1;
  }
}

// The sums of output rows [p0, p1) and slices [sl0, sl1) into the unit's sums, a slice at a time (its
// filters stay in L1 over the rows). The shuffle path: per row, blocks of 8 pixels, the rest in blocks of
// 4, 2 and 1 (a last block of 8 on a row of 10 pixels, ResNeXt-50's 512-channel layers at 160x160, computed
// 6 pixels of zeros: 16 for 10). The broadcast path: the unit's pixels as one list in blocks of 8.
template <int CG>
void unit_sums(const Geometry& g, const View& v, const float* wp, const float* zeros, int64_t p0, int64_t p1,
               int64_t sl0, int64_t sl1) {
  if constexpr (CG == 0) {
    const int64_t m = (p1 - p0) * g.q;
    const bool rows = g.s == 3 && g.sv == 1 && g.dv == 1;  // row_block_sums' case
    for (int64_t sl = sl0; sl < sl1;) {
      const bool pair = sl + 1 < sl1 && (sl * kL) / g.cg == ((sl + 1) * kL) / g.cg;  // two slices of one group
      for (int64_t p = p0; rows && p < p1;) {
        float* out = v.sums + (p - p0) * g.q * v.sk;
        const bool two = !pair && g.su == 1 && g.du == 1 && p + 1 < p1;  // two_row_block_sums' case
        if (pair)
          row_sums<2>(g, v, wp, zeros, p, sl, out, false);
        else
          row_sums<1>(g, v, wp, zeros, p, sl, out, two);
        p += two ? 2 : 1;
      }
      for (int64_t i0 = 0; !rows && i0 < m; i0 += kQB) {
        if (pair)
          flat_block_sums<2>(g, v, wp, zeros, p0, i0, m, sl);
        else
          flat_block_sums<1>(g, v, wp, zeros, p0, i0, m, sl);
      }
      sl += pair ? 2 : 1;
    }
    return;
  }
  for (int64_t sl = sl0; sl < sl1; ++sl)
    for (int64_t p = p0; p < p1; ++p) {
      float* out = v.sums + (p - p0) * g.q * v.sk;
      int64_t q0 = 0;
      for (; q0 + kQB <= g.q; q0 += kQB) block_sums<CG, kQB>(g, v, wp, zeros, p, sl, q0, out);
      if (q0 + 4 <= g.q) block_sums<CG, 4>(g, v, wp, zeros, p, sl, q0, out), q0 += 4;
      if (q0 + 2 <= g.q) block_sums<CG, 2>(g, v, wp, zeros, p, sl, q0, out), q0 += 2;
      if (q0 < g.q) block_sums<CG, 1>(g, v, wp, zeros, p, sl, q0, out);
    }
}

class CpuGrouped final : public Algorithm {
 public:
  std::string name() const override { return "cpu_grouped"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    return "grouped conv with K = C and 2-8 or a multiple of 16 channels a group: 16 output channels of one or "
           "several groups a vector (a shuffle spreads each group's inputs over its lanes), 8 pixels x all taps "
           "in registers; OpenMP over units of rows x channel slices; f16/bf16 and NCHW staged a unit's rows at "
           "a time as NHWC floats";
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (cfg.device != Device::cpu) return Support::no("runs on the CPU only.");
    if (cfg.math == MathMode::tf32) return Support::no("the CPU has no tf32 mode; ask for strict f32.");
    if (Status s = p.validate(); !s.ok()) return Support::no(s.message);
    if (p.groups < 2) return Support::no("it computes grouped convolutions only (groups > 1).");
    const int64_t cg = p.c_per_group();
    if (cg < 2) return Support::no("one input channel a group is a depthwise layer (cpu_depthwise takes it).");
    if (p.k_per_group() != cg)
      return Support::no("it needs as many output as input channels a group (K = C), as ResNeXt's layers have.");
    if (!(cg == 2 || cg == 4 || cg == 8 || cg % kL == 0))
      return Support::no("it takes 2, 4, 8 or a multiple of 16 channels a group (whole groups in a 16-lane vector).");
    return Support::yes();
  }
  // Chosen for every layer it takes but bfloat16 NHWC ones of 64 or more channels a group where the CPU has a
  // bfloat16 dot product. Measured (2-vCPU AMD EPYC, batch 1, against cpu_im2col_gemm's GEMM a group in the
  // same process, OpenBLAS on its AVX-512 kernels; docs/perf.md 2026-12-05): 3-8x faster at 4 and 8 channels
  // a group (ResNeXt-50 at 160x160), 1.2x at 16 in NHWC, 3-5x at 16 and 32 in NCHW, where the GEMM needs a
  // column matrix; at 32 in NHWC the two are within 20% either way from run to run (1024@5: 0.055-0.064 ms
  // against 0.051-0.076); at 64 channels a group the bf16 GEMM a group (gemm_bf16, on the dot product) is
  // wider and faster: 0.118 against 0.143 ms (256@14 g4).
  Support heuristic_choice(const Conv2dProblem& p, const ConvConfig& cfg, const Operands&) const override {
    if (cfg.layout == Layout::nhwc && cfg.dtype == DType::bf16 && p.c_per_group() >= 64 && cpu_bf16_native())
      return Support::no("bfloat16 NHWC with 64 or more channels a group: cpu_im2col_gemm's GEMM a group on the "
                         "CPU's bfloat16 dot product measured faster.");
    return Support::yes();
  }
  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!can_implement(p, cfg)) return 0;
    return sizeof(float) * size_t((p.k + kL - 1) / kL * kL * p.r * p.s * p.c_per_group());  // the packed filters
  }
  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok) throw Error(StatusCode::unsupported, "cpu_grouped: " + ok.reason);
    const size_t need = workspace_bytes(pb, call.config);
    if (call.workspace == nullptr || call.workspace_bytes < need)
      throw Error(StatusCode::invalid_tensor, "cpu_grouped needs " + std::to_string(need) +
                                                  " bytes of workspace but was given " +
                                                  std::to_string(call.workspace_bytes) + ".");
    if (pb.output_elems() == 0) return;
    switch (pb.c_per_group()) {
      case 2: return run_with<2>(call);
      case 4: return run_with<4>(call);
      case 8: return run_with<8>(call);
      default: return run_with<0>(call);
    }
  }

 private:
  // Whether a unit stages its input (NCHW, 16-bit, or C off the 16-channel slices: the last slice reads 16
  // channels, those past C from the staged copy's zeros) or reads it in place (f32 NHWC).
  static bool staged(const ConvConfig& cfg, const Conv2dProblem& p) {
    return cfg.layout == Layout::nchw || cfg.dtype != DType::f32 || p.c % kL != 0;
  }
  static int64_t slices_of(const Geometry& g) { return (g.k + kL - 1) / kL; }

  // The filters packed: wp[slice][tap][c][lane] = w[k = slice * 16 + lane][tap][c] (KCRS: w[k][c][tap]);
  // called inside the parallel region (work-shared over the slices). A slice's 16 filters are 16 rows of
  // Cg * R * S values (index j = c * taps + tap in KCRS, tap * Cg + c in KRSC), read 16 columns at a time and
  // transposed in registers into 16 vectors of the 16 lanes (a scalar copy a value, with a dtype test each,
  // was half of the call at 1024 channels of 32 a group); the last columns one value at a time.
  template <DType D>
  static void pack_filters(const Geometry& g, const void* wei, bool nchw, float* wp) {
    const int64_t taps = g.r * g.s, len = g.cg * taps;
    auto slot = [&](int64_t j) { return nchw ? (j % taps) * g.cg + j / taps : j; };  // j -> tap * Cg + c
#pragma omp for schedule(static)
    for (int64_t sl = 0; sl < slices_of(g); ++sl) {
      float* out = wp + sl * len * kL;
      const int64_t base = sl * kL * len;  // filter sl * 16's first value
      const int64_t lanes = std::min<int64_t>(kL, g.k - sl * kL);  // the last slice's filters past K: zeros
      int64_t j0 = 0;
      for (; lanes == kL && j0 + kL <= len; j0 += kL) {
        v16 r[kL];
        load_rows16<D>(r, wei, base + j0, len);
        transpose16(r);
        for (int j = 0; j < kL; ++j) store16(out + slot(j0 + j) * kL, r[j]);
      }
      for (int64_t j = j0; j < len; ++j)
        for (int l = 0; l < kL; ++l) out[slot(j) * kL + l] = l < lanes ? load_as_float(wei, D, base + l * len + j) : 0.0f;
    }
  }

  // Input rows [h0, h1) and channels [c0, c1) of image n as NHWC floats into xb[h - h0][w][c - c0] (NCHW:
  // from src[n][c][h][w]), channels from C on as zeros. c0 and c1 are multiples of 16.
  template <DType D>
  static void stage_rows(const Geometry& g, const void* src, bool nchw, int64_t n, int64_t h0, int64_t h1,
                         int64_t c0, int64_t c1, float* xb) {
    const int64_t xc = c1 - c0;
    for (int64_t h = h0; h < h1; ++h) {
      float* o = xb + (h - h0) * g.w * xc;
      if (!nchw) {
        const int64_t real = std::min(c1, g.c) - c0;
        for (int64_t w = 0; w < g.w; ++w) {
          const int64_t base = ((n * g.h + h) * g.w + w) * g.c + c0;
          for (int64_t i = 0; i < real; ++i) o[w * xc + i] = load_as_float(src, D, base + i);
          for (int64_t i = real; i < xc; ++i) o[w * xc + i] = 0.0f;
        }
        continue;
      }
      // 16 channels x 16 columns at a time, transposed in registers: 16 loads of a channel's 16 columns, 16
      // stores of a pixel's 16 channels; the row's last W % 16 columns one value at a time
      for (int64_t cb = c0; cb < c1; cb += kL) {
        const int64_t base = ((n * g.c + cb) * g.h + h) * g.w, plane = g.h * g.w;  // channel cb's row h
        float* oc = o + (cb - c0);
        const int64_t real = std::min<int64_t>(kL, g.c - cb);  // the last block's channels past C: zeros
        int64_t w0 = 0;
        for (; real == kL && w0 + kL <= g.w; w0 += kL) {
          v16 r[kL];
          load_rows16<D>(r, src, base + w0, plane);
          transpose16(r);
          for (int j = 0; j < kL; ++j) store16(oc + (w0 + j) * xc, r[j]);
        }
        for (int64_t w = w0; w < g.w; ++w)
          for (int i = 0; i < kL; ++i) oc[w * xc + i] = i < real ? load_as_float(src, D, base + i * plane + w) : 0.0f;
      }
    }
  }

  // The input rows output rows [p0, p1) read (those inside the image): [first, last).
  static std::pair<int64_t, int64_t> rows_read(const Geometry& g, int64_t p0, int64_t p1) {
    const int64_t first = std::max<int64_t>(0, p0 * g.su - g.pu);
    const int64_t last = std::min<int64_t>(g.h, (p1 - 1) * g.su - g.pu + (g.r - 1) * g.du + 1);
    return {first, std::max(first, last)};
  }

  // The most input rows a unit of rb output rows reads.
  static int64_t band_height(const Geometry& g, int64_t rb) {
    return std::min(g.h, (rb - 1) * g.su + (g.r - 1) * g.du + 1);
  }

  // The input channels slices [sl0, sl1) read: [first, last), multiples of 16.
  static std::pair<int64_t, int64_t> channels_read(const Geometry& g, bool broadcast, int64_t sl0, int64_t sl1) {
    if (!broadcast) return {sl0 * kL, sl1 * kL};
    return {sl0 * kL / g.cg * g.cg, ((sl1 * kL - 1) / g.cg + 1) * g.cg};
  }

  // A unit: rb output rows x sb slices of one image, its rows' sums a slice at a time.
  //   The shuffle path (2-8 channels a group): every slice; one row where the input is read in place (f32
  //   NHWC); where a unit first stages the input rows it reads (its band, halo included, which neighbouring
  //   units stage again), several rows: the count whose busiest thread has the fewest output plus staged
  //   pixels, up to 128 output pixels a unit (the larger on a tie). Taller units stage less twice, and
  //   NCHW's epilogue runs (a channel's pixels of the unit) are longer.
  //   The broadcast path (16 or more channels a group: 16-channel slices of one group, each with Cg * R * S
  //   filter vectors, 18-36 KB at 3x3): the rows of about 256 output pixels (ResNeXt's 14x14 and smaller
  //   images whole), so that a slice's filters are read from memory once for them, not once a row; the
  //   slices in blocks of at least 4, as few as leave 4 units a thread.
  struct Units {
    int64_t rb = 1, sb = 1;
  };
  static Units plan_units(const Geometry& g, bool staging, bool broadcast, int threads) {
    const int64_t slices = slices_of(g);
    Units u;
    if (broadcast) {
      u.rb = std::max<int64_t>(1, std::min<int64_t>(g.p, 256 / std::max<int64_t>(1, g.q)));
      const int64_t row_units = g.n * ((g.p + u.rb - 1) / u.rb);
      u.sb = std::clamp<int64_t>(slices * row_units / (4 * int64_t(threads)), std::min<int64_t>(4, slices), slices);
      return u;
    }
    u.sb = slices;
    if (!staging) return u;
    const int64_t most = std::max<int64_t>(1, std::min<int64_t>(g.p, 128 / std::max<int64_t>(1, g.q)));
    int64_t best_cost = INT64_MAX;
    for (int64_t rb = 1; rb <= most; ++rb) {
      const int64_t units = g.n * ((g.p + rb - 1) / rb), per_thread = (units + threads - 1) / threads;
      const int64_t cost = per_thread * (rb * g.q + band_height(g, rb) * g.w);
      if (cost <= best_cost) best_cost = cost, u.rb = rb;
    }
    return u;
  }

  static float* scratch(std::vector<float>& v, size_t floats) {
    if (v.size() < floats) v.resize(floats);
    return v.data();
  }

  template <int CG>
  void run_with(const ConvCall& call) const {
    const Conv2dProblem& pb = call.problem;
    const Geometry g(pb);
    const DType dt = call.config.dtype;
    const bool nchw = call.config.layout == Layout::nchw, staging = staged(call.config, pb), broadcast = CG == 0;
    const Epilogue& e = call.epilogue;
    const size_t es = dtype_size(dt);
    float* wp = static_cast<float*>(call.workspace);
    const int64_t slices = slices_of(g);
    const Units u = plan_units(g, staging, broadcast, omp_get_max_threads());
    const int64_t row_blocks = (g.p + u.rb - 1) / u.rb, slice_blocks = (slices + u.sb - 1) / u.sb;
    // the most input channels a slice block reads
    int64_t most_channels = 0;
    for (int64_t b = 0; b < slice_blocks; ++b) {
      const std::pair<int64_t, int64_t> c = channels_read(g, broadcast, b * u.sb, std::min(slices, (b + 1) * u.sb));
      most_channels = std::max(most_channels, c.second - c.first);
    }
#pragma omp parallel
    {
      switch (dt) {
        case DType::f32: pack_filters<DType::f32>(g, call.wei.data, nchw, wp); break;
        case DType::f16: pack_filters<DType::f16>(g, call.wei.data, nchw, wp); break;
        case DType::bf16: pack_filters<DType::bf16>(g, call.wei.data, nchw, wp); break;
      }
      // (the implicit barrier: the filters are whole before any unit starts)
      // A thread's buffers, kept from call to call (a band of 100-300 KB allocated a call was a fresh mapping,
      // page faults included, each time): the unit's input band, its sums [pixel][channel of the unit], and
      // for NCHW the sums transposed [channel][pixel].
      static thread_local std::vector<float> band_v, sums_v, tr_v;
      const int64_t unit_floats = u.rb * g.q * u.sb * kL;
      float* band = staging ? scratch(band_v, size_t(band_height(g, u.rb) * g.w * most_channels)) : nullptr;
      float* sums = scratch(sums_v, size_t(unit_floats));
      float* tr = nchw ? scratch(tr_v, size_t(unit_floats)) : nullptr;
      std::vector<float> zeros(size_t(std::max<int64_t>(kL, g.cg)), 0.0f);
      auto at = [es](const void* base, int64_t i) { return static_cast<const char*>(base) + size_t(i) * es; };
#pragma omp for collapse(3) schedule(static)
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t rbi = 0; rbi < row_blocks; ++rbi)
          for (int64_t sbi = 0; sbi < slice_blocks; ++sbi) {
            const int64_t p0 = rbi * u.rb, p1 = std::min(g.p, p0 + u.rb), m = (p1 - p0) * g.q;
            const int64_t sl0 = sbi * u.sb, sl1 = std::min(slices, sl0 + u.sb), k0 = sl0 * kL, kn = (sl1 - sl0) * kL;
            const int64_t kv = std::min(g.k, sl1 * kL) - k0;  // the unit's output channels (the last slice's
                                                              // lanes past K are computed, not stored)
            // unstaged: image n's row h is row n * H + h of the input
            View v{static_cast<const float*>(call.src.data), -n * g.h, g.c, 0, sums, kn, k0};
            if (staging) {  // the unit's input rows and channels as NHWC floats
              const std::pair<int64_t, int64_t> rows = rows_read(g, p0, p1);
              const std::pair<int64_t, int64_t> chans = channels_read(g, broadcast, sl0, sl1);
              switch (dt) {
                case DType::f32:
                  stage_rows<DType::f32>(g, call.src.data, nchw, n, rows.first, rows.second, chans.first, chans.second, band);
                  break;
                case DType::f16:
                  stage_rows<DType::f16>(g, call.src.data, nchw, n, rows.first, rows.second, chans.first, chans.second, band);
                  break;
                case DType::bf16:
                  stage_rows<DType::bf16>(g, call.src.data, nchw, n, rows.first, rows.second, chans.first, chans.second, band);
                  break;
              }
              v.x = band, v.h0 = rows.first, v.xc = chans.second - chans.first, v.c0 = chans.first;
            }
            unit_sums<CG>(g, v, wp, zeros.data(), p0, p1, sl0, sl1);
            if (!nchw) {  // the unit's pixels are consecutive in NHWC; its channels a run of each
              for (int64_t i = 0; i < m; ++i) {
                const int64_t o = ((n * g.p + p0) * g.q + i) * g.k + k0;
                epilogue_span(e, e.alpha, dt, sums + i * kn, const_cast<char*>(at(call.dst.data, o)), kv,
                              e.bias ? at(e.bias, k0) : nullptr, SpanBias::per_element,
                              e.residual ? at(e.residual, o) : nullptr);
              }
              continue;
            }
            // [pixel][channel] -> [channel][pixel], 16 x 16 at a time transposed in registers (kn % 16 == 0),
            // the last m % 16 pixels one value at a time
            int64_t i0 = 0;
            for (; i0 + kL <= m; i0 += kL)
              for (int64_t c = 0; c < kn; c += kL) {
                v16 r[kL];
                for (int j = 0; j < kL; ++j) load16(r[j], sums + (i0 + j) * kn + c);
                transpose16(r);
                for (int l = 0; l < kL; ++l) store16(tr + (c + l) * m + i0, r[l]);
              }
            for (int64_t i = i0; i < m; ++i)
              for (int64_t c = 0; c < kn; ++c) tr[c * m + i] = sums[i * kn + c];
            for (int64_t c = 0; c < kv; ++c) {  // channel k0 + c's pixels of rows [p0, p1): one run of its plane
              const int64_t o = ((n * g.k + k0 + c) * g.p + p0) * g.q;
              epilogue_span(e, e.alpha, dt, tr + c * m, const_cast<char*>(at(call.dst.data, o)), m,
                            e.bias ? at(e.bias, k0 + c) : nullptr, SpanBias::one,
                            e.residual ? at(e.residual, o) : nullptr);
            }
          }
    }
  }
};

}  // namespace

const Algorithm* make_cpu_grouped() {
  static CpuGrouped algo;
  return &algo;
}

}  // namespace convkit::detail
