// cpu_direct: a blocked direct convolution for the CPU: no workspace, no GEMM library.
//
// What it adds over cpu_ref: register blocking. A micro-kernel keeps a tile of kQB output pixels (along one
// output row) x kKV*16 output channels in vector registers (28 accumulators for 14 x 32) and streams the
// reduction over (r, s, c): per step it loads kKV weight vectors and broadcasts one input value per pixel.
// The compiler turns the fixed-size loops into AVX-512 FMAs with broadcast memory operands (GCC vector
// extensions: no intrinsics, so it also builds for AVX2 machines).
// To make the inner loop branch-free and layout-free, each thread copies what a tile needs into two
// small on-stack buffers:
//   - the weights of its output-channel blocks for one chunk of input channels, as [kblock][r][s][c][32]
//     (zero beyond K/groups), reused by every pixel tile of the work item;
//   - an input "slab" for one output row tile: [r][c][cols] with the padding materialised as zeros, so
//     pixel j of filter column s is at a compile-time offset j*stride + s*dilation; reused by every
//     output-channel block. NCHW rows copy contiguously; NHWC is transposed on the way in.
// Input channels are processed in chunks that fit those buffers; partial sums go to dst, and the epilogue
// is fused: the first chunk writes alpha*acc + bias + beta*residual (reading a tile's residual elements
// before writing the same dst elements, so an aliased residual is fine), later chunks add alpha*acc, the
// last applies the activation to the whole tile at once (epilogue_span.hpp).
// Parallelism: OpenMP over work items (image, group, block of output channels, block of output rows),
// split by channels when the weights outweigh the input (late ResNet layers) and by rows otherwise.
// Measured 2026-11-29 on the 2-vCPU AMD EPYC (Zen 4, AVX-512), GCC 12 -O3 -march=native, batch-1
// ResNet-50 layers, ONE thread, best of 20 (the machine was heavily loaded): NHWC 64-94 GFLOP/s on the
// 56x56..14x14 layers (0.6-0.85x oneDNN's execute-only time), NCHW 40-77 GFLOP/s; the 7x7 layers only
// 9-40 GFLOP/s (half of each 14-pixel tile is idle when Q = 7, and packing the large weights is not
// amortised over so few pixels): cpu_im2col_gemm is the better path there. The heuristic's choice for
// float32 stems (3-4 input channels; docs/perf.md 2026-12-05, 2 threads, against oneDNN in the same process):
// 7x7 stride-2 3 -> 64 at 160x160 NCHW 0.458 ms (0.335), NHWC 0.340 (0.235); 3x3 stride-2 3 -> 32 at 224x224
// NCHW 0.139 (0.123), NHWC 0.113 (0.050).
#include <algorithm>
#include <cstring>

#include <omp.h>

#include "common/activation.hpp"
#include "cpu/epilogue_span.hpp"
#include "core/registry.hpp"

namespace convkit::detail {
namespace {

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));  // unaligned load/store

constexpr int kLanes = 16;
constexpr int kQB = 14;                  // output pixels per micro-tile
constexpr int64_t kWeightBuf = 32768;    // floats of packed weights per thread (128 KiB, stack)
constexpr int64_t kSlabBuf = 16384;      // floats of input slab per thread (64 KiB, stack)

int64_t slab_cols(const Conv2dProblem& p) { return (kQB - 1) * p.stride_w + (p.s - 1) * p.dilation_w + 1; }

