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
//     output channels' filter values.
// Work mapping: OpenMP over (image, output row); per row, each 16-channel slice in blocks of 8 output pixels
// (the row's rest in blocks of 4, 2 and 1), one accumulator a pixel over every tap and channel; a pixel whose
// input column (or a row whose input row) falls in the padding reads a row of zeros. The row's sums ([Q][K] floats a thread) then go through the epilogue
// (epilogue_span.hpp) into the output: a pixel's K channels in NHWC, a channel's Q pixels in NCHW.
// Workspace: the filters packed [K/16 slices][R*S taps][Cg][16 lanes] as floats; for NCHW or 16-bit inputs
// also the input as NHWC floats (one pass a call). f32 sums over taps in (r, s, c) order: bit-equal to
// cpu_ref on small integers; f16/bf16 within the 16-bit bound (the output rounded once).
// Needs K = C (Cg = Kg), groups > 1, Cg of 2, 4, 8 (C % 16 == 0) or a multiple of 16.
// measured (2-vCPU Zen 4, batch 1, float32 NHWC, ms, oneDNN in brackets; docs/perf.md 2026-12-05): ResNeXt-50's
// 128@40 (4 channels a group) 0.113 (0.174), 256@40 stride 2 (8) 0.125 (0.148), 256@20 (8) 0.120 (0.080).
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/element.hpp"
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

