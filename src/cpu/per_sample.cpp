// cpu_per_sample: the CPU kernel of conv2d_per_sample (a different filter bank per sample), f32, nchw and nhwc.
//
// The same blocked direct loop as a direct convolution, with the weight base moved to the sample's own filter
// bank. Work items are (sample n, group g, block of kBlockK output channels) triples, spread over OpenMP
// threads; each item packs its kBlockK filters once as [r][s][c][kBlockK] so the innermost loop (over the
// block's output channels) is contiguous and vectorises, then walks the output pixels accumulating kBlockK
// sums in registers. Every output element is finished (epilogue included) before it is stored, and its
// residual is read right before that store, so a residual that aliases dst is safe.
#include <algorithm>
#include <vector>

#include "common/activation.hpp"
#include "convkit/algorithm.hpp"
#include "convkit/status.hpp"
#include "core/registry.hpp"

namespace convkit::detail {

namespace {
constexpr int64_t kBlockK = 8;  // output channels accumulated together per pixel

struct Strides4 {
  int64_t a, b, c, d;  // N/K, C, H/R, W/S steps, whatever the layout
};

Strides4 activation_strides(const TensorView& t) {
  const int64_t C = t.dims[1], H = t.dims[2], W = t.dims[3];
  if (t.layout == Layout::nchw) return {C * H * W, H * W, W, 1};
  return {H * W * C, 1, W * C, C};
}

Strides4 weight_strides(const TensorView& t) {  // KCRS or KRSC
  const int64_t Cg = t.dims[1], R = t.dims[2], S = t.dims[3];
  if (t.layout == Layout::nchw) return {Cg * R * S, R * S, S, 1};
  return {R * S * Cg, 1, S * Cg, Cg};
}
}  // namespace

namespace {

void run_per_sample(const Conv2dProblem& pb, const TensorView& src, const TensorView& wei, const TensorView& dst,
                    const Epilogue& epi) {
  const int64_t N = pb.n, K = pb.k, G = pb.groups, Cg = pb.c_per_group(), Kg = pb.k_per_group();
  const int64_t R = pb.r, S = pb.s, P = pb.p(), Q = pb.q(), H = pb.h, W = pb.w;
  const int64_t blocks = (Kg + kBlockK - 1) / kBlockK;
  const int64_t items = N * G * blocks;
  const Strides4 xs = activation_strides(src), ws = weight_strides(wei);
  const float* x = static_cast<const float*>(src.data);
  const float* wt = static_cast<const float*>(wei.data);
  float* y = static_cast<float*>(dst.data);
  const float* bias = static_cast<const float*>(epi.bias);
  const float* res = static_cast<const float*>(epi.residual);

#pragma omp parallel
  {
    std::vector<float> pack(static_cast<size_t>(R * S * Cg * kBlockK));
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t n = item / (G * blocks);
      const int64_t g = (item / blocks) % G;
      const int64_t k0 = g * Kg + (item % blocks) * kBlockK;  // first output channel of the block
      const int64_t kcount = std::min(kBlockK, (g + 1) * Kg - k0);
      // Pack this sample's filters k0 .. k0+kcount-1 as [r][s][c][kk]; lanes past kcount are zero.
      std::fill(pack.begin(), pack.end(), 0.0f);
      for (int64_t kk = 0; kk < kcount; ++kk) {
        const float* wk = wt + (n * K + k0 + kk) * ws.a;
        for (int64_t r = 0; r < R; ++r)
          for (int64_t s = 0; s < S; ++s)
            for (int64_t c = 0; c < Cg; ++c)
              pack[static_cast<size_t>(((r * S + s) * Cg + c) * kBlockK + kk)] = wk[c * ws.b + r * ws.c + s * ws.d];
      }
      const float* xn = x + n * xs.a + g * Cg * xs.b;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          float acc[kBlockK] = {};
          for (int64_t r = 0; r < R; ++r) {
            const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
            if (h < 0 || h >= H) continue;
            for (int64_t s = 0; s < S; ++s) {
              const int64_t w = q * pb.stride_w - pb.pad_w + s * pb.dilation_w;
              if (w < 0 || w >= W) continue;
              const float* xp = xn + h * xs.c + w * xs.d;
              const float* wp = pack.data() + (r * S + s) * Cg * kBlockK;
              for (int64_t c = 0; c < Cg; ++c) {
                const float xv = xp[c * xs.b];
#pragma omp simd
                for (int64_t kk = 0; kk < kBlockK; ++kk) acc[kk] += xv * wp[c * kBlockK + kk];
              }
            }
          }
          for (int64_t kk = 0; kk < kcount; ++kk) {
            const int64_t k = k0 + kk;
            const int64_t o = dst.offset(n, k, p, q);
            const float b = bias ? bias[n * K + k] : 0.0f;
            const float rv = res ? res[o] : 0.0f;
            y[o] = apply_epilogue<float>(epi.activation, epi.alpha, epi.beta, acc[kk], bias != nullptr, b,
                                         res != nullptr, rv);
          }
        }
    }
  }
}

class CpuPerSample final : public Algorithm {
 public:
  std::string name() const override { return "cpu_per_sample"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    return "per-sample weights only (conv2d_per_sample): a blocked direct loop over each sample's own filter bank "
           "(f32; NCHW and NHWC)";
  }
  Support can_implement(const Conv2dProblem&, const ConvConfig& cfg) const override {
    if (cfg.dtype != DType::f32)
      return Support::no(std::string("it computes f32 only, not ") + to_string(cfg.dtype) + ".");
    return Support::yes();  // (tf32 requests get strict fp32 products: more accurate than asked)
  }
  Support accepts(const Conv2dProblem&, const ConvConfig&, const Operands& ops) const override {
    return per_sample_weights_only(ops);
  }
  void run(const ConvCall& call) const override {
    check_per_sample_call(*this, call);
    run_per_sample(call.problem, call.src, call.wei, call.dst, call.epilogue);
  }
};

}  // namespace

const Algorithm* make_cpu_per_sample() {
  static CpuPerSample algo;
  return &algo;
}

}  // namespace convkit::detail
