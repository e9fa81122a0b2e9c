// convkit/backward.hpp: validation, the CPU reference gradients and the dispatch to the CUDA kernels.
#include "convkit/backward.hpp"

#include <string>

#include "core/backward.hpp"
#include "core/cuda_hooks.hpp"
#include "core/log.hpp"
#include "core/validate.hpp"
#include "cpu/wgrad_gemm.hpp"

namespace convkit {
namespace {

ConvConfig config_of(const TensorView& t) { return {t.dtype, t.layout, t.device, MathMode::strict}; }

bool is_depthwise(const Conv2dProblem& p) { return p.groups == p.c && p.c_per_group() == 1; }

// The CPU GEMM weight gradient's dimensions (K, C/groups*R*S, P*Q) and leading dimensions fit OpenBLAS's int.
bool gemm_fits_int(const Conv2dProblem& p) {
  const int64_t lim = 2147483647;
  return p.k <= lim && p.c_per_group() * p.r * p.s <= lim && p.p() * p.q() <= lim;
}

// The CPU reference, f32 in float64 sums. dL/dx[n, c, h, w] = sum over the group's output channels k and the
// taps (r, s) whose output pixel (p, q) lands on (h, w) of gz[n, k, p, q] * w[k, c - g*Cg, r, s].
void cpu_backward_data(const Conv2dProblem& pb, const TensorView& gz, const TensorView& wei, const TensorView& gx) {
  const auto* g = static_cast<const float*>(gz.data);
  const auto* wt = static_cast<const float*>(wei.data);
  auto* out = static_cast<float*>(gx.data);
  const int64_t cg = pb.c_per_group(), kg = pb.k_per_group(), P = pb.p(), Q = pb.q();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < pb.n; ++n)
    for (int64_t c = 0; c < pb.c; ++c) {
      const int64_t grp = c / cg, cl = c - grp * cg;
      for (int64_t h = 0; h < pb.h; ++h)
        for (int64_t w = 0; w < pb.w; ++w) {
          double acc = 0.0;
          for (int64_t r = 0; r < pb.r; ++r) {
            const int64_t ph = h + pb.pad_h - r * pb.dilation_h;
            if (ph < 0 || ph % pb.stride_h != 0 || ph / pb.stride_h >= P) continue;
            const int64_t p = ph / pb.stride_h;
            for (int64_t s = 0; s < pb.s; ++s) {
              const int64_t qw = w + pb.pad_w - s * pb.dilation_w;
              if (qw < 0 || qw % pb.stride_w != 0 || qw / pb.stride_w >= Q) continue;
              const int64_t q = qw / pb.stride_w;
              for (int64_t k = grp * kg; k < (grp + 1) * kg; ++k)
                acc += double(g[gz.offset(n, k, p, q)]) * double(wt[wei.offset(k, cl, r, s)]);
            }
          }
          out[gx.offset(n, c, h, w)] = float(acc);
        }
    }
}

// dL/dw[k, cl, r, s] = sum over n, p, q of gz[n, k, p, q] * x[n, g*Cg + cl, p*sh - ph + r*dh, q*sw - pw + s*dw].
void cpu_backward_weight(const Conv2dProblem& pb, const TensorView& x, const TensorView& gz, const TensorView& gw) {
  const auto* xs = static_cast<const float*>(x.data);
  const auto* g = static_cast<const float*>(gz.data);
  auto* out = static_cast<float*>(gw.data);
  const int64_t cg = pb.c_per_group(), kg = pb.k_per_group(), P = pb.p(), Q = pb.q();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t k = 0; k < pb.k; ++k)
    for (int64_t cl = 0; cl < cg; ++cl) {
      const int64_t c = (k / kg) * cg + cl;
      for (int64_t r = 0; r < pb.r; ++r)
        for (int64_t s = 0; s < pb.s; ++s) {
          double acc = 0.0;
          for (int64_t n = 0; n < pb.n; ++n)
            for (int64_t p = 0; p < P; ++p) {
              const int64_t h = p * pb.stride_h - pb.pad_h + r * pb.dilation_h;
              if (h < 0 || h >= pb.h) continue;
              for (int64_t q = 0; q < Q; ++q) {
                const int64_t w = q * pb.stride_w - pb.pad_w + s * pb.dilation_w;
                if (w < 0 || w >= pb.w) continue;
                acc += double(g[gz.offset(n, k, p, q)]) * double(xs[x.offset(n, c, h, w)]);
              }
            }
          out[gw.offset(k, cl, r, s)] = float(acc);
        }
    }
}

