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
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "convkit/convkit.hpp"
#include "convkit/per_sample.hpp"
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

bool library_selects(const convkit::RunOptions& o) { return o.algo == "auto" || o.algo == "autotune"; }

// "auto" and "autotune" pick the variant themselves; the library's own message for "auto[v]".
void check_no_variant(const convkit::RunOptions& o) {
  if (library_selects(o) && !o.variant.empty())
    throw convkit::Error(convkit::StatusCode::invalid_problem, "variant '" + o.variant +
                                                                   "' needs a named algorithm; \"" + o.algo +
                                                                   "\" picks its own.");
}

convkit::Conv2dProblem make_problem(const char* op, const at::Tensor& x, int64_t k, int64_t cg, int64_t r,
                                    int64_t s, at::IntArrayRef stride, at::IntArrayRef padding,
                                    at::IntArrayRef dilation, int64_t groups) {
  const auto st = pair_arg(op, "stride", stride), pd = pair_arg(op, "padding", padding),
             dl = pair_arg(op, "dilation", dilation);
  TORCH_CHECK_VALUE(groups >= 1, op, ": groups must be at least 1; got ", groups, ".");
  TORCH_CHECK_VALUE(cg * groups == x.size(1), op, ": the weight has ", cg, " input channels per group, so with groups=",
                    groups, " x needs ", cg * groups, " channels; it has ", x.size(1), " (x ", shape_str(x), ").");
  TORCH_CHECK_VALUE(k % groups == 0, op, ": ", k, " output channels cannot be split into groups=", groups, ".");
  convkit::Conv2dProblem p;
  p.n = std::max<int64_t>(x.size(0), 1); p.c = x.size(1); p.h = x.size(2); p.w = x.size(3);
  p.k = k; p.r = r; p.s = s;
  p.stride_h = st[0]; p.stride_w = st[1];
  p.pad_h = pd[0]; p.pad_w = pd[1];
  p.dilation_h = dl[0]; p.dilation_w = dl[1];
  p.groups = groups;
  if (convkit::Status v = p.validate(); !v.ok()) rethrow(op, convkit::Error(v));
  p.n = x.size(0);  // an empty batch is valid in PyTorch: the caller returns an empty output
  return p;
}

// The registry position of the heuristic's choice for `cfg` (the first available algorithm of the device that
// can implement the problem: convkit::select()'s rule), or algorithms().size() when none can. Computed here
// rather than with select() because select() prints the CONVKIT_LOG=dispatch line of that (problem, config),
// which is printed once per process: a layout probe must not take the place of the real choice's line.
size_t heuristic_rank(const convkit::Conv2dProblem& p, const convkit::ConvConfig& cfg) {
  const auto& algos = convkit::algorithms();
  for (size_t i = 0; i < algos.size(); ++i) {
    const convkit::Algorithm* a = algos[i];
    if (a->device() == cfg.device && !a->is_peer() && a->available() && a->can_implement(p, cfg)) return i;
  }
  return algos.size();
}

// The layout a CUDA request in `layout` is computed in: the tensor-core kernels (f16/bf16, and f32 with
// "/tf32") read NHWC activations and KRSC weights only, the fast fp32 kernels NCHW only, so an NCHW bf16 tensor
// or a channels_last fp32 one would otherwise fall through to a slow reference kernel. The rule asks the
// library rather than naming dtypes: for "auto" and "autotune", the other layout is used when the heuristic's
// choice for it comes earlier in the registry (which is ordered fast first) than the one for `layout`; for a
// named algorithm, when that algorithm accepts the other layout but not `layout`. The heuristic ranks (not the
// tune cache) decide, so the layout, and with it the tune cache key that "auto" looks up and "autotune" fills,
// does not change with the cache's contents. The cost is one layout transform each way (x and the residual
// in, the output out; the weight too unless it is already in that layout).
// NOTE: fp32 channels_last ran cuda_direct_naive before the NHWC -> NCHW direction was added: 29 ms for the
// ResNet-50 bottleneck (bench_torch, fourth session).
convkit::Layout preferred_cuda_layout(const convkit::Conv2dProblem& p, convkit::DType dtype, convkit::Layout layout,
                                      const convkit::RunOptions& opt) {
  const convkit::Layout other = layout == convkit::Layout::nchw ? convkit::Layout::nhwc : convkit::Layout::nchw;
  const convkit::ConvConfig here{dtype, layout, convkit::Device::cuda, opt.math};
  const convkit::ConvConfig there{dtype, other, convkit::Device::cuda, opt.math};
  if (library_selects(opt)) return heuristic_rank(p, there) < heuristic_rank(p, here) ? other : layout;
  const convkit::Algorithm* a = convkit::find_algorithm(opt.algo);
  if (a == nullptr || a->device() != convkit::Device::cuda || !a->available()) return layout;
  return !a->can_implement(p, here) && a->can_implement(p, there) ? other : layout;
}