// acc[j][v] = sum over r, s, c of slab[r][c][j*U + s*dw] * wp[r][s][c][v*16 .. v*16+15].
// U is the horizontal stride when it is 1 or 2 (compile-time offsets), 0 means "read `u` at run time".
template <int KV, int U>
void micro_kernel(const float* slab, int64_t cols, int64_t cb, int64_t R, int64_t S, int64_t dw, int64_t u,
                  const float* wp, float* out /* [kQB][KV*16] */) {
  constexpr int KB = KV * kLanes;
  const int64_t ustep = U ? U : u;
  v16 acc[kQB][KV];
  for (int j = 0; j < kQB; ++j)
    for (int v = 0; v < KV; ++v) acc[j][v] = v16{};
  for (int64_t r = 0; r < R; ++r)
    for (int64_t s = 0; s < S; ++s) {
      const float* xs = slab + r * cb * cols + s * dw;
      const float* ws = wp + (r * S + s) * cb * KB;
      for (int64_t c = 0; c < cb; ++c) {
        const float* x = xs + c * cols;
        v16 w[KV];
        for (int v = 0; v < KV; ++v) w[v] = *reinterpret_cast<const v16*>(ws + c * KB + v * kLanes);
#pragma GCC unroll 14
        for (int j = 0; j < kQB; ++j) {
          const float xv = x[j * ustep];
          for (int v = 0; v < KV; ++v) acc[j][v] += xv * w[v];
        }
      }
    }
  for (int j = 0; j < kQB; ++j)
    for (int v = 0; v < KV; ++v) *reinterpret_cast<v16u*>(out + j * KB + v * kLanes) = acc[j][v];
}

struct Plan {
  int64_t kv;          // 16-lane vectors per output-channel block (1 or 2)
  int64_t kb;          // output channels per block = kv*16
  int64_t nkb;         // blocks per group
  int64_t kgroups;     // work items along output channels (each a run of blocks)
  int64_t psplit;      // work items along output rows
  int64_t cb;          // input channels per chunk
};

Plan make_plan(const Conv2dProblem& p) {
  Plan pl{};
  const int64_t Kg = p.k_per_group(), Cg = p.c_per_group(), RS = p.r * p.s, T = omp_get_max_threads();
  pl.kv = Kg <= kLanes ? 1 : 2;
  pl.kb = pl.kv * kLanes;
  pl.nkb = (Kg + pl.kb - 1) / pl.kb;
  // Split the work so that every thread has some: by output channels when the weights are larger than
  // the input (each thread then packs only its share of the weights), by output rows otherwise.
  const int64_t outer = p.n * p.groups;
  int64_t want = outer >= 2 * T ? 1 : (2 * T + outer - 1) / outer;
  const bool by_k = Kg * Cg * RS > Cg * p.h * p.w;
  pl.kgroups = by_k ? std::min(pl.nkb, want) : 1;
  pl.psplit = by_k ? 1 : std::min(p.p(), want);
  // Each work item's weights chunk must fit the buffer: more kgroups if even 16 channels do not fit.
  const int64_t cb_min = std::min<int64_t>(Cg, 16);
  const int64_t blocks_per_item = (pl.nkb + pl.kgroups - 1) / pl.kgroups;
  const int64_t max_blocks = std::max<int64_t>(1, kWeightBuf / (RS * pl.kb * cb_min));
  if (blocks_per_item > max_blocks) pl.kgroups = (pl.nkb + max_blocks - 1) / max_blocks;
  const int64_t bpi = (pl.nkb + pl.kgroups - 1) / pl.kgroups;
  pl.cb = std::max<int64_t>(1, std::min({Cg, kWeightBuf / (RS * pl.kb * bpi), kSlabBuf / (p.r * slab_cols(p))}));
  return pl;
}

