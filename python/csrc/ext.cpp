// torch.ops.convkit: the op schemas, the CPU implementations, and the one place where a torch Tensor becomes a
// convkit::TensorView. Every convkit::Error is re-raised as a Python exception carrying its message:
// invalid problem/tensor -> ValueError, unsupported/not available -> NotImplementedError, others RuntimeError.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <Python.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "convkit/backward.hpp"
#include "convkit/convkit.hpp"
#include "convkit/per_sample.hpp"
#include "convkit/system.hpp"
#include "ext.hpp"

namespace convkit_ext {
namespace {

[[noreturn]] void rethrow(const char* op, const convkit::Error& e) {
  const std::string msg = std::string(op) + ": " + e.what();
  switch (e.code()) {
    case convkit::StatusCode::invalid_problem:
    case convkit::StatusCode::invalid_tensor:
      C10_THROW_ERROR(ValueError, msg);
    case convkit::StatusCode::unsupported:
    case convkit::StatusCode::not_available:
      C10_THROW_ERROR(NotImplementedError, msg);
    default:
      C10_THROW_ERROR(Error, msg);
  }
}

std::string shape_str(const at::Tensor& t) {
  std::ostringstream o;
  o << t.sizes();
  return o.str();
}

convkit::DType dtype_of(const char* op, const char* name, const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return convkit::DType::f32;
    case at::kHalf: return convkit::DType::f16;
    case at::kBFloat16: return convkit::DType::bf16;
    default:
      TORCH_CHECK_TYPE(false, op, ": ", name, " has dtype ", t.scalar_type(),
                       "; convkit computes in float32, float16 or bfloat16.");
  }
}

// The one torch -> convkit conversion. `t` must already be dense in `layout`.
convkit::TensorView to_view(const char* op, const char* name, const at::Tensor& t, convkit::Layout layout) {
  convkit::TensorView v;
  v.data = t.data_ptr();
  v.dtype = dtype_of(op, name, t);
  v.layout = layout;
  v.device = t.is_cuda() ? convkit::Device::cuda : convkit::Device::cpu;
  for (int i = 0; i < 4; ++i) v.dims[i] = t.size(i);
  return v;
}

at::MemoryFormat format_of(convkit::Layout l) {
  return l == convkit::Layout::nhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

// x's memory format decides the layout: contiguous -> nchw, channels_last -> nhwc, anything else is copied
// to contiguous (nchw) first. The fake implementation in convkit/_meta.py mirrors this rule.
convkit::Layout layout_of(const at::Tensor& x) {
  if (x.is_contiguous()) return convkit::Layout::nchw;
  if (x.is_contiguous(at::MemoryFormat::ChannelsLast)) return convkit::Layout::nhwc;
  return convkit::Layout::nchw;
}

void check_same_device(const char* op, const at::Tensor& x, const char* name, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.device() == x.device(), op, ": all tensors must be on one device; x is on ", x.device(),
                    " but ", name, " is on ", t.device(), ".");
}

void check_device_kind(const char* op, const at::Tensor& x) {
  TORCH_CHECK_VALUE(x.is_cpu() || x.is_cuda(), op, ": tensors must be on a CPU or CUDA device; got ", x.device(),
                    ".");
}

void check_same_dtype(const char* op, const at::Tensor& x, const char* name, const at::Tensor& t) {
  TORCH_CHECK_TYPE(t.scalar_type() == x.scalar_type(), op, ": ", name, " has dtype ", t.scalar_type(),
                   " but x has ", x.scalar_type(), "; all tensors must share one dtype.");
}

std::array<int64_t, 2> pair_arg(const char* op, const char* name, at::IntArrayRef v) {
  TORCH_CHECK_VALUE(v.size() == 2 || v.size() == 1, op, ": ", name, " must have 2 values (height, width); got ",
                    v.size(), ".");
  return {v[0], v.size() == 2 ? v[1] : v[0]};
}

// Parses "auto", "autotune", "<algorithm>" or "<algorithm>[<variant>]" (one of its variants(), the form the
// library's tuner and convkit.plan print), optionally suffixed "/tf32" (fp32 inputs only: explicit TF32 math).
convkit::RunOptions parse_algo(c10::string_view algo_sv) {
  convkit::RunOptions o;
  std::string algo(algo_sv);
  const std::string suffix = "/tf32";
  if (algo.size() >= suffix.size() && algo.compare(algo.size() - suffix.size(), suffix.size(), suffix) == 0) {
    o.math = convkit::MathMode::tf32;
    algo.resize(algo.size() - suffix.size());
  }
  if (!algo.empty() && algo.back() == ']') {
    const size_t open = algo.find('[');
    if (open != std::string::npos) {
      o.variant = algo.substr(open + 1, algo.size() - open - 2);
      algo.resize(open);
    }
  }
  o.algo = algo.empty() ? "auto" : algo;
  return o;
}

// x: the input's sizes [N, C, H, W].
convkit::Conv2dProblem make_problem(const char* op, at::IntArrayRef x, int64_t k, int64_t cg, int64_t r,
                                    int64_t s, at::IntArrayRef stride, at::IntArrayRef padding,
                                    at::IntArrayRef dilation, int64_t groups) {
  const auto st = pair_arg(op, "stride", stride), pd = pair_arg(op, "padding", padding),
             dl = pair_arg(op, "dilation", dilation);
  TORCH_CHECK_VALUE(x.size() == 4, op, ": the input size must have 4 entries [N, C, H, W]; got ", x, ".");
  TORCH_CHECK_VALUE(groups >= 1, op, ": groups must be at least 1; got ", groups, ".");
  TORCH_CHECK_VALUE(cg * groups == x[1], op, ": the weight has ", cg, " input channels per group, so with groups=",
                    groups, " x needs ", cg * groups, " channels; it has ", x[1], " (x ", x, ").");
  TORCH_CHECK_VALUE(k % groups == 0, op, ": ", k, " output channels cannot be split into groups=", groups, ".");
  convkit::Conv2dProblem p;
  p.n = std::max<int64_t>(x[0], 1); p.c = x[1]; p.h = x[2]; p.w = x[3];
  p.k = k; p.r = r; p.s = s;
  p.stride_h = st[0]; p.stride_w = st[1];
  p.pad_h = pd[0]; p.pad_w = pd[1];
  p.dilation_h = dl[0]; p.dilation_w = dl[1];
  p.groups = groups;
  if (convkit::Status v = p.validate(); !v.ok()) rethrow(op, convkit::Error(v));
  p.n = x[0];  // an empty batch is valid in PyTorch: the caller returns an empty output
  return p;
}

convkit::Conv2dProblem make_problem(const char* op, const at::Tensor& x, int64_t k, int64_t cg, int64_t r,
                                    int64_t s, at::IntArrayRef stride, at::IntArrayRef padding,
                                    at::IntArrayRef dilation, int64_t groups) {
  return make_problem(op, x.sizes(), k, cg, r, s, stride, padding, dilation, groups);
}

// The library's plan for a request (convkit::plan: algorithm, variant, the layout to compute in, workspace),
// remembered per (problem, configuration, operands' alignment, algo, device index, and the environment that
// names the tune cache) until the tune cache's generation changes (an entry stored, a cache opened): plan()
// builds a tune cache key from strings and asks every algorithm in turn, several microseconds of an op whose
// whole host path should stay near F.conv2d's. Plans are shared, never copied on the hot path.
std::shared_ptr<const convkit::Plan> planned(const convkit::Conv2dProblem& p, const convkit::ConvConfig& cfg,
                                             const convkit::Operands& ops, const convkit::RunOptions& opt,
                                             bool any_layout, int device_index) {
  struct Memo {
    std::uint64_t generation;
    std::shared_ptr<const convkit::Plan> plan;
  };
  static std::mutex mu;
  static std::map<std::string, Memo> known;
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string("\x01");
  };
  const int64_t fields[] = {p.n, p.c, p.h, p.w, p.k, p.r, p.s, p.pad_h, p.pad_w, p.stride_h, p.stride_w,
                            p.dilation_h, p.dilation_w, p.groups, int64_t(cfg.dtype), int64_t(cfg.layout),
                            int64_t(cfg.device), int64_t(cfg.math), device_index, any_layout,
                            ops.src_align, ops.wei_align, ops.dst_align, ops.bias_align, ops.residual_align,
                            ops.has_bias, ops.has_residual, ops.residual_is_dst, ops.per_sample,
                            int64_t(ops.activation)};
  const std::string key = std::string(reinterpret_cast<const char*>(fields), sizeof fields) + opt.algo + '\0' +
                          opt.variant + '\0' + env("CONVKIT_TUNE_CACHE") + '\0' + env("XDG_CACHE_HOME") + '\0' +
                          env("HOME");
  const std::uint64_t generation = convkit::tune_cache_generation();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known.find(key); it != known.end() && it->second.generation == generation) return it->second.plan;
  }
  convkit::PlanOptions po;
  po.algo = opt.algo;
  po.variant = opt.variant;
  po.any_layout = any_layout;
  auto pl = std::make_shared<const convkit::Plan>(convkit::plan(p, cfg, ops, po));
  std::lock_guard<std::mutex> lock(mu);
  if (known.size() > 4096) known.clear();
  known[key] = Memo{generation, pl};
  return pl;
}

