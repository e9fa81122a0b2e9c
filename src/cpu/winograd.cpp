// cpu_winograd: Winograd's minimal filtering F(4x4, 3x3) (and F(2x2, 3x3)) on the CPU, the multiplies as
// OpenBLAS SGEMMs.
//
// What it adds over cpu_im2col_gemm: fewer multiplies. Each 4x4 block of outputs ("tile") of one channel
// comes from a 6x6 patch of the input: transformed, V = B^T d B, the filter transformed, U = G g G^T, their
// element-wise product summed over the input channels, M = sum_c U ⊙ V, and transformed back, Y = A^T M A.
// The sum over channels is 36 independent GEMMs, one per element (xi, nu) of the 6x6 transform:
//   M[xi,nu][tile][k] = sum_c V[xi,nu][tile][c] * U[xi,nu][k][c]      (SGEMM: tiles x K x C)
// 36 multiplies per 16 outputs instead of 144: 4x fewer than a direct or im2col convolution.
// B^T, G, A^T are Lavin and Gray's for the interpolation points 0, +-1, +-2 and infinity.
// Variants: "f4x4" (the above) and "f2x2" (F(2x2, 3x3): 4x4 patches, 16 GEMMs, 2.25x fewer multiplies, but
// transformed weights of 16 x K x C/g floats instead of 36 x and more tiles per GEMM); the own choice is f4x4
// on images at least kF4MinSide outputs a side, else f2x2 (measured: docs/kernels.md).
// Scope: f32, 3x3, stride 1, dilation 1, any padding, groups, NCHW or NHWC. Approximate by construction:
// the transforms' fractions and growth (entries up to 8 and 1/24) lose a few bits, rel L2 ~1e-6-1e-5 on
// Gaussian data against 1e-7 for the exact sum (bound 1e-4, docs/DESIGN); so it is never chosen by conv2d's
// heuristic or the autotuner (Algorithm::approximate()), only by name.
// Parallelism: the weights are transformed once per call (all threads); then each thread takes chunks of
// tiles in turn: it transforms their patches into its own V, runs the 36 single-threaded SGEMMs into its own
// M, and transforms M back into dst with the epilogue (alpha, bias, residual, activation), so every output
// element is read (residual) and written by one thread. Tiles past P or Q are computed and not stored.
// With fewer chunks than threads the threads share each chunk (transforms by tile, GEMMs by element).
// Workspace: U (36*K*C/groups floats; 16* for f2x2) plus, per OpenMP thread, V and M for one chunk of tiles.
// measured (2-vCPU Zen 4, batch 1, NHWC, vs oneDNN 2.6.3; docs/perf.md, 2026-11-30): 3x3 64@56 1.04-1.16x,
// 128@28 1.12-1.30x (F(4x4)); 256@14 0.71-0.81x (F(2x2)); 512@7 0.10-0.12x (the transformed weights, 38 MB
// with F(4x4), are rebuilt on every call for 4 tiles).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/overrides.hpp"
#include "common/activation.hpp"
#include "core/registry.hpp"
#include "cpu/openblas_common.hpp"
#include "cpu/sgemm.hpp"

#include <omp.h>