// The layout the library computes in, for x in `layout`: `layout` itself on the CPU, on CUDA the one
// preferred_cuda_layout() names (the op then transforms on the way in and out), remembered per request.
// NOTE: the first version ranked on every call (every algorithm's can_implement, twice). With it the eager
// bf16 bottleneck took 1.54x torch's eager time (0.64 vs 0.41 ms; 1.10x in the fourth session, when
// channels_last inputs skipped the ranking) and the BN-folded block 0.357 ms eager against 0.144 ms
// replayed from a CUDA graph (0.144 both ways before): host time. The ranking is the one host-side change
// on that path, but its cost was not isolated. With this cache (sixth session, H200) the eager bf16
// bottleneck still varied from 0.54x to 0.64x torch over four runs while its graph replay held 0.92-0.94x:
// the op's host path is still the eager bound, and this cache's own share is still not isolated.
convkit::Layout compute_layout(const convkit::Conv2dProblem& p, convkit::DType dtype, convkit::Layout layout,
                               convkit::Device device, const convkit::RunOptions& opt) {
  if (device != convkit::Device::cuda || p.n <= 0) return layout;
  static std::mutex mu;
  static std::map<std::string, convkit::Layout> known;
  const std::string key = p.to_string() + " " +
                          convkit::ConvConfig{dtype, layout, device, opt.math}.to_string() + " " + opt.algo;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  const convkit::Layout l = preferred_cuda_layout(p, dtype, layout, opt);
  std::lock_guard<std::mutex> lock(mu);
  known.emplace(key, l);
  return l;
}

// Whether this is the first time in the process that the op runs (problem, config) with "autotune".
bool first_autotune_sight(const convkit::Conv2dProblem& p, const convkit::ConvConfig& cfg) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  return seen.insert(p.to_string() + " " + cfg.to_string()).second;
}

// Turns "auto" and "autotune" into what the library's conv2d would run (docs/tuning.md), so that the op can run
// it by name with a workspace of its own: opt.algo and opt.variant become the tune cache's entry for this
// (problem, config, device) if one applies, else (for "auto") the heuristic's choice. "autotune" is left to the
// library when it has to tune (a cache miss): convkit::conv2d(algo = "autotune") times the candidates, stores
// the winner and runs it, with a workspace it allocates itself (once: later calls find the entry). It is also
// left to the library the first time the op sees a key with "autotune", even when the cache already has it: a
// lookup through select_auto() would print the CONVKIT_LOG=dispatch line of the key as "from heuristic" on a
// miss, and that line is printed once per process; the library's own call prints the true one.
// NOTE: remembered per (problem, config, device, algo, the environment that names the tune cache and the
// dispatch log) until the tune cache's generation changes: select_auto() builds its cache key from strings
// and asks every algorithm in turn, about 7 us of the op's ~23 us host time per call on the CPU (a 4x6x6
// problem; F.conv2d takes ~6 us). A miss, or a new generation (an entry stored, a cache opened), asks again.
void resolve_selection(const convkit::Conv2dProblem& p, const convkit::ConvConfig& cfg, int device_index,
                       convkit::RunOptions& opt) {
  check_no_variant(opt);
  if (!library_selects(opt)) return;
  const bool tune = opt.algo == "autotune";
  if (tune && first_autotune_sight(p, cfg)) return;
  struct Choice {
    std::uint64_t generation;
    std::string algo, variant;  // algo empty: "autotune" with no cache entry (the library decides)
  };
  static std::mutex mu;
  static std::map<std::string, Choice> known;
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string("\x01");
  };
  const int64_t fields[] = {p.n, p.c, p.h, p.w, p.k, p.r, p.s, p.pad_h, p.pad_w, p.stride_h, p.stride_w,
                            p.dilation_h, p.dilation_w, p.groups, int64_t(cfg.dtype), int64_t(cfg.layout),
                            int64_t(cfg.device), int64_t(cfg.math), device_index};
  const std::string key = std::string(reinterpret_cast<const char*>(fields), sizeof fields) + opt.algo + '\0' +
                          env("CONVKIT_TUNE_CACHE") + '\0' + env("XDG_CACHE_HOME") + '\0' + env("HOME") + '\0' +
                          env("CONVKIT_LOG");
  const std::uint64_t generation = convkit::tune_cache_generation();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known.find(key); it != known.end() && it->second.generation == generation) {
      if (it->second.algo.empty()) return;
      opt.algo = it->second.algo;
      opt.variant = it->second.variant;
      return;
    }
  }
  const convkit::Selection sel = convkit::select_auto(p, cfg);
  Choice c{generation, {}, {}};
  if (!tune || sel.source == "tune cache") c = Choice{generation, sel.algorithm->name(), sel.variant};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (known.size() > 4096) known.clear();
    known[key] = c;
  }
  if (c.algo.empty()) return;
  opt.algo = c.algo;
  opt.variant = c.variant;
}