// The plan's workspace from PyTorch's caching allocator on x's device (none when it needs none, or when the
// plan leaves the choice to autotuning: execute() then allocates what the winner needs).
at::Tensor workspace_for(const convkit::Plan& pl, const at::Tensor& x) {
  if (pl.algorithm == nullptr || pl.workspace_bytes == 0) return {};
  return at::empty({static_cast<int64_t>(pl.workspace_bytes)}, x.options().dtype(at::kByte));
}

convkit::Activation activation_of(const char* op, c10::string_view a) {
  try {
    return convkit::parse_activation(std::string(a));
  } catch (const convkit::Error& e) {
    rethrow(op, e);
  }
}

}  // namespace

int64_t se_gate_check(const at::Tensor& x, const at::Tensor& w1, const c10::optional<at::Tensor>& b1,
                      const at::Tensor& w2, const c10::optional<at::Tensor>& b2, c10::string_view act1,
                      c10::string_view act2, int (&acts)[2]) {
  constexpr const char* op = "convkit.se_gate";
  TORCH_CHECK_VALUE(x.dim() == 4, op, ": x must be a 4-D [N, C, H, W] tensor; got shape ", shape_str(x), ".");
  check_device_kind(op, x);
  TORCH_CHECK_TYPE(at::isFloatingType(x.scalar_type()), op, ": x has dtype ", x.scalar_type(),
                   "; the gate computes floating-point tensors.");
  const int64_t C = x.size(1), R = w1.dim() >= 1 ? w1.size(0) : 0;
  TORCH_CHECK_VALUE(w1.dim() == 4 && w1.size(1) == C && w1.size(2) == 1 && w1.size(3) == 1 && R >= 1, op,
                    ": w1 (the squeeze) must be a [R, C, 1, 1] 1x1 filter with C = ", C, " (x's channels); got ",
                    shape_str(w1), ".");
  TORCH_CHECK_VALUE(w2.dim() == 4 && w2.size(0) == C && w2.size(1) == R && w2.size(2) == 1 && w2.size(3) == 1, op,
                    ": w2 (the excitation) must be a [C, R, 1, 1] 1x1 filter with C = ", C, " and R = ", R,
                    " (w1's outputs); got ", shape_str(w2), ".");
  const std::pair<const char*, const at::Tensor*> others[] = {{"w1", &w1}, {"w2", &w2}};
  for (const auto& [name, t] : others) {
    check_same_device(op, x, name, *t);
    check_same_dtype(op, x, name, *t);
  }
  const std::tuple<const char*, const c10::optional<at::Tensor>*, int64_t> biases[] = {{"b1", &b1, R}, {"b2", &b2, C}};
  for (const auto& [name, b, len] : biases) {
    if (!*b) continue;
    check_same_device(op, x, name, **b);
    check_same_dtype(op, x, name, **b);
    TORCH_CHECK_VALUE((*b)->dim() == 1 && (*b)->size(0) == len, op, ": ", name, " must have shape [", len, "]; got ",
                      shape_str(**b), ".");
  }
  acts[0] = int(activation_of(op, act1));
  acts[1] = int(activation_of(op, act2));
  return R;
}