namespace convkit::detail {
namespace {

constexpr int kCB = 16;  // channels transformed together (one vector's worth of work per row)
constexpr int kF4MinSide = 20;  // the own choice: F(4x4) when P and Q are at least this, else F(2x2)

// F(M x M, 3x3): the patch side A = M + 2, E = A*A transform elements, and the three 1-D transforms, each over
// kCB channels at once (applied to the columns of a patch, then to its rows).
template <int M>
struct Wino;

template <>
struct Wino<4> {
  static constexpr int A = 6;
  // B^T (6x6): the input patch.
  static void bt(const float* d, int64_t sd, float* o, int64_t so) {
    for (int c = 0; c < kCB; ++c) {
      const float d0 = d[0 * sd + c], d1 = d[1 * sd + c], d2 = d[2 * sd + c], d3 = d[3 * sd + c],
                  d4 = d[4 * sd + c], d5 = d[5 * sd + c];
      o[0 * so + c] = 4.0f * d0 - 5.0f * d2 + d4;
      o[1 * so + c] = -4.0f * (d1 + d2) + d3 + d4;
      o[2 * so + c] = 4.0f * (d1 - d2) - d3 + d4;
      o[3 * so + c] = 2.0f * (d3 - d1) - d2 + d4;
      o[4 * so + c] = 2.0f * (d1 - d3) - d2 + d4;
      o[5 * so + c] = 4.0f * d1 - 5.0f * d3 + d5;
    }
  }
  // A^T (4x6): back from the transform domain.
  static void at(const float* m, int64_t sm, float* o, int64_t so, int n) {
    for (int c = 0; c < n; ++c) {
      const float m0 = m[0 * sm + c], m1 = m[1 * sm + c], m2 = m[2 * sm + c], m3 = m[3 * sm + c],
                  m4 = m[4 * sm + c], m5 = m[5 * sm + c];
      const float a = m1 + m2, b = m1 - m2, e = m3 + m4, f = m3 - m4;
      o[0 * so + c] = m0 + a + e;
      o[1 * so + c] = b + 2.0f * f;
      o[2 * so + c] = a + 4.0f * e;
      o[3 * so + c] = b + 8.0f * f + m5;
    }
  }
  // G (6x3): the filter.
  static void g(float g0, float g1, float g2, float* o, int64_t so) {
    o[0 * so] = 0.25f * g0;
    o[1 * so] = -(g0 + g1 + g2) / 6.0f;
    o[2 * so] = -(g0 - g1 + g2) / 6.0f;
    o[3 * so] = g0 / 24.0f + g1 / 12.0f + g2 / 6.0f;
    o[4 * so] = g0 / 24.0f - g1 / 12.0f + g2 / 6.0f;
    o[5 * so] = g2;
  }
};

template <>
struct Wino<2> {
  static constexpr int A = 4;
  static void bt(const float* d, int64_t sd, float* o, int64_t so) {  // B^T (4x4)
    for (int c = 0; c < kCB; ++c) {
      const float d0 = d[0 * sd + c], d1 = d[1 * sd + c], d2 = d[2 * sd + c], d3 = d[3 * sd + c];
      o[0 * so + c] = d0 - d2;
      o[1 * so + c] = d1 + d2;
      o[2 * so + c] = d2 - d1;
      o[3 * so + c] = d1 - d3;
    }
  }
  static void at(const float* m, int64_t sm, float* o, int64_t so, int n) {  // A^T (2x4)
    for (int c = 0; c < n; ++c) {
      const float m0 = m[0 * sm + c], m1 = m[1 * sm + c], m2 = m[2 * sm + c], m3 = m[3 * sm + c];
      o[0 * so + c] = m0 + m1 + m2;
      o[1 * so + c] = m1 - m2 - m3;
    }
  }
  static void g(float g0, float g1, float g2, float* o, int64_t so) {  // G (4x3)
    o[0 * so] = g0;
    o[1 * so] = 0.5f * (g0 + g1 + g2);
    o[2 * so] = 0.5f * (g0 - g1 + g2);
    o[3 * so] = g2;
  }
};

// The tiles of one chunk: as many as keep a thread's V and M (E * chunk * (C/g + K/g) floats) near 2 MiB,
// but 64 at least, so that each GEMM has 64 rows and the transformed weights U (E * K * C/g floats, read
// once per chunk) are not read again for every few tiles; 192 at most.
// NOTE: with a floor of 8, 3x3 512@7 at batch 8 (32 tiles, chunks of 14) read its 38 MB of U three times:
// 22 ms against oneDNN's 6.9.
template <int M>
int64_t chunk_tiles(const Conv2dProblem& p) {
  constexpr int E = Wino<M>::A * Wino<M>::A;
  const int64_t per_tile = int64_t(E) * (p.c_per_group() + p.k_per_group()) * int64_t(sizeof(float));
  return std::clamp<int64_t>((int64_t(2) << 20) / per_tile, 64, 192);
}

template <int M>
int64_t tiles_of(const Conv2dProblem& p) {
  return p.n * ((p.p() + M - 1) / M) * ((p.q() + M - 1) / M);
}

// The workspace: U, then V and M per OpenMP thread.
template <int M>
size_t workspace_of(const Conv2dProblem& p) {
  constexpr int E = Wino<M>::A * Wino<M>::A;
  const size_t u = size_t(E) * size_t(p.k) * size_t(p.c_per_group());
  const size_t per_thread = size_t(E) * size_t(chunk_tiles<M>(p)) * size_t(p.c_per_group() + p.k_per_group());
  return sizeof(float) * (u + size_t(omp_get_max_threads()) * per_thread);
}

// CONVKIT_WINOGRAD_VARIANT=f4x4 or f2x2 forces the own choice (for sweeps with tools that name no variant,
// as CONVKIT_WGMMA_VARIANT does for cuda_igemm_wgmma); other values are ignored.
bool own_choice_is_f4(const Conv2dProblem& p) {
  static const int forced = [] {
    const char* e = env_override("CONVKIT_WINOGRAD_VARIANT");
    const std::string v = e ? e : "";
    return v == "f4x4" ? 4 : v == "f2x2" ? 2 : 0;
  }();
  if (forced) return forced == 4;
  return p.p() >= kF4MinSide && p.q() >= kF4MinSide;
}

#ifdef CONVKIT_HAVE_OPENBLAS

// U[g][e][k][c] = (G w[g*Kg + k][c] G^T)[e], for every group; kCB channels at a time, so that each write is
// kCB consecutive floats of U.
// NOTE: the first version wrote one float per (k, c, e), 36 writes K*C/g floats apart: 58% of the time on
// 3x3 256@14 (7.7 ms a call) went there.
template <int MT>
void transform_weights(const Conv2dProblem& pb, const float* w, bool nchw, float* U) {
  constexpr int kA = Wino<MT>::A, kE = kA * kA;
  const int64_t Kg = pb.k_per_group(), Cg = pb.c_per_group();
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < pb.k; ++k) {
    alignas(64) float g[9 * kCB], t[kA * 3 * kCB], u[kE * kCB];
    const int64_t grp = k / Kg, kk = k - grp * Kg;
    for (int64_t c0 = 0; c0 < Cg; c0 += kCB) {
      const int cb = int(std::min<int64_t>(kCB, Cg - c0));
      for (int rs = 0; rs < 9; ++rs) {
        float* gg = g + rs * kCB;
        for (int c = 0; c < cb; ++c) gg[c] = nchw ? w[(k * Cg + c0 + c) * 9 + rs] : w[(k * 9 + rs) * Cg + c0 + c];
        std::fill(gg + cb, gg + kCB, 0.0f);
      }
      for (int c = 0; c < kCB; ++c) {
        for (int sc = 0; sc < 3; ++sc)  // columns: t = G g, t[i][sc]
          Wino<MT>::g(g[(0 * 3 + sc) * kCB + c], g[(1 * 3 + sc) * kCB + c], g[(2 * 3 + sc) * kCB + c], t + sc * kCB + c,
             3 * kCB);
        for (int i = 0; i < kA; ++i)  // rows: u = t G^T, u[i][j]
          Wino<MT>::g(t[(i * 3 + 0) * kCB + c], t[(i * 3 + 1) * kCB + c], t[(i * 3 + 2) * kCB + c], u + i * kA * kCB + c, kCB);
      }
      for (int e = 0; e < kE; ++e)
        std::memcpy(U + ((grp * kE + e) * Kg + kk) * Cg + c0, u + e * kCB, sizeof(float) * size_t(cb));
    }
  }
}

struct Geometry {
  int64_t P, Q, TH, TW, Cg, Kg;
};

// V[e][i][c] for tiles t0 + i, i in [i0, i1), of a chunk of nt tiles starting at t0, group g (zero outside
// the input).
template <int MT>
void transform_input(const Conv2dProblem& pb, const Geometry& q, const float* x, bool nchw, int64_t g, int64_t t0,
                     int64_t nt, int64_t i0, int64_t i1, float* V) {
  constexpr int kM = MT, kA = Wino<MT>::A, kE = kA * kA;
  alignas(64) float d[kE * kCB], r1[kE * kCB], v[kE * kCB];
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t t = t0 + i, n = t / (q.TH * q.TW), th = (t / q.TW) % q.TH, tw = t % q.TW;
    const int64_t h0 = th * kM - pb.pad_h, w0 = tw * kM - pb.pad_w;
    for (int64_t c0 = 0; c0 < q.Cg; c0 += kCB) {
      const int cb = int(std::min<int64_t>(kCB, q.Cg - c0));
      // Gather the A x A patch of cb channels: d[(a*A + b)*kCB + c].
      for (int a = 0; a < kA; ++a)
        for (int b = 0; b < kA; ++b) {
          float* dd = d + (a * kA + b) * kCB;
          const int64_t h = h0 + a, w = w0 + b;
          if (h < 0 || h >= pb.h || w < 0 || w >= pb.w) {
            std::fill(dd, dd + kCB, 0.0f);
            continue;
          }
          if (nchw) {
            const float* xs = x + ((n * pb.c + g * q.Cg + c0) * pb.h + h) * pb.w + w;
            for (int c = 0; c < cb; ++c) dd[c] = xs[int64_t(c) * pb.h * pb.w];
          } else {
            std::memcpy(dd, x + ((n * pb.h + h) * pb.w + w) * pb.c + g * q.Cg + c0, sizeof(float) * size_t(cb));
          }
          std::fill(dd + cb, dd + kCB, 0.0f);
        }
      for (int b = 0; b < kA; ++b) Wino<MT>::bt(d + b * kCB, kA * kCB, r1 + b * kCB, kA * kCB);    // columns
      for (int a = 0; a < kA; ++a) Wino<MT>::bt(r1 + a * kA * kCB, kCB, v + a * kA * kCB, kCB);  // rows
      for (int e = 0; e < kE; ++e) std::memcpy(V + (e * nt + i) * q.Cg + c0, v + e * kCB, sizeof(float) * size_t(cb));
    }
  }
}