Status no_alias(const char* op, const TensorView& out, const TensorView& a, const TensorView& b) {
  if (out.data != nullptr && (out.data == a.data || out.data == b.data))
    return Status::Fail(StatusCode::invalid_tensor,
                        std::string(op) + ": the gradient must not alias the tensors it is computed from.");
  return Status::Ok();
}

// The one reason a request has no kernel, or ok. `weight`: the weight gradient (a dense layer's has a CUDA
// kernel of its own; its data gradient is a convolution, which the extension runs as one).
Support backward_support(const Conv2dProblem& pb, const ConvConfig& cfg, bool weight) {
  if (cfg.device == Device::cpu) {
    if (cfg.dtype != DType::f32)
      return Support::no(std::string("on the CPU the gradients are computed in f32 only, not ") +
                         to_string(cfg.dtype) + ".");
    return Support::yes();
  }
  if (!is_depthwise(pb)) {
    std::string why =
        "on CUDA convkit has gradient kernels for depthwise convolutions (groups = C) and for the weight gradient "
        "of dense ones; the gradients of other problems are convolutions of their own (grad_out with the "
        "flipped, transposed filters; the input correlated with grad_out), as the PyTorch extension runs them.";
    if (!weight) return Support::no(why);
    if (Support s = detail::cuda_dense_wgrad_supports(pb, cfg); !s) return Support::no(why + " Here: " + s.reason);
    return Support::yes();
  }
  return detail::cuda_backward_supports(pb, cfg);
}

bool dense_wgrad(const Conv2dProblem& pb, const ConvConfig& cfg) {
  return cfg.device == Device::cuda && !is_depthwise(pb);
}

void log_choice(const Conv2dProblem& pb, const ConvConfig& cfg, bool weight) {
  const std::string kind = weight ? "backward-weight" : "backward-data";
  if (!detail::dispatch_log_pending(pb, cfg, kind)) return;
  detail::DispatchReport r;
  r.chosen = cfg.device == Device::cpu       ? "cpu reference (float64 sums)"
             : weight && dense_wgrad(pb, cfg) ? detail::cuda_dense_wgrad_kernel_name(pb, cfg)
                                              : detail::cuda_backward_kernel_name(pb, cfg, weight);
  r.source = std::string("conv2d_") + (weight ? "backward_weight" : "backward_data") +
             " (convkit/backward.hpp: one kernel per device)";
  detail::log_dispatch(pb, cfg, r, kind);
}

}  // namespace

Status validate_backward_data(const Conv2dProblem& pb, const TensorView& gz, const TensorView& wei,
                              const TensorView& gx) {
  if (Status s = pb.validate(); !s.ok()) return s;
  const ConvConfig cfg = config_of(gz);
  if (Status s = detail::check_tensor("conv2d_backward_data: grad_out", gz, output_dims(pb), cfg); !s.ok()) return s;
  if (Status s = detail::check_tensor("conv2d_backward_data: weight", wei, weight_dims(pb), cfg); !s.ok()) return s;
  if (Status s = detail::check_tensor("conv2d_backward_data: grad_in", gx, input_dims(pb), cfg); !s.ok()) return s;
  return no_alias("conv2d_backward_data", gx, gz, wei);
}