at::Tensor se_gate_composite(const at::Tensor& x, const at::Tensor& w1, const c10::optional<at::Tensor>& b1,
                             const at::Tensor& w2, const c10::optional<at::Tensor>& b2, const int (&acts)[2]) {
  const int64_t N = x.size(0), C = x.size(1), R = w1.size(0);
  const at::ScalarType acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto act = [](at::Tensor v, int a) {
    switch (static_cast<convkit::Activation>(a)) {
      case convkit::Activation::relu: return at::relu(v);
      case convkit::Activation::relu6: return at::clamp(v, 0.0, 6.0);
      case convkit::Activation::silu: return at::silu(v);
      case convkit::Activation::gelu: return at::gelu(v);
      case convkit::Activation::hardswish: return at::hardswish(v);
      case convkit::Activation::sigmoid: return at::sigmoid(v);
      case convkit::Activation::hardsigmoid: return at::hardsigmoid(v);
      default: return v;
    }
  };
  const at::Tensor m = at::mean(x, {2, 3}, false, acc);  // (torch's mean of no pixels: NaN)
  at::Tensor h = at::matmul(m, w1.reshape({R, C}).to(acc).t());
  if (b1) h = h + b1->to(acc);
  h = act(h, acts[0]);
  at::Tensor y = at::matmul(h, w2.reshape({C, R}).to(acc).t());
  if (b2) y = y + b2->to(acc);
  return act(y, acts[1]).to(x.scalar_type()).reshape({N, C, 1, 1}).contiguous();
}

at::Tensor conv2d(const at::Tensor& x_in, const at::Tensor& w_in, const c10::optional<at::Tensor>& bias_in,
                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                  c10::string_view activation, const c10::optional<at::Tensor>& residual_in, c10::string_view algo,
                  void* stream) {
  constexpr const char* op = "convkit.conv2d";
  TORCH_CHECK_VALUE(x_in.dim() == 4, op, ": x must be a 4-D [N, C, H, W] tensor; got ", x_in.dim(),
                    "-D with shape ", shape_str(x_in), ".");
  TORCH_CHECK_VALUE(w_in.dim() == 4, op, ": the weight must be a 4-D [K, C/groups, R, S] tensor; got ", w_in.dim(),
                    "-D with shape ", shape_str(w_in), ".");
  check_device_kind(op, x_in);
  check_same_device(op, x_in, "the weight", w_in);
  dtype_of(op, "x", x_in);
  check_same_dtype(op, x_in, "the weight", w_in);
  const int64_t K = w_in.size(0);
  if (bias_in) {
    check_same_device(op, x_in, "the bias", *bias_in);
    check_same_dtype(op, x_in, "the bias", *bias_in);
    TORCH_CHECK_VALUE(bias_in->dim() == 1 && bias_in->size(0) == K, op, ": the bias must have shape [", K,
                      "] (one value per output channel); got ", shape_str(*bias_in), ".");
  }
  const convkit::Activation act = activation_of(op, activation);
  const convkit::Conv2dProblem p =
      make_problem(op, x_in, K, w_in.size(1), w_in.size(2), w_in.size(3), stride, padding, dilation, groups);
  const std::vector<int64_t> out_shape{p.n, p.k, p.p(), p.q()};
  if (residual_in) {
    check_same_device(op, x_in, "the residual", *residual_in);
    check_same_dtype(op, x_in, "the residual", *residual_in);
    TORCH_CHECK_VALUE(residual_in->sizes().vec() == out_shape, op, ": the residual must have the output's shape ",
                      at::IntArrayRef(out_shape), "; got ", shape_str(*residual_in), ".");
  }

  convkit::RunOptions opt = parse_algo(algo);
  // The plan decides the layout: on CUDA, one with no fast kernel for the request (NCHW bf16, channels_last
  // fp32) is computed in the other, a transform each way (PlanOptions::any_layout). The output keeps x's
  // memory format, as the fake implementation (convkit/_meta.py) says.
  const convkit::Layout x_layout = layout_of(x_in);
  const at::MemoryFormat x_mf = format_of(x_layout);
  at::Tensor x = x_in.contiguous(x_mf), w = w_in.contiguous(x_mf);  // no-ops for tensors already dense
  at::Tensor out = at::empty(out_shape, x.options().memory_format(x_mf));
  if (out.numel() == 0 || x.numel() == 0) return out.zero_();
  at::Tensor bias, residual;
  convkit::Epilogue epi;
  epi.activation = act;
  if (bias_in) {
    bias = bias_in->contiguous();
    epi.bias = bias.data_ptr();
  }
  if (residual_in) {
    residual = residual_in->contiguous(x_mf);
    epi.residual = residual.data_ptr();
  }
  try {
    const convkit::DType dt = dtype_of(op, "x", x_in);
    const convkit::Device device = x.is_cuda() ? convkit::Device::cuda : convkit::Device::cpu;
    const int device_index = x.is_cuda() ? int(x.get_device()) : -1;
    const convkit::ConvConfig request{dt, x_layout, device, opt.math};
    auto view = [&](const char* name, const at::Tensor& t, convkit::Layout l) { return to_view(op, name, t, l); };
    convkit::Operands ops = convkit::Operands::of(view("x", x, x_layout), view("weight", w, x_layout),
                                                  view("out", out, x_layout), epi);
    std::shared_ptr<const convkit::Plan> pl = planned(p, request, ops, opt, true, device_index);
    const convkit::Layout layout = pl->config.layout;
    at::Tensor y = out;
    if (layout != x_layout) {
      const at::MemoryFormat mf = format_of(layout);
      x = x.contiguous(mf);
      w = w.contiguous(mf);
      // An output whose bytes are the same in both layouts (one pixel an image, as in a squeeze-excitation
      // block's 1x1 convolutions, or one channel) is written in place: no buffer, no copy back.
      if (!out.is_contiguous(mf)) y = at::empty(out_shape, x.options().memory_format(mf));
      if (residual_in) {
        residual = residual.contiguous(mf);
        epi.residual = residual.data_ptr();
      }
      // A weight already in that layout is used in place: the plan assumed fresh buffers, so check.
      ops = convkit::Operands::of(view("x", x, layout), view("weight", w, layout), view("out", y, layout), epi);
      if (!(ops == pl->operands)) {
        convkit::ConvConfig there = request;
        there.layout = layout;
        pl = planned(p, there, ops, opt, false, device_index);
      }
    }
    const at::Tensor ws = workspace_for(*pl, x);
    convkit::execute(*pl, p, view("x", x, layout), view("weight", w, layout), view("out", y, layout), epi, stream,
                     ws.defined() ? ws.data_ptr() : nullptr, ws.defined() ? size_t(ws.numel()) : 0);
    if (!y.is_same(out)) out.copy_(y);
  } catch (const convkit::Error& e) {
    rethrow(op, e);
  }
  return out;
}