// The workspace of the named algorithm (and variant) in `opt`, from PyTorch's caching allocator on x's device,
// recorded in opt. None when it needs none, when the library selects at run time ("autotune" on a miss), or
// when the library will refuse the request anyway (its error then says why).
at::Tensor workspace_for(const convkit::Conv2dProblem& p, const convkit::ConvConfig& cfg, const at::Tensor& x,
                         convkit::RunOptions& opt) {
  if (library_selects(opt)) return {};
  const convkit::Algorithm* a = convkit::find_algorithm(opt.algo);
  if (a == nullptr || a->device() != cfg.device || !a->available() || !a->can_implement(p, cfg)) return {};
  size_t bytes = 0;
  if (opt.variant.empty()) {
    bytes = a->workspace_bytes(p, cfg);
  } else {
    const std::vector<std::string> vs = a->variants(p, cfg);
    if (std::find(vs.begin(), vs.end(), opt.variant) == vs.end()) return {};
    bytes = a->variant_workspace_bytes(p, cfg, opt.variant);
  }
  if (bytes == 0) return {};
  at::Tensor ws = at::empty({static_cast<int64_t>(bytes)}, x.options().dtype(at::kByte));
  opt.workspace = ws.data_ptr();
  opt.workspace_bytes = bytes;
  return ws;
}

convkit::Activation activation_of(const char* op, c10::string_view a) {
  try {
    return convkit::parse_activation(std::string(a));
  } catch (const convkit::Error& e) {
    rethrow(op, e);
  }
}

}  // namespace

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
  opt.stream = stream;
  // On CUDA, a layout with no fast kernel for the request (NCHW bf16, channels_last fp32) is computed in the
  // other one, a transform each way (see preferred_cuda_layout). The output keeps x's memory format, as the
  // fake implementation (convkit/_meta.py) says.
  const convkit::Layout x_layout = layout_of(x_in);
  const convkit::Device device = x_in.is_cuda() ? convkit::Device::cuda : convkit::Device::cpu;
  const convkit::Layout layout =
      x_in.numel() > 0 ? compute_layout(p, dtype_of(op, "x", x_in), x_layout, device, opt) : x_layout;
  const bool transformed = layout != x_layout;
  const at::MemoryFormat mf = format_of(layout);
  // Tensors already in `mf` are used in place: contiguous() is a no-op.
  const at::Tensor x = x_in.contiguous(mf);
  const at::Tensor w = w_in.contiguous(mf);  // KCRS, or KRSC for channels_last
  at::Tensor out = at::empty(out_shape, x.options().memory_format(mf));
  const auto result = [&](at::Tensor& t) { return transformed ? t.contiguous(format_of(x_layout)) : t; };
  if (out.numel() == 0 || x.numel() == 0) return result(out.zero_());
  at::Tensor bias, residual;
  convkit::Epilogue epi;
  epi.activation = act;
  if (bias_in) {
    bias = bias_in->contiguous();
    epi.bias = bias.data_ptr();
  }
  if (residual_in) {
    residual = residual_in->contiguous(mf);
    epi.residual = residual.data_ptr();
  }
  try {
    const convkit::TensorView src = to_view(op, "x", x, layout), wei = to_view(op, "weight", w, layout),
                              dst = to_view(op, "out", out, layout);
    const convkit::ConvConfig cfg{src.dtype, layout, src.device, opt.math};
    if (convkit::Status s = convkit::validate_tensors(p, cfg, src, wei, dst, epi); !s.ok()) throw convkit::Error(s);
    // The library's choice, resolved here so that its workspace comes from PyTorch's caching allocator.
    resolve_selection(p, cfg, x.is_cuda() ? int(x.get_device()) : -1, opt);
    const at::Tensor ws = workspace_for(p, cfg, x, opt);
    convkit::conv2d(p, src, wei, dst, epi, opt);
  } catch (const convkit::Error& e) {
    rethrow(op, e);
  }
  return result(out);
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
    convkit::RunOptions opt;
    opt.stream = stream;
    convkit::conv2d_per_sample(p, to_view(op, "x", x, layout), to_view(op, "weight", w, layout),
                               to_view(op, "out", out, layout), epi, opt);
  } catch (const convkit::Error& e) {
    rethrow(op, e);
  }
  return out;
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
  m.def("vector_add(Tensor a, Tensor b) -> Tensor");
  m.def("silu(Tensor x) -> Tensor");
  m.def("csr_matvec(Tensor values, Tensor row_ptr, Tensor col_idx, Tensor dense) -> Tensor");
}