// dst for tiles t0 + i, i in [i0, i1), of a chunk of nt tiles, from M[e][i][k] (group g), with the epilogue.
template <int MT>
void transform_output(const Conv2dProblem& pb, const Geometry& q, const float* M, bool nchw, int64_t g, int64_t t0,
                      int64_t nt, int64_t i0, int64_t i1, const Epilogue& e, float* y) {
  constexpr int kM = MT, kA = Wino<MT>::A, kE = kA * kA;
  const float* bias = static_cast<const float*>(e.bias);
  const float* res = static_cast<const float*>(e.residual);
  const bool has_bias = bias != nullptr, has_res = res != nullptr;
  const bool plain = !has_bias && !has_res && e.activation == Activation::none && e.alpha == 1.0f;
  alignas(64) float m[kE * kCB], r1[kM * kA * kCB], o[kM * kM * kCB];
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t t = t0 + i, n = t / (q.TH * q.TW), th = (t / q.TW) % q.TH, tw = t % q.TW;
    for (int64_t k0 = 0; k0 < q.Kg; k0 += kCB) {
      const int kb = int(std::min<int64_t>(kCB, q.Kg - k0));
      for (int x = 0; x < kE; ++x) std::memcpy(m + x * kCB, M + (x * nt + i) * q.Kg + k0, sizeof(float) * size_t(kb));
      for (int b = 0; b < kA; ++b) Wino<MT>::at(m + b * kCB, kA * kCB, r1 + b * kCB, kA * kCB, kb);   // columns: M x A
      for (int a = 0; a < kM; ++a) Wino<MT>::at(r1 + a * kA * kCB, kCB, o + a * kM * kCB, kCB, kb);  // rows: M x M
      for (int a = 0; a < kM; ++a) {
        const int64_t p = th * kM + a;
        if (p >= q.P) break;
        for (int b = 0; b < kM; ++b) {
          const int64_t qq = tw * kM + b;
          if (qq >= q.Q) break;
          const float* ov = o + (a * kM + b) * kCB;
          const int64_t k = g * q.Kg + k0;  // the first channel of the block; then one stride per channel
          const int64_t idx = nchw ? ((n * pb.k + k) * q.P + p) * q.Q + qq : ((n * q.P + p) * q.Q + qq) * pb.k + k;
          const int64_t step = nchw ? q.P * q.Q : 1;
          if (plain) {
            for (int c = 0; c < kb; ++c) y[idx + c * step] = ov[c];
            continue;
          }
          for (int c = 0; c < kb; ++c) {
            const int64_t i = idx + c * step;
            y[i] = apply_epilogue<float>(e.activation, e.alpha, e.beta, ov[c], has_bias, has_bias ? bias[k + c] : 0.0f,
                                         has_res, has_res ? res[i] : 0.0f);
          }
        }
      }
    }
  }
}