at::Tensor conv2d_per_sample(const at::Tensor& x_in, const at::Tensor& w_in, const c10::optional<at::Tensor>& bias_in,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                             int64_t groups, c10::string_view activation, void* stream) {
  constexpr const char* op = "convkit.conv2d_per_sample";
  TORCH_CHECK_VALUE(x_in.dim() == 4, op, ": x must be a 4-D [N, C, H, W] tensor; got ", x_in.dim(),
                    "-D with shape ", shape_str(x_in), ".");
  TORCH_CHECK_VALUE(w_in.dim() == 5, op, ": the weight must be a 5-D [N, K, C/groups, R, S] tensor (one filter ",
                    "bank per sample); got ", w_in.dim(), "-D with shape ", shape_str(w_in), ".");
  TORCH_CHECK_VALUE(w_in.size(0) == x_in.size(0), op, ": the weight holds ", w_in.size(0),
                    " filter banks but x has ", x_in.size(0), " samples; they must agree.");
  check_device_kind(op, x_in);
  check_same_device(op, x_in, "the weight", w_in);
  dtype_of(op, "x", x_in);
  check_same_dtype(op, x_in, "the weight", w_in);
  const int64_t N = x_in.size(0), K = w_in.size(1);
  if (bias_in) {
    check_same_device(op, x_in, "the bias", *bias_in);
    check_same_dtype(op, x_in, "the bias", *bias_in);
    TORCH_CHECK_VALUE(bias_in->dim() == 2 && bias_in->size(0) == N && bias_in->size(1) == K, op,
                      ": the bias must have shape [", N, ", ", K, "] (one value per sample and output channel); got ",
                      shape_str(*bias_in), ".");
  }
  const convkit::Activation act = activation_of(op, activation);
  const convkit::Conv2dProblem p =
      make_problem(op, x_in, K, w_in.size(2), w_in.size(3), w_in.size(4), stride, padding, dilation, groups);
  const convkit::Layout layout = layout_of(x_in);
  const at::MemoryFormat mf = format_of(layout);
  const at::Tensor x = x_in.contiguous(mf);
  // [N, K, Cg, R, S] -> [N*K, Cg, R, S] rows, KCRS or (channels_last) KRSC.
  const at::Tensor w = w_in.reshape({N * K, w_in.size(2), w_in.size(3), w_in.size(4)}).contiguous(mf);
  at::Tensor out = at::empty({p.n, p.k, p.p(), p.q()}, x.options().memory_format(mf));
  if (out.numel() == 0 || x.numel() == 0) return out.zero_();
  at::Tensor bias;
  convkit::Epilogue epi;
  epi.activation = act;
  if (bias_in) {
    bias = bias_in->contiguous();
    epi.bias = bias.data_ptr();
  }
  try {
    const convkit::TensorView xv = to_view(op, "x", x, layout), wv = to_view(op, "weight", w, layout),
                              yv = to_view(op, "out", out, layout);
    const convkit::ConvConfig cfg{xv.dtype, layout, xv.device, convkit::MathMode::strict};
    const auto pl = planned(p, cfg, convkit::Operands::of(xv, wv, yv, epi, true), convkit::RunOptions{}, false,
                            x.is_cuda() ? int(x.get_device()) : -1);
    const at::Tensor ws = workspace_for(*pl, x);
    convkit::execute(*pl, p, xv, wv, yv, epi, stream, ws.defined() ? ws.data_ptr() : nullptr,
                     ws.defined() ? size_t(ws.numel()) : 0);
  } catch (const convkit::Error& e) {
    rethrow(op, e);
  }
  return out;
}

