// cpu_ref: the oracle. A readable seven-deep loop that accumulates in double, for every problem the API
// accepts, every dtype and both layouts, with the epilogue applied in double. Speed is not its job.
#include "common/activation.hpp"
#include "common/element.hpp"
#include "core/registry.hpp"
#include "cpu/ref_conv.hpp"

namespace convkit::detail {

// The seven-deep loop: n, k, p, q outside (in CpuRef::run), c, r, s here.
double reference_dot(const Conv2dProblem& pb, const TensorView& x, const TensorView& w, int64_t n, int64_t k,
                     int64_t p, int64_t q) {
  const int64_t Cg = pb.c_per_group(), g = k / pb.k_per_group();
  double acc = 0.0;
  for (int64_t c = 0; c < Cg; ++c)
    for (int64_t r = 0; r < pb.r; ++r) {
      const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
      if (h < 0 || h >= pb.h) continue;
      for (int64_t s = 0; s < pb.s; ++s) {
        const int64_t ww = q * pb.stride_w - pb.pad_w + s * pb.dilation_w;
        if (ww < 0 || ww >= pb.w) continue;
        acc += load_as_double(x.data, x.dtype, x.offset(n, g * Cg + c, h, ww)) *
               load_as_double(w.data, w.dtype, w.offset(k, c, r, s));
      }
    }
  return acc;
}

namespace {

class CpuRef final : public Algorithm {
 public:
  std::string name() const override { return "cpu_ref"; }
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    return "reference: direct 7-deep loop, double accumulation (the oracle)";
  }
  Support can_implement(const Conv2dProblem&, const ConvConfig& cfg) const override {
    if (cfg.math == MathMode::tf32) return Support::no("the reference computes in double; it has no tf32 mode.");
    return Support::yes();
  }

  void run(const ConvCall& call) const override {
    const Conv2dProblem& pb = call.problem;
    const TensorView &x = call.src, &wt = call.wei, &y = call.dst;
    const Epilogue& e = call.epilogue;
    const int64_t P = pb.p(), Q = pb.q();
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < pb.n; ++n)
      for (int64_t k = 0; k < pb.k; ++k) {
        for (int64_t p = 0; p < P; ++p)
          for (int64_t q = 0; q < Q; ++q) {
            const double acc = reference_dot(pb, x, wt, n, k, p, q);
            const int64_t o = y.offset(n, k, p, q);
            const double bias = e.bias ? load_as_double(e.bias, y.dtype, k) : 0.0;
            const double res = e.residual ? load_as_double(e.residual, y.dtype, o) : 0.0;
            store_from_double(y.data, y.dtype, o,
                              apply_epilogue<double>(e.activation, e.alpha, e.beta, acc, e.bias != nullptr, bias,
                                                     e.residual != nullptr, res));
          }
      }
  }
};

}  // namespace

const Algorithm* make_cpu_ref() {
  static CpuRef algo;
  return &algo;
}

}  // namespace convkit::detail