TORCH_LIBRARY_IMPL(convkit, CPU, m) {
  m.impl("conv2d", &convkit_ext::conv2d_cpu);
  m.impl("conv2d_per_sample", &convkit_ext::conv2d_per_sample_cpu);
  m.impl("vector_add", &convkit_ext::vector_add_cpu);
  m.impl("silu", &convkit_ext::silu_cpu);
  m.impl("csr_matvec", &convkit_ext::csr_matvec_cpu);
}

namespace convkit_ext {
namespace {

// convkit._C.plan(problem, dtype, layout, device, algo) -> (algorithm, layout, variant, source): what
// torch.ops.convkit.conv2d runs for x of that layout ("nchw"/"nhwc"), by the op's own rules (compute_layout, then
// resolve_selection's). source: "tune cache" or "heuristic" for "auto" (convkit::select_auto), "tune cache" or
// "autotune" for "autotune" (then the algorithm and variant are "": the first run tunes), "named" for a named
// algorithm. variant "" = the algorithm's own choice. Raises ValueError for a malformed request and
// NotImplementedError when nothing can run it.
PyObject* py_plan(PyObject*, PyObject* args) {
  const char *problem, *dtype, *layout, *device, *algo;
  if (!PyArg_ParseTuple(args, "sssss", &problem, &dtype, &layout, &device, &algo)) return nullptr;
  try {
    const convkit::Conv2dProblem p = convkit::Conv2dProblem::parse(problem);
    if (convkit::Status v = p.validate(); !v.ok()) throw convkit::Error(v);
    const convkit::RunOptions opt = parse_algo(algo);
    check_no_variant(opt);
    const convkit::DType dt = convkit::parse_dtype(dtype);
    const convkit::Device dev = convkit::parse_device(device);
    const convkit::Layout l = compute_layout(p, dt, convkit::parse_layout(layout), dev, opt);
    std::string name, variant, source;
    if (library_selects(opt)) {
      const convkit::Selection sel = convkit::select_auto(p, convkit::ConvConfig{dt, l, dev, opt.math});
      if (opt.algo == "autotune" && sel.source != "tune cache") {
        source = "autotune";
      } else {
        name = sel.algorithm->name();
        variant = sel.variant;
        source = sel.source;
      }
    } else if (const convkit::Algorithm* a = convkit::find_algorithm(opt.algo)) {
      name = a->name();
      variant = opt.variant;
      source = "named";
      if (!variant.empty()) {  // the op's (the library's) refusal of a variant the algorithm does not offer
        const std::vector<std::string> vs = a->variants(p, convkit::ConvConfig{dt, l, dev, opt.math});
        if (std::find(vs.begin(), vs.end(), variant) == vs.end())
          throw convkit::Error(convkit::StatusCode::invalid_problem,
                               name + " has no variant '" + variant + "' for " + p.to_string() + ".");
      }
    } else {
      throw convkit::Error(convkit::StatusCode::invalid_problem, "unknown algorithm '" + opt.algo + "'.");
    }
    return Py_BuildValue("(ssss)", name.c_str(), convkit::to_string(l), variant.c_str(), source.c_str());
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

PyMethodDef methods[] = {
    {"plan", py_plan, METH_VARARGS, "plan(problem, dtype, layout, device, algo) -> (algorithm, layout, variant, source)"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace
}  // namespace convkit_ext

// `import convkit._C` loads this library (and so runs the registrations above).
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", "convkit's torch.ops.convkit operators", -1,
                                   convkit_ext::methods, nullptr, nullptr, nullptr, nullptr};
  return PyModule_Create(&def);
}