at::Tensor conv2d_backward_data(const at::Tensor& gz_in, const at::Tensor& w_in, at::IntArrayRef input_size,
                                at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                int64_t groups, void* stream) {
  constexpr const char* op = "convkit.conv2d_backward_data";
  TORCH_CHECK_VALUE(gz_in.dim() == 4 && w_in.dim() == 4, op, ": grad_out and the weight must be 4-D; got ",
                    shape_str(gz_in), " and ", shape_str(w_in), ".");
  check_device_kind(op, gz_in);
  check_same_device(op, gz_in, "the weight", w_in);
  dtype_of(op, "grad_out", gz_in);
  check_same_dtype(op, gz_in, "the weight", w_in);
  const convkit::Conv2dProblem p = make_problem(op, input_size, w_in.size(0), w_in.size(1), w_in.size(2),
                                                w_in.size(3), stride, padding, dilation, groups);
  const std::vector<int64_t> out_shape{p.n, p.k, p.p(), p.q()};
  TORCH_CHECK_VALUE(gz_in.sizes().vec() == out_shape, op, ": grad_out must have the output's shape ",
                    at::IntArrayRef(out_shape), "; got ", shape_str(gz_in), ".");
  const convkit::Layout layout = layout_of(gz_in);
  const at::MemoryFormat mf = format_of(layout);
  const at::Tensor gz = gz_in.contiguous(mf), w = w_in.contiguous(mf);
  at::Tensor gx = at::empty(input_size, gz.options().memory_format(mf));
  if (gx.numel() == 0) return gx;
  try {
    convkit::BackwardOptions o;
    o.stream = stream;
    convkit::conv2d_backward_data(p, to_view(op, "grad_out", gz, layout), to_view(op, "weight", w, layout),
                                  to_view(op, "grad_in", gx, layout), o);
  } catch (const convkit::Error& e) {
    rethrow(op, e);
  }
  return gx;
}

at::Tensor conv2d_backward_weight(const at::Tensor& x_in, const at::Tensor& gz_in, at::IntArrayRef weight_size,
                                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                  int64_t groups, void* stream) {
  constexpr const char* op = "convkit.conv2d_backward_weight";
  TORCH_CHECK_VALUE(x_in.dim() == 4 && gz_in.dim() == 4, op, ": x and grad_out must be 4-D; got ", shape_str(x_in),
                    " and ", shape_str(gz_in), ".");
  TORCH_CHECK_VALUE(weight_size.size() == 4, op, ": the weight size must have 4 entries [K, C/groups, R, S]; got ",
                    weight_size, ".");
  check_device_kind(op, x_in);
  check_same_device(op, x_in, "grad_out", gz_in);
  dtype_of(op, "x", x_in);
  check_same_dtype(op, x_in, "grad_out", gz_in);
  const convkit::Conv2dProblem p = make_problem(op, x_in, weight_size[0], weight_size[1], weight_size[2],
                                                weight_size[3], stride, padding, dilation, groups);
  const std::vector<int64_t> out_shape{p.n, p.k, p.p(), p.q()};
  TORCH_CHECK_VALUE(gz_in.sizes().vec() == out_shape, op, ": grad_out must have the output's shape ",
                    at::IntArrayRef(out_shape), "; got ", shape_str(gz_in), ".");
  const convkit::Layout layout = layout_of(x_in);
  const at::MemoryFormat mf = format_of(layout);
  const at::Tensor x = x_in.contiguous(mf), gz = gz_in.contiguous(mf);
  at::Tensor gw = at::empty(weight_size, x.options().memory_format(mf));
  if (gw.numel() == 0) return gw;
  if (x.numel() == 0 || gz.numel() == 0) return gw.zero_();  // an empty batch: no terms in the sum
  try {
    const convkit::TensorView xv = to_view(op, "x", x, layout);
    const convkit::ConvConfig cfg{xv.dtype, layout, xv.device, convkit::MathMode::strict};
    const size_t ws_bytes = convkit::backward_weight_workspace_bytes(p, cfg);
    at::Tensor ws;
    if (ws_bytes > 0) ws = at::empty({int64_t(ws_bytes)}, x.options().dtype(at::kByte));
    convkit::BackwardOptions o;
    o.stream = stream;
    o.workspace = ws.defined() ? ws.data_ptr() : nullptr;
    o.workspace_bytes = ws_bytes;
    o.cpu_fast = true;  // on the CPU, GEMMs (float32 sums), not the float64 reference: what training wants
    convkit::conv2d_backward_weight(p, xv, to_view(op, "grad_out", gz, layout), to_view(op, "grad_wei", gw, layout),
                                    o);
  } catch (const convkit::Error& e) {
    rethrow(op, e);
  }
  return gw;
}

void check_vector_add(const at::Tensor& a, const at::Tensor& b) {
  constexpr const char* op = "convkit.vector_add";
  check_device_kind(op, a);
  TORCH_CHECK_VALUE(b.device() == a.device(), op, ": all tensors must be on one device; a is on ", a.device(),
                    " but b is on ", b.device(), ".");
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), op, ": a has dtype ", a.scalar_type(), " but b has ",
                   b.scalar_type(), "; they must match.");
  TORCH_CHECK_TYPE(at::isFloatingType(a.scalar_type()) || a.scalar_type() == at::kInt || a.scalar_type() == at::kLong,
                   op, ": dtype ", a.scalar_type(), " is not supported (float32/64, float16, bfloat16, int32, int64).");
  TORCH_CHECK_VALUE(a.sizes() == b.sizes(), op, ": a has shape ", a.sizes(), " but b has shape ", b.sizes(),
                    "; they must match (no broadcasting).");
}