// The sums of output pixels q0 .. q0 + NB - 1 of row (n, p) and slice sl into row[q * K + k]. x: NHWC floats;
// wp: the packed filters; zeros: at least max(16, Cg) zeros. CG: Cg for the shuffle path, 0 for the broadcast
// path (Cg % 16 == 0).
template <int CG, int NB>
void block_sums(const Geometry& g, const float* x, const float* wp, const float* zeros, int64_t n, int64_t p,
                int64_t sl, int64_t q0, float* row) {
  const int64_t taps = g.r * g.s, k0 = sl * kL;
  const int64_t ci0 = CG > 0 ? k0 : k0 / g.cg * g.cg;  // the first input channel the slice reads
  v16 acc[NB];
  for (auto& a : acc) a = v16{};
  for (int64_t r = 0; r < g.r; ++r) {
    const int64_t h = p * g.su - g.pu + r * g.du;
    if (h < 0 || h >= g.h) continue;
    const float* xr = x + (n * g.h + h) * g.w * g.c + ci0;
    for (int64_t s = 0; s < g.s; ++s) {
      const float* px[NB];  // each pixel's input channels for this tap (zeros in the padding)
      for (int j = 0; j < NB; ++j) {
        const int64_t w = (q0 + j) * g.sv - g.pv + s * g.dv;
        px[j] = w >= 0 && w < g.w ? xr + w * g.c : zeros;
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
  for (int j = 0; j < NB; ++j) store16(row + (q0 + j) * g.k + k0, acc[j]);
}

// The sums of output row (n, p) into row[q * K + k], every slice: blocks of 8 pixels, the rest in blocks of
// 4, 2 and 1 (a last block of 8 on a row of 10 pixels, ResNeXt-50's 512-channel layers at 160x160,
// computed 6 pixels of zeros: 16 for 10).
template <int CG>
void row_sums(const Geometry& g, const float* x, const float* wp, const float* zeros, int64_t n, int64_t p,
              float* row) {
  for (int64_t sl = 0; sl < g.k / kL; ++sl) {
    int64_t q0 = 0;
    for (; q0 + kQB <= g.q; q0 += kQB) block_sums<CG, kQB>(g, x, wp, zeros, n, p, sl, q0, row);
    if (q0 + 4 <= g.q) block_sums<CG, 4>(g, x, wp, zeros, n, p, sl, q0, row), q0 += 4;
    if (q0 + 2 <= g.q) block_sums<CG, 2>(g, x, wp, zeros, n, p, sl, q0, row), q0 += 2;
    if (q0 < g.q) block_sums<CG, 1>(g, x, wp, zeros, n, p, sl, q0, row);
  }
}

class CpuGrouped final : public Algorithm {
 public:
  std::string name() const override { return "cpu_grouped"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    return "grouped conv with K = C and 2-8 or a multiple of 16 channels a group: 16 output channels of one or "
           "several groups a vector (a shuffle spreads each group's inputs over its lanes), 8 pixels x all taps "
           "in registers; OpenMP over output rows; f16/bf16 and NCHW through an NHWC float copy";
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
    if (p.c % kL != 0) return Support::no("it needs C % 16 == 0 (16-channel slices of whole groups).");
    return Support::yes();
  }
  // Measured (2-vCPU Zen 4, f32 NHWC, batch 1, ResNeXt-50's grouped layers at 160x160, against oneDNN in the
  // same process; docs/perf.md 2026-12-05): 4 channels a group 0.122 ms (cpu_im2col_gemm 1.12, oneDNN 0.173),
  // 8 channels 0.135-0.144 (0.37-0.39; oneDNN 0.080-0.151); at 16 and 32 channels cpu_im2col_gemm's GEMM a
  // group is wide enough: 0.133 against 0.157 ms, 0.094 against 0.308.
  Support heuristic_choice(const Conv2dProblem& p, const ConvConfig&, const Operands&) const override {
    if (p.c_per_group() >= 16)
      return Support::no("with 16 or more channels a group cpu_im2col_gemm's GEMM a group measured faster.");
    return Support::yes();
  }
  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!can_implement(p, cfg)) return 0;
    size_t floats = size_t(p.k * p.r * p.s * p.c_per_group());  // the packed filters
    if (staged(cfg)) floats += size_t(p.input_elems());          // the input as NHWC floats
    return sizeof(float) * floats;
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
  static bool staged(const ConvConfig& cfg) { return cfg.layout == Layout::nchw || cfg.dtype != DType::f32; }

  // xs[n][h][w][c] = src as float (NCHW: src[n][c][h][w]); called inside the parallel region (work-shared).
  template <DType D>
  static void stage(const Geometry& g, const void* src, bool nchw, float* xs) {
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t h = 0; h < g.h; ++h) {
        float* o = xs + (n * g.h + h) * g.w * g.c;
        if (!nchw) {
          const int64_t base = (n * g.h + h) * g.w * g.c;
          for (int64_t i = 0; i < g.w * g.c; ++i) o[i] = load_as_float(src, D, base + i);
          continue;
        }
        // 16 channels x 16 columns at a time: the 16 pixels' 64-byte runs being written stay in L1 (one
        // channel at a time across the row wrote each pixel's cache line once a channel)
        for (int64_t c0 = 0; c0 < g.c; c0 += 16)
          for (int64_t w0 = 0; w0 < g.w; w0 += 16)
            for (int64_t c = c0; c < std::min(g.c, c0 + 16); ++c) {
              const int64_t base = ((n * g.c + c) * g.h + h) * g.w;
              for (int64_t w = w0; w < std::min(g.w, w0 + 16); ++w) o[w * g.c + c] = load_as_float(src, D, base + w);
            }
      }
  }

  template <int CG>
  void run_with(const ConvCall& call) const {
    const Conv2dProblem& pb = call.problem;
    const Geometry g(pb);
    const DType dt = call.config.dtype;
    const bool nchw = call.config.layout == Layout::nchw;
    const Epilogue& e = call.epilogue;
    const size_t es = dtype_size(dt);
    float* wp = static_cast<float*>(call.workspace);
    float* xs = wp + g.k * g.r * g.s * g.cg;
    const float* x = staged(call.config) ? xs : static_cast<const float*>(call.src.data);
    const int64_t taps = g.r * g.s;
#pragma omp parallel
    {
      // the filters: wp[slice][tap][c][lane] = w[k = slice * 16 + lane][tap][c] (KCRS: w[k][c][tap])
#pragma omp for schedule(static)
      for (int64_t k = 0; k < g.k; ++k)
        for (int64_t t = 0; t < taps; ++t)
          for (int64_t c = 0; c < g.cg; ++c)
            wp[((k / kL * taps + t) * g.cg + c) * kL + k % kL] =
                load_as_float(call.wei.data, dt, nchw ? (k * g.cg + c) * taps + t : (k * taps + t) * g.cg + c);
      if (staged(call.config)) {  // the input as NHWC floats (the dtype and layout decided once a call)
        switch (dt) {
          case DType::f32: stage<DType::f32>(g, call.src.data, nchw, xs); break;
          case DType::f16: stage<DType::f16>(g, call.src.data, nchw, xs); break;
          case DType::bf16: stage<DType::bf16>(g, call.src.data, nchw, xs); break;
        }
      }
      // (the implicit barriers above: the filters and the input are whole before any row starts)
      // a unit: rb output rows of an image (NCHW: about 64 pixels, so that a channel's run through the
      // epilogue is longer than one row; NHWC: one row, its pixels' runs are K long)
      const int64_t rb = nchw ? std::max<int64_t>(1, std::min(g.p, 64 / std::max<int64_t>(1, g.q))) : 1;
      const int64_t blocks = (g.p + rb - 1) / rb;
      std::vector<float> row(size_t(rb * g.q * g.k)), tr(nchw ? row.size() : 0);
      std::vector<float> zeros(size_t(std::max<int64_t>(kL, g.cg)), 0.0f);
      auto at = [es](const void* base, int64_t i) { return static_cast<const char*>(base) + size_t(i) * es; };
#pragma omp for collapse(2) schedule(static)
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t pb = 0; pb < blocks; ++pb) {
          const int64_t p0 = pb * rb, p1 = std::min(g.p, p0 + rb), m = (p1 - p0) * g.q;
          for (int64_t p = p0; p < p1; ++p) row_sums<CG>(g, x, wp, zeros.data(), n, p, row.data() + (p - p0) * g.q * g.k);
          if (!nchw) {
            for (int64_t q = 0; q < g.q; ++q) {
              const int64_t o = ((n * g.p + p0) * g.q + q) * g.k;
              epilogue_span(e, e.alpha, dt, row.data() + q * g.k, const_cast<char*>(at(call.dst.data, o)), g.k, e.bias,
                            SpanBias::per_element, e.residual ? at(e.residual, o) : nullptr);
            }
            continue;
          }
          for (int64_t i = 0; i < m; ++i)  // [pixel][K] -> [K][pixel]
            for (int64_t k = 0; k < g.k; ++k) tr[size_t(k * m + i)] = row[size_t(i * g.k + k)];
          for (int64_t k = 0; k < g.k; ++k) {  // channel k's pixels of rows [p0, p1): one run of its NCHW plane
            const int64_t o = ((n * g.k + k) * g.p + p0) * g.q;
            epilogue_span(e, e.alpha, dt, tr.data() + k * m, const_cast<char*>(at(call.dst.data, o)), m,
                          e.bias ? at(e.bias, k) : nullptr, SpanBias::one, e.residual ? at(e.residual, o) : nullptr);
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