// One call with F(MT x MT, 3x3); the workspace is checked by the caller.
template <int MT>
void run_winograd(const ConvCall& call) {
  constexpr int kE = Wino<MT>::A * Wino<MT>::A;
  const Conv2dProblem& pb = call.problem;
  single_threaded_blas();
  const bool nchw = call.config.layout == Layout::nchw;
  const float* x = static_cast<const float*>(call.src.data);
  float* y = static_cast<float*>(call.dst.data);
  Geometry q{pb.p(), pb.q(), (pb.p() + MT - 1) / MT, (pb.q() + MT - 1) / MT, pb.c_per_group(), pb.k_per_group()};
  const int64_t T = tiles_of<MT>(pb), chunk = chunk_tiles<MT>(pb), chunks = (T + chunk - 1) / chunk;
  float* U = static_cast<float*>(call.workspace);
  float* scratch = U + int64_t(kE) * pb.k * q.Cg;
  const int64_t per_thread = int64_t(kE) * chunk * (q.Cg + q.Kg);
  transform_weights<MT>(pb, static_cast<const float*>(call.wei.data), nchw, U);
  // NOTE: with at least as many chunks as threads, each thread takes whole chunks (its V and M stay in its
  // cache from transform to GEMM to transform); with fewer (small images: 3x3 512@7 at batch 1 is 4 tiles),
  // the threads share each chunk: its tiles' transforms split by tile, its 36 GEMMs by element.
  // (The workspace check above was made with the same omp_get_max_threads(): every thread of a team has
  // its V and M.)
  const int threads = omp_get_max_threads();
  const bool whole_chunks = chunks >= threads;
  auto gemm = [&](const float* Ug, const float* V, float* M, int64_t nt, int e) {
    // M[e] (nt x Kg) = V[e] (nt x Cg) * U[e]^T (Cg x Kg)
    sgemm(false, true, int(nt), int(q.Kg), int(q.Cg), 1.0f, V + e * nt * q.Cg,
                int(q.Cg), Ug + e * q.Kg * q.Cg, int(q.Cg), 0.0f, M + e * nt * q.Kg, int(q.Kg));
  };
  for (int64_t g = 0; g < pb.groups; ++g) {
    const float* Ug = U + g * kE * q.Kg * q.Cg;
    if (whole_chunks) {
#pragma omp parallel
      {
        float* V = scratch + int64_t(omp_get_thread_num()) * per_thread;
        float* M = V + int64_t(kE) * chunk * q.Cg;
#pragma omp for schedule(dynamic, 1)
        for (int64_t ch = 0; ch < chunks; ++ch) {
          const int64_t t0 = ch * chunk, nt = std::min(chunk, T - t0);
          transform_input<MT>(pb, q, x, nchw, g, t0, nt, 0, nt, V);
          for (int e = 0; e < kE; ++e) gemm(Ug, V, M, nt, e);
          transform_output<MT>(pb, q, M, nchw, g, t0, nt, 0, nt, call.epilogue, y);
        }
      }
      continue;
    }
    float* V = scratch;
    float* M = V + int64_t(kE) * chunk * q.Cg;
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t t0 = ch * chunk, nt = std::min(chunk, T - t0);
#pragma omp parallel
      {
        const int64_t nth = omp_get_num_threads(), th = omp_get_thread_num();
        const int64_t i0 = nt * th / nth, i1 = nt * (th + 1) / nth;
        transform_input<MT>(pb, q, x, nchw, g, t0, nt, i0, i1, V);
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
        for (int e = 0; e < kE; ++e) gemm(Ug, V, M, nt, e);
        // (the implicit barrier of the omp for: every M[e] is complete)
        transform_output<MT>(pb, q, M, nchw, g, t0, nt, i0, i1, call.epilogue, y);
      }
    }
  }
}