void check_silu(const at::Tensor& x) {
  constexpr const char* op = "convkit.silu";
  check_device_kind(op, x);
  TORCH_CHECK_TYPE(at::isFloatingType(x.scalar_type()), op, ": x has dtype ", x.scalar_type(),
                   "; silu needs a floating dtype (float32/64, float16, bfloat16).");
}

void check_csr_matvec(const at::Tensor& values, const at::Tensor& row_ptr, const at::Tensor& col_idx,
                      const at::Tensor& dense) {
  constexpr const char* op = "convkit.csr_matvec";
  check_device_kind(op, values);
  for (auto [name, t] : {std::pair<const char*, const at::Tensor*>{"row_ptr", &row_ptr}, {"col_idx", &col_idx},
                         {"dense", &dense}})
    TORCH_CHECK_VALUE(t->device() == values.device(), op, ": all tensors must be on one device; values is on ",
                      values.device(), " but ", name, " is on ", t->device(), ".");
  for (auto [name, t] : {std::pair<const char*, const at::Tensor*>{"values", &values}, {"row_ptr", &row_ptr},
                         {"col_idx", &col_idx}, {"dense", &dense}})
    TORCH_CHECK_VALUE(t->dim() == 1, op, ": ", name, " must be 1-D; got shape ", t->sizes(), ".");
  TORCH_CHECK_TYPE(at::isFloatingType(values.scalar_type()), op, ": values has dtype ", values.scalar_type(),
                   "; it must be floating (float32/64, float16, bfloat16).");
  TORCH_CHECK_TYPE(dense.scalar_type() == values.scalar_type(), op, ": dense has dtype ", dense.scalar_type(),
                   " but values has ", values.scalar_type(), "; they must match.");
  TORCH_CHECK_TYPE(row_ptr.scalar_type() == at::kInt || row_ptr.scalar_type() == at::kLong, op,
                   ": row_ptr has dtype ", row_ptr.scalar_type(), "; indices must be int32 or int64.");
  TORCH_CHECK_TYPE(col_idx.scalar_type() == row_ptr.scalar_type(), op, ": col_idx has dtype ",
                   col_idx.scalar_type(), " but row_ptr has ", row_ptr.scalar_type(), "; they must match.");
  const int64_t nnz = values.numel();
  TORCH_CHECK_VALUE(col_idx.numel() == nnz, op, ": col_idx has ", col_idx.numel(), " entries but values has ", nnz,
                    "; there must be one column index per stored value.");
  TORCH_CHECK_VALUE(row_ptr.numel() >= 1, op, ": row_ptr must have rows + 1 >= 1 entries; it is empty.");
  // NOTE: on CUDA these reads synchronise with the device; validation is worth it for an example op.
  const int64_t first = row_ptr[0].item<int64_t>(), last = row_ptr[-1].item<int64_t>();
  TORCH_CHECK_VALUE(first == 0, op, ": row_ptr[0] must be 0; it is ", first, ".");
  TORCH_CHECK_VALUE(last == nnz, op, ": row_ptr[-1] must equal the number of stored values (", nnz, "); it is ",
                    last, ".");
  if (row_ptr.numel() > 1) {
    const at::Tensor dec = row_ptr.slice(0, 1).lt(row_ptr.slice(0, 0, -1));
    if (dec.any().item<bool>()) {
      const int64_t i = dec.nonzero()[0][0].item<int64_t>();
      TORCH_CHECK_VALUE(false, op, ": row_ptr must be non-decreasing; row_ptr[", i + 1, "] = ",
                        row_ptr[i + 1].item<int64_t>(), " < row_ptr[", i, "] = ", row_ptr[i].item<int64_t>(), ".");
    }
  }
  if (nnz > 0) {
    const int64_t lo = col_idx.min().item<int64_t>(), hi = col_idx.max().item<int64_t>();
    TORCH_CHECK_VALUE(lo >= 0 && hi < dense.numel(), op, ": col_idx must lie in [0, ", dense.numel(),
                      ") (the length of dense); found ", lo < 0 ? lo : hi, ".");
  }
}

namespace {

at::Tensor conv2d_cpu(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                      at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                      c10::string_view activation, const c10::optional<at::Tensor>& residual, c10::string_view algo) {
  return conv2d(x, w, bias, stride, padding, dilation, groups, activation, residual, algo, nullptr);
}

at::Tensor conv2d_per_sample_cpu(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                                 at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                 int64_t groups, c10::string_view activation) {
  return conv2d_per_sample(x, w, bias, stride, padding, dilation, groups, activation, nullptr);
}

at::Tensor conv2d_backward_data_cpu(const at::Tensor& gz, const at::Tensor& w, at::IntArrayRef input_size,
                                    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                    int64_t groups) {
  return conv2d_backward_data(gz, w, input_size, stride, padding, dilation, groups, nullptr);
}

at::Tensor conv2d_backward_weight_cpu(const at::Tensor& x, const at::Tensor& gz, at::IntArrayRef weight_size,
                                      at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                      int64_t groups) {
  return conv2d_backward_weight(x, gz, weight_size, stride, padding, dilation, groups, nullptr);
}

constexpr int64_t kGrain = 32768;

at::Tensor vector_add_cpu(const at::Tensor& a_in, const at::Tensor& b_in) {
  check_vector_add(a_in, b_in);
  const at::Tensor a = a_in.contiguous(), b = b_in.contiguous();
  at::Tensor out = at::empty(a.sizes(), a.options());
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "convkit_vector_add", [&] {
    const scalar_t* pa = a.data_ptr<scalar_t>();
    const scalar_t* pb = b.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    at::parallel_for(0, a.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) po[i] = pa[i] + pb[i];
    });
  });
  return out;
}

at::Tensor silu_cpu(const at::Tensor& x_in) {
  check_silu(x_in);
  const at::Tensor x = x_in.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "convkit_silu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* px = x.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const acc_t v = static_cast<acc_t>(px[i]);
        po[i] = static_cast<scalar_t>(v / (acc_t(1) + std::exp(-v)));
      }
    });
  });
  return out;
}