class CpuDirect final : public Algorithm {
 public:
  std::string name() const override { return "cpu_direct"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    return "blocked direct convolution: 14 pixels x 32 channels in registers, OpenMP, no workspace";
  }
  Support can_implement(const Conv2dProblem& p, const ConvConfig& cfg) const override {
    if (cfg.device != Device::cpu) return Support::no("runs on the CPU only.");
    if (cfg.dtype != DType::f32) return Support::no("computes in f32 only; f16/bf16 are not supported.");
    if (cfg.math == MathMode::tf32) return Support::no("the CPU has no tf32 mode; ask for strict f32.");
    if (Status s = p.validate(); !s.ok()) return Support::no(s.message);
    if (p.r * slab_cols(p) > kSlabBuf)
      return Support::no("the filter window (with stride and dilation) is too large for the on-stack input slab.");
    if (p.r * p.s * 2 * kLanes > kWeightBuf)
      return Support::no("the filter is too large for the on-stack weight buffer.");
    return Support::yes();
  }

  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    if (Support ok = can_implement(pb, call.config); !ok) throw Error(StatusCode::unsupported, "cpu_direct: " + ok.reason);
    const Plan pl = make_plan(pb);
    const int64_t G = pb.groups, items = pb.n * G * pl.kgroups * pl.psplit;
#pragma omp parallel for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      int64_t rest = it;
      const int64_t ps = rest % pl.psplit; rest /= pl.psplit;
      const int64_t kg = rest % pl.kgroups; rest /= pl.kgroups;
      const int64_t g = rest % G, n = rest / G;
      const int64_t bpi = (pl.nkb + pl.kgroups - 1) / pl.kgroups;
      const int64_t kb0 = std::min(pl.nkb, kg * bpi), kb1 = std::min(pl.nkb, kb0 + bpi);
      const int64_t P = pb.p(), rows = (P + pl.psplit - 1) / pl.psplit;
      const int64_t p0 = std::min(P, ps * rows), p1 = std::min(P, p0 + rows);
      if (kb0 < kb1 && p0 < p1) {
        if (pl.kv == 1) item<1>(call, pl, n, g, kb0, kb1, p0, p1);
        else item<2>(call, pl, n, g, kb0, kb1, p0, p1);
      }
    }
  }

 private:
  template <int KV>
  static void item(const ConvCall& call, const Plan& pl, int64_t n, int64_t g, int64_t kb0, int64_t kb1, int64_t p0,
                   int64_t p1) {
    constexpr int KB = KV * kLanes;
    const Conv2dProblem& pb = call.problem;
    const Epilogue& e = call.epilogue;
    const bool nhwc = call.config.layout == Layout::nhwc;
    const float* x = static_cast<const float*>(call.src.data);
    const float* wt = static_cast<const float*>(call.wei.data);
    float* y = static_cast<float*>(call.dst.data);
    const float* bias = static_cast<const float*>(e.bias);
    const float* res = static_cast<const float*>(e.residual);
    const int64_t P = pb.p(), Q = pb.q(), Cg = pb.c_per_group(), Kg = pb.k_per_group();
    const int64_t R = pb.r, S = pb.s, RS = R * S, cols = slab_cols(pb);

    alignas(64) float wp[kWeightBuf];
    alignas(64) float slab[kSlabBuf];
    alignas(64) float tile[kQB * KB];

    for (int64_t c0 = 0; c0 < Cg; c0 += pl.cb) {
      const int64_t cb = std::min(pl.cb, Cg - c0);
      const bool first = c0 == 0, last = c0 + cb == Cg;
      // Pack weights: wp[kb][r][s][c][KB] (zero past Kg); reads run along the source's contiguous axis.
      for (int64_t kb = kb0; kb < kb1; ++kb) {
        float* dstw = wp + (kb - kb0) * RS * cb * KB;
        for (int64_t kk = 0; kk < KB; ++kk) {
          const int64_t k = kb * KB + kk;
          if (k >= Kg) {
            for (int64_t i = 0; i < RS * cb; ++i) dstw[i * KB + kk] = 0.0f;
            continue;
          }
          const int64_t ka = g * Kg + k;
          if (nhwc) {  // KRSC: [rs][c] contiguous
            const float* src = wt + ka * RS * Cg + c0;
            for (int64_t rs = 0; rs < RS; ++rs)
              for (int64_t c = 0; c < cb; ++c) dstw[(rs * cb + c) * KB + kk] = src[rs * Cg + c];
          } else {     // KCRS: [c][rs] contiguous
            const float* src = wt + (ka * Cg + c0) * RS;
            for (int64_t c = 0; c < cb; ++c)
              for (int64_t rs = 0; rs < RS; ++rs) dstw[(rs * cb + c) * KB + kk] = src[c * RS + rs];
          }
        }
      }
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t q0 = 0; q0 < Q; q0 += kQB) {
          // Input slab [r][c][cols], zeros in the padding.
          const int64_t w0 = q0 * pb.stride_w - pb.pad_w;
          for (int64_t r = 0; r < R; ++r) {
            const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
            float* sr = slab + r * cb * cols;
            if (h < 0 || h >= pb.h) {
              std::fill(sr, sr + cb * cols, 0.0f);
              continue;
            }
            const int64_t lo = std::clamp<int64_t>(-w0, 0, cols), hi = std::clamp<int64_t>(pb.w - w0, lo, cols);
            if (nhwc) {
              const float* xr = x + ((n * pb.h + h) * pb.w) * pb.c + g * Cg + c0;
              for (int64_t c = 0; c < cb; ++c) {
                float* o = sr + c * cols;
                std::fill(o, o + lo, 0.0f);
                std::fill(o + hi, o + cols, 0.0f);
              }
              for (int64_t col = lo; col < hi; ++col) {
                const float* xp = xr + (w0 + col) * pb.c;
                for (int64_t c = 0; c < cb; ++c) sr[c * cols + col] = xp[c];
              }
            } else {
              for (int64_t c = 0; c < cb; ++c) {
                const float* xr = x + ((n * pb.c + g * Cg + c0 + c) * pb.h + h) * pb.w + w0;
                float* o = sr + c * cols;
                std::fill(o, o + lo, 0.0f);
                std::copy(xr + lo, xr + hi, o + lo);
                std::fill(o + hi, o + cols, 0.0f);
              }
            }
          }
          const int64_t nq = std::min<int64_t>(kQB, Q - q0);
          for (int64_t kb = kb0; kb < kb1; ++kb) {
            const float* wk = wp + (kb - kb0) * RS * cb * KB;
            if (pb.stride_w == 1)
              micro_kernel<KV, 1>(slab, cols, cb, R, S, pb.dilation_w, 1, wk, tile);
            else if (pb.stride_w == 2)
              micro_kernel<KV, 2>(slab, cols, cb, R, S, pb.dilation_w, 2, wk, tile);
            else
              micro_kernel<KV, 0>(slab, cols, cb, R, S, pb.dilation_w, pb.stride_w, wk, tile);
            // Merge the tile into dst with the epilogue: the sums so far (alpha * tile, plus the bias and beta *
            // residual on the first chunk, plus dst's partial sums on later ones), then on the last chunk the
            // activation over the whole tile at once (epilogue_span decides it once a tile: an element at a
            // time, relu6 and SiLU cost the 3x3 3 -> 32 stem 2.5-4.5x its convolution), then the stores.
            const int64_t nk = std::min<int64_t>(KB, Kg - kb * KB);
            const int64_t kbase = g * Kg + kb * KB;
            // output (q0 + j, channel kbase + kk): NHWC base_j + kk, NCHW base_kk + j
            const int64_t pix0 = (n * P + p) * Q + q0, plane = P * Q;
            auto out = [&](int64_t j, int64_t kk) {
              return nhwc ? (pix0 + j) * pb.k + kbase + kk : (n * pb.k + kbase + kk) * plane + p * Q + q0 + j;
            };
            for (int64_t j = 0; j < nq; ++j) {
              float* t = tile + j * KB;
              for (int64_t kk = 0; kk < nk; ++kk) t[kk] *= e.alpha;
              if (first) {
                if (bias)
                  for (int64_t kk = 0; kk < nk; ++kk) t[kk] += bias[kbase + kk];
                if (res)
                  for (int64_t kk = 0; kk < nk; ++kk) t[kk] += e.beta * res[out(j, kk)];
              } else {
                for (int64_t kk = 0; kk < nk; ++kk) t[kk] += y[out(j, kk)];
              }
            }
            if (last && e.activation != Activation::none)
              epilogue_span(e, 1.0f, DType::f32, tile, tile, nq * KB, nullptr, SpanBias::none, nullptr);
            for (int64_t j = 0; j < nq; ++j)
              for (int64_t kk = 0; kk < nk; ++kk) y[out(j, kk)] = tile[j * KB + kk];
          }
        }
    }
  }
};

}  // namespace

const Algorithm* make_cpu_direct() {
  static CpuDirect algo;
  return &algo;
}

}  // namespace convkit::detail