#endif  // CONVKIT_HAVE_OPENBLAS

class CpuWinograd final : public Algorithm {
 public:
  std::string name() const override { return "cpu_winograd"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    return "Winograd F(4x4,3x3) or F(2x2,3x3): input/filter transforms, 36 (16) OpenBLAS SGEMMs over the channels, "
           "4x (2.25x) fewer multiplies; approximate (rel L2 <= 1e-4), run by name only";
  }
  double approximate_rel_l2() const override { return 1e-4; }  // the F(4,3) transforms' rounding
  Support available() const override { return openblas_available(); }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (Support ok = openblas_f32_request(p, cfg); !ok) return ok;
    if (p.r != 3 || p.s != 3) return Support::no("Winograd F(m x m, 3x3): 3x3 filters only.");
    if (p.stride_h != 1 || p.stride_w != 1) return Support::no("Winograd F(m x m, 3x3): stride 1 only.");
    if (p.dilation_h != 1 || p.dilation_w != 1) return Support::no("Winograd F(m x m, 3x3): dilation 1 only.");
    const int64_t int_max = 2147483647;
    if (p.c_per_group() > int_max || p.k_per_group() > int_max || tiles_of<2>(p) > int_max)
      return Support::no("a GEMM dimension exceeds the 32-bit int that the BLAS interface takes.");
    return Support::yes();
  }
  size_t workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    return variant_workspace_bytes(p, cfg, own_choice_is_f4(p) ? "f4x4" : "f2x2");
  }
  // The own choice first (see kF4MinSide).
  std::vector<std::string> variants(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (!can_implement(p, cfg)) return {};
    if (own_choice_is_f4(p)) return {"f4x4", "f2x2"};
    return {"f2x2", "f4x4"};
  }
  size_t variant_workspace_bytes(const Conv2dProblem& p, const ConvConfig& cfg, const std::string& v) const override {
    if (!can_implement(p, cfg)) return 0;
    return v == "f2x2" ? workspace_of<2>(p) : workspace_of<4>(p);
  }

  void run(const ConvCall& call) const override {
#ifndef CONVKIT_HAVE_OPENBLAS
    (void)call;
    throw Error(StatusCode::not_available, "cpu_winograd: " + available().reason);
#else
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok) throw Error(StatusCode::unsupported, "cpu_winograd: " + ok.reason);
    if (!call.variant.empty() && call.variant != "f4x4" && call.variant != "f2x2")
      throw Error(StatusCode::invalid_problem, "cpu_winograd has no variant '" + call.variant + "' (f4x4, f2x2).");
    const size_t need = call.variant.empty() ? workspace_bytes(pb, call.config)
                                             : variant_workspace_bytes(pb, call.config, call.variant);
    if (call.workspace == nullptr || call.workspace_bytes < need)
      throw Error(StatusCode::invalid_tensor, "cpu_winograd needs " + std::to_string(need) +
                                                  " bytes of workspace but was given " +
                                                  std::to_string(call.workspace_bytes) + ".");
    if (call.variant == "f2x2" || (call.variant.empty() && !own_choice_is_f4(pb)))
      run_winograd<2>(call);
    else
      run_winograd<4>(call);
#endif
  }
};

}  // namespace

const Algorithm* make_cpu_winograd() {
  static CpuWinograd algo;
  return &algo;
}

}  // namespace convkit::detail