at::Tensor csr_matvec_cpu(const at::Tensor& values_in, const at::Tensor& row_ptr_in, const at::Tensor& col_idx_in,
                          const at::Tensor& dense_in) {
  check_csr_matvec(values_in, row_ptr_in, col_idx_in, dense_in);
  const at::Tensor values = values_in.contiguous(), dense = dense_in.contiguous();
  const at::Tensor row_ptr = row_ptr_in.to(at::kLong).contiguous(), col_idx = col_idx_in.to(at::kLong).contiguous();
  const int64_t rows = row_ptr.numel() - 1;
  at::Tensor out = at::empty({rows}, values.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, values.scalar_type(), "convkit_csr_matvec", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* v = values.data_ptr<scalar_t>();
    const scalar_t* d = dense.data_ptr<scalar_t>();
    const int64_t* rp = row_ptr.data_ptr<int64_t>();
    const int64_t* ci = col_idx.data_ptr<int64_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, 256, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        acc_t sum = 0;
        for (int64_t j = rp[r]; j < rp[r + 1]; ++j) sum += static_cast<acc_t>(v[j]) * static_cast<acc_t>(d[ci[j]]);
        o[r] = static_cast<scalar_t>(sum);
      }
    });
  });
  return out;
}

}  // namespace
}  // namespace convkit_ext

TORCH_LIBRARY(convkit, m) {
  m.def(
      "conv2d(Tensor x, Tensor w, Tensor? bias, int[2] stride, int[2] padding, int[2] dilation, int groups, "
      "str activation, Tensor? residual, str algo) -> Tensor");
  m.def(
      "conv2d_per_sample(Tensor x, Tensor w, Tensor? bias, int[2] stride, int[2] padding, int[2] dilation, "
      "int groups, str activation) -> Tensor");
  // The gradients of a convolution (convkit/backward.hpp): on CUDA depthwise problems and dense 16-bit NHWC
  // weight gradients, on the CPU f32.
  m.def(
      "conv2d_backward_data(Tensor grad_out, Tensor weight, int[] input_size, int[2] stride, int[2] padding, "
      "int[2] dilation, int groups) -> Tensor");
  m.def(
      "conv2d_backward_weight(Tensor x, Tensor grad_out, int[] weight_size, int[2] stride, int[2] padding, "
      "int[2] dilation, int groups) -> Tensor");
  m.def("vector_add(Tensor a, Tensor b) -> Tensor");
  m.def("silu(Tensor x) -> Tensor");
  m.def("csr_matvec(Tensor values, Tensor row_ptr, Tensor col_idx, Tensor dense) -> Tensor");
  // torch's max_pool2d without the indices (inference): on CUDA a channels-last 16-byte-vector kernel, else
  // torch's own (convkit.nn.MaxPool2d, which convkit.fuse puts in place of nn.MaxPool2d).
  m.def("max_pool2d(Tensor x, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode) "
        "-> Tensor");
  // Squeeze-excitation's two memory passes (convkit.nn.AdaptiveAvgPool2d and convkit.nn.scale_channels, which
  // convkit.fuse puts in models): torch's adaptive_avg_pool2d(x, 1) and x * s with s of shape (N, C, 1, 1); on
  // CUDA channels-last 16-byte-vector kernels, else torch's own.
  m.def("channel_mean(Tensor x) -> Tensor");
  m.def("scale_channels(Tensor x, Tensor s) -> Tensor");
  // torch's layer_norm(x, x.shape[-1:], weight, bias, eps) (convkit.nn.LayerNorm and LayerNorm2d, which
  // convkit.fuse puts in models: ConvNeXt's norms): on CUDA a kernel with a few lanes a row for a contiguous x,
  // else torch's own.
  m.def("layer_norm_last(Tensor x, Tensor? weight, Tensor? bias, float eps) -> Tensor");
  // Squeeze-excitation's gate, act2(conv1x1(act1(conv1x1(mean(x), w1, b1)), w2, b2)) of shape (N, C, 1, 1)
  // (convkit.nn.SqueezeExcitationGate, which convkit.fuse puts in models): on CUDA one kernel for a
  // channels-last x whose channels fill 16-byte vectors, else torch's ops in float32 (float64 for double).
  m.def("se_gate(Tensor x, Tensor w1, Tensor? b1, Tensor w2, Tensor? b2, str act1, str act2) -> Tensor");
}

TORCH_LIBRARY_IMPL(convkit, CPU, m) {
  m.impl("conv2d", &convkit_ext::conv2d_cpu);
  m.impl("conv2d_per_sample", &convkit_ext::conv2d_per_sample_cpu);
  m.impl("conv2d_backward_data", &convkit_ext::conv2d_backward_data_cpu);
  m.impl("conv2d_backward_weight", &convkit_ext::conv2d_backward_weight_cpu);
  m.impl("vector_add", &convkit_ext::vector_add_cpu);
  m.impl("silu", &convkit_ext::silu_cpu);
  m.impl("csr_matvec", &convkit_ext::csr_matvec_cpu);
  m.impl("max_pool2d", [](const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
                          at::IntArrayRef d, bool ceil_mode) { return at::max_pool2d(x, k, s, p, d, ceil_mode); });
  m.impl("channel_mean", [](const at::Tensor& x) { return at::adaptive_avg_pool2d(x, {1, 1}); });
  m.impl("scale_channels", [](const at::Tensor& x, const at::Tensor& s) { return at::mul(x, s); });
  m.impl("se_gate", [](const at::Tensor& x, const at::Tensor& w1, const c10::optional<at::Tensor>& b1,
                       const at::Tensor& w2, const c10::optional<at::Tensor>& b2, c10::string_view act1,
                       c10::string_view act2) {
    int acts[2];
    convkit_ext::se_gate_check(x, w1, b1, w2, b2, act1, act2, acts);
    return convkit_ext::se_gate_composite(x, w1, b1, w2, b2, acts);
  });
  m.impl("layer_norm_last", [](const at::Tensor& x, const c10::optional<at::Tensor>& w,
                               const c10::optional<at::Tensor>& b, double eps) {
    TORCH_CHECK(x.dim() >= 1, "convkit.layer_norm: x needs at least one dimension.");
    return at::layer_norm(x, {x.size(-1)}, w, b, eps);
  });
}