Status validate_backward_weight(const Conv2dProblem& pb, const TensorView& x, const TensorView& gz,
                                const TensorView& gw) {
  if (Status s = pb.validate(); !s.ok()) return s;
  const ConvConfig cfg = config_of(x);
  if (Status s = detail::check_tensor("conv2d_backward_weight: input", x, input_dims(pb), cfg); !s.ok()) return s;
  if (Status s = detail::check_tensor("conv2d_backward_weight: grad_out", gz, output_dims(pb), cfg); !s.ok())
    return s;
  if (Status s = detail::check_tensor("conv2d_backward_weight: grad_wei", gw, weight_dims(pb), cfg); !s.ok())
    return s;
  return no_alias("conv2d_backward_weight", gw, x, gz);
}

void conv2d_backward_data(const Conv2dProblem& pb, const TensorView& gz, const TensorView& wei,
                          const TensorView& gx, const BackwardOptions& opt) {
  throw_if_error(validate_backward_data(pb, gz, wei, gx));
  const ConvConfig cfg = config_of(gz);
  if (Support s = backward_support(pb, cfg, false); !s)
    throw Error(StatusCode::unsupported, "conv2d_backward_data: " + s.reason);
  log_choice(pb, cfg, false);
  if (cfg.device == Device::cpu) return cpu_backward_data(pb, gz, wei, gx);
  detail::cuda_depthwise_backward_data(pb, cfg, gz.data, wei.data, gx.data, opt.stream);
}

size_t backward_weight_workspace_bytes(const Conv2dProblem& pb, const ConvConfig& cfg) {
  if (cfg.device == Device::cpu || !backward_support(pb, cfg, true)) return 0;
  return dense_wgrad(pb, cfg) ? detail::cuda_dense_wgrad_workspace(pb, cfg)
                              : detail::cuda_depthwise_backward_weight_workspace(pb, cfg);
}

void conv2d_backward_weight(const Conv2dProblem& pb, const TensorView& x, const TensorView& gz,
                            const TensorView& gw, const BackwardOptions& opt) {
  throw_if_error(validate_backward_weight(pb, x, gz, gw));
  const ConvConfig cfg = config_of(x);
  const bool fast_depthwise = cfg.device == Device::cpu && opt.cpu_fast && is_depthwise(pb);
  if (fast_depthwise ||
      (cfg.device == Device::cpu && opt.cpu_fast && detail::cpu_wgrad_gemm_available() && gemm_fits_int(pb))) {
    if (detail::dispatch_log_pending(pb, cfg, "backward-weight")) {
      detail::DispatchReport r;
      r.chosen = fast_depthwise ? "cpu depthwise loop (float32 sums)" : "cpu GEMM (im2col + OpenBLAS SGEMM, float32 sums)";
      r.source = "conv2d_backward_weight with BackwardOptions::cpu_fast";
      detail::log_dispatch(pb, cfg, r, "backward-weight");
    }
    if (fast_depthwise) return detail::cpu_wgrad_depthwise(pb, x, gz, gw);
    return detail::cpu_wgrad_gemm(pb, x, gz, gw);
  }
  if (Support s = backward_support(pb, cfg, true); !s)
    throw Error(StatusCode::unsupported, "conv2d_backward_weight: " + s.reason);
  log_choice(pb, cfg, true);
  if (cfg.device == Device::cpu) return cpu_backward_weight(pb, x, gz, gw);
  const bool dense = dense_wgrad(pb, cfg);
  const size_t need = dense ? detail::cuda_dense_wgrad_workspace(pb, cfg)
                            : detail::cuda_depthwise_backward_weight_workspace(pb, cfg);
  void* ws = opt.workspace;
  if (ws != nullptr && opt.workspace_bytes < need)
    throw Error(StatusCode::invalid_tensor, "conv2d_backward_weight: the workspace holds " +
                                                std::to_string(opt.workspace_bytes) + " bytes; this request needs " +
                                                std::to_string(need) + ".");
  Buffer own;
  if (ws == nullptr && need > 0) {
    own = Buffer(Device::cuda, need);
    ws = own.data();
  }
  if (dense) return detail::cuda_dense_wgrad(pb, cfg, x.data, gz.data, gw.data, ws, opt.stream);
  detail::cuda_depthwise_backward_weight(pb, cfg, x.data, gz.data, gw.data, ws, opt.stream);
}

}  // namespace convkit