namespace convkit_ext {
namespace {

// convkit._C.plan(problem, dtype, layout, device, algo, activation="none") -> (algorithm, layout, variant,
// source, workspace bytes, [(algorithm, answer), ...], own variant): what torch.ops.convkit.conv2d runs for x
// of that layout ("nchw"/"nhwc") with that epilogue activation: the library's plan (convkit::plan, the layout
// free on CUDA as in the op), for operands PyTorch allocates (aligned). algorithm "" for "autotune" with no
// tune cache entry (the first run tunes). Raises ValueError for a malformed request and NotImplementedError
// when nothing can run it. `convkit plan` prints the same plan.
PyObject* py_plan(PyObject*, PyObject* args) {
  const char *problem, *dtype, *layout, *device, *algo, *activation = "none";
  if (!PyArg_ParseTuple(args, "sssss|s", &problem, &dtype, &layout, &device, &algo, &activation)) return nullptr;
  try {
    const convkit::Conv2dProblem p = convkit::Conv2dProblem::parse(problem);
    const convkit::RunOptions opt = parse_algo(algo);
    const convkit::ConvConfig cfg{convkit::parse_dtype(dtype), convkit::parse_layout(layout),
                                  convkit::parse_device(device), opt.math};
    convkit::PlanOptions po;
    po.algo = opt.algo;
    po.variant = opt.variant;
    po.any_layout = true;
    convkit::Operands ops;
    ops.activation = convkit::parse_activation(activation);
    const convkit::Plan pl = convkit::plan(p, cfg, ops, po);
    PyObject* verdicts = PyList_New(0);
    if (verdicts == nullptr) return nullptr;
    for (const convkit::PlanVerdict& v : pl.verdicts) {
      PyObject* item = Py_BuildValue("(ss)", v.algorithm.c_str(), v.answer.c_str());
      if (item == nullptr || PyList_Append(verdicts, item) != 0) {
        Py_XDECREF(item);
        Py_DECREF(verdicts);
        return nullptr;
      }
      Py_DECREF(item);
    }
    const std::string name = pl.algorithm ? pl.algorithm->name() : std::string();
    // With no variant named, the one the algorithm runs by itself: its variants()' first.
    std::string own;
    if (pl.algorithm && pl.variant.empty()) {
      const std::vector<std::string> vs = pl.algorithm->variants(p, pl.config);
      if (!vs.empty()) own = vs.front();
    }
    return Py_BuildValue("(ssssKNs)", name.c_str(), convkit::to_string(pl.config.layout), pl.variant.c_str(),
                         pl.source.c_str(), static_cast<unsigned long long>(pl.workspace_bytes), verdicts,
                         own.c_str());
  } catch (const convkit::Error& e) {
    const bool unsupported =
        e.code() == convkit::StatusCode::unsupported || e.code() == convkit::StatusCode::not_available;
    PyErr_SetString(unsupported ? PyExc_NotImplementedError : PyExc_ValueError,
                    (std::string("convkit.plan: ") + e.what()).c_str());
    return nullptr;
  } catch (const std::exception& e) {  // nothing may unwind through the C API
    PyErr_SetString(PyExc_RuntimeError, (std::string("convkit.plan: ") + e.what()).c_str());
    return nullptr;
  }
}

// convkit._C.cpu_bf16_native() -> bool: convkit::cpu_bf16_native() (bfloat16 NHWC on the CPU's dot product).
PyObject* py_cpu_bf16_native(PyObject*, PyObject*) { return PyBool_FromLong(convkit::cpu_bf16_native() ? 1 : 0); }

// convkit._C.cpu_float32_gemm() -> str: convkit::cpu_float32_gemm() (which float32 GEMM the CPU algorithms
// call, and why).
PyObject* py_cpu_float32_gemm(PyObject*, PyObject*) {
  try {
    const std::string s = convkit::cpu_float32_gemm();
    return PyUnicode_FromString(s.c_str());
  } catch (const std::exception& e) {  // nothing may unwind through the C API
    PyErr_SetString(PyExc_RuntimeError, (std::string("convkit.cpu_float32_gemm: ") + e.what()).c_str());
    return nullptr;
  }
}

PyMethodDef methods[] = {
    {"plan", py_plan, METH_VARARGS,
     "plan(problem, dtype, layout, device, algo, activation='none') -> (algorithm, layout, variant, source, "
     "workspace, verdicts, own variant)"},
    {"cpu_bf16_native", py_cpu_bf16_native, METH_NOARGS,
     "cpu_bf16_native() -> bool: bfloat16 NHWC convolutions on the CPU run on its bfloat16 dot product"},
    {"cpu_float32_gemm", py_cpu_float32_gemm, METH_NOARGS,
     "cpu_float32_gemm() -> str: the float32 GEMM of the CPU algorithms (OpenBLAS's or oneDNN's) and why"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace
}  // namespace convkit_ext

// `import convkit._C` loads this library (and so runs the registrations above).
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", "convkit's torch.ops.convkit operators", -1,
                                   convkit_ext::methods, nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&def);
}
