// `convkit run`: one convolution on .npy files, with PyTorch F.conv2d semantics (NCHW input [N,C,H,W],
// weight [K,C/groups,R,S], optional bias [K] and residual of the output's shape), plus the fused epilogue.
// Files are float32 or float16; --dtype picks the tensors' dtype (default: the input file's), converting the
// files on load (bf16 always comes from conversion: NumPy has no bfloat16). The output is float16 for f16
// and float32 otherwise.
#include <fmt/format.h>

#include <cctype>

#include "commands.hpp"
#include "common.hpp"
#include "npy.hpp"

namespace convkit::cli {
namespace {

// "S" or "SH,SW" -> {h, w}; `min` is the smallest accepted value.
std::pair<int64_t, int64_t> parse_pair(const std::string& flag, const std::string& v, int64_t min) {
  const auto parts = split(v, ',');
  auto fail = [&] {
    return UsageError(fmt::format("{}: expected an integer >= {} or two of them as H,W, got '{}'", flag, min, v));
  };
  if (parts.empty() || parts.size() > 2 || v.back() == ',' || v.front() == ',') throw fail();
  int64_t x[2];
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p.empty() || p.size() > 9) throw fail();
    for (char c : p)
      if (!std::isdigit(static_cast<unsigned char>(c))) throw fail();
    x[i] = std::stoll(p);
    if (x[i] < min) throw fail();
  }
  return parts.size() == 1 ? std::pair{x[0], x[0]} : std::pair{x[0], x[1]};
}

std::vector<int64_t> dims_vec(const std::array<int64_t, 4>& d) { return {d[0], d[1], d[2], d[3]}; }

// Host bytes on `device`: copied to a device buffer for CUDA, used in place on the CPU.
struct Operand {
  Buffer buf;
  void* ptr = nullptr;
};
Operand place(Device device, std::vector<unsigned char>& host) {
  Operand o;
  if (device == Device::cpu) {
    o.ptr = host.data();
    return o;
  }
  o.buf = Buffer(device, host.size());
  o.buf.copy_from_host(host.data(), host.size());
  o.ptr = o.buf.data();
  return o;
}

}  // namespace

CLI::App* add_run(CLI::App& app, RunCmdOptions& o) {
  CLI::App* sub = app.add_subcommand("run", "Run one convolution on .npy files (PyTorch F.conv2d semantics).");
  sub->add_option("--input", o.input, "input X.npy, float32 or float16 [N,C,H,W]")->required();
  sub->add_option("--weight", o.weight, "weight W.npy [K,C/groups,R,S]")->required();
  sub->add_option("--bias", o.bias, "bias B.npy [K]");
  sub->add_option("--residual", o.residual, "residual R.npy added to the output (the output's shape)");
  sub->add_option("--stride", o.stride, "S or SH,SW")->capture_default_str();
  sub->add_option("--padding", o.padding, "P or PH,PW")->capture_default_str();
  sub->add_option("--dilation", o.dilation, "D or DH,DW")->capture_default_str();
  sub->add_option("--groups", o.groups, "groups (C and K divisible by it)")->capture_default_str();
  sub->add_option("--activation", o.activation, "none|relu|silu|gelu|relu6|hardswish|sigmoid|hardsigmoid")->capture_default_str();
  sub->add_option("--algo", o.algo, "algorithm name (see `convkit list`), auto, or autotune (time the candidates, "
                                    "cache the winner)")
      ->capture_default_str();
  sub->add_option("--variant", o.variant, "with a named algorithm: one of its tunable variants");
  sub->add_option("--device", o.device, "cpu|cuda|auto")->capture_default_str();
  sub->add_option("--dtype", o.dtype,
                  "auto|f32|f16|bf16|tf32: the tensors' dtype; auto = the input file's (float32 -> f32, float16 -> "
                  "f16). Files (float32 '<f4' or float16 '<f2') are converted on load: bf16 reads float32 files "
                  "(NumPy has no bfloat16); tf32 = f32 tensors with tf32 math")
      ->capture_default_str();
  sub->add_option("--output", o.output, "output Y.npy [N,K,P,Q], float16 for f16 and float32 otherwise (written "
                                        "atomically)")
      ->required();
  return sub;
}

int run_run(const RunCmdOptions& o) {
  // Flags first, so a typo fails before any file is read.
  const auto [stride_h, stride_w] = parse_pair("--stride", o.stride, 1);
  const auto [pad_h, pad_w] = parse_pair("--padding", o.padding, 0);
  const auto [dil_h, dil_w] = parse_pair("--dilation", o.dilation, 1);
  if (o.groups < 1) throw UsageError(fmt::format("--groups: must be at least 1, got {}", o.groups));
  Epilogue epi;
  try {
    epi.activation = parse_activation(o.activation);
  } catch (const Error& e) {
    throw UsageError(std::string("--activation: ") + e.what());
  }
  if (o.algo != "auto" && o.algo != "autotune" && find_algorithm(o.algo) == nullptr)
    throw UsageError("unknown algorithm '" + o.algo + "' (see `convkit list`)");
  if (!o.variant.empty() && (o.algo == "auto" || o.algo == "autotune"))
    throw UsageError("--variant needs a named algorithm (--algo NAME)");
  ConvConfig cfg;
  if (o.dtype != "auto") apply_dtype_flags(o.dtype, "", cfg);
  const Device device = resolve_device(o.device);

  const NpyArray x = read_npy(o.input), w = read_npy(o.weight);
  if (o.dtype == "auto") cfg.dtype = x.dtype;
  if (x.shape.size() != 4)
    throw UsageError(o.input + ": the input must be 4-D [N,C,H,W], got shape " + shape_string(x.shape));
  if (w.shape.size() != 4)
    throw UsageError(o.weight + ": the weight must be 4-D [K,C/groups,R,S], got shape " + shape_string(w.shape));

  Conv2dProblem p;
  p.n = x.shape[0], p.c = x.shape[1], p.h = x.shape[2], p.w = x.shape[3];
  p.k = w.shape[0], p.r = w.shape[2], p.s = w.shape[3];
  p.pad_h = pad_h, p.pad_w = pad_w, p.stride_h = stride_h, p.stride_w = stride_w;
  p.dilation_h = dil_h, p.dilation_w = dil_w, p.groups = o.groups;
  if (p.c % p.groups == 0 && w.shape[1] != p.c / p.groups)
    throw UsageError(fmt::format("{}: weight shape {} does not fit input channels C={} with groups={}: its second "
                                 "dim must be C/groups = {}",
                                 o.weight, shape_string(w.shape), p.c, p.groups, p.c / p.groups));
  if (Status s = p.validate(); !s.ok()) throw UsageError("invalid convolution " + p.to_string() + ": " + s.message);

  const auto out_dims = dims_vec(output_dims(p));
  NpyArray b, r;
  if (!o.bias.empty()) {
    b = read_npy(o.bias);
    if (b.shape != std::vector<int64_t>{p.k})
      throw UsageError(fmt::format("{}: the bias must have shape ({},) (K), got {}", o.bias, p.k, shape_string(b.shape)));
  }
  if (!o.residual.empty()) {
    r = read_npy(o.residual);
    if (r.shape != out_dims)
      throw UsageError(fmt::format("{}: the residual must have the output's shape {}, got {}", o.residual,
                                   shape_string(out_dims), shape_string(r.shape)));
  }

  const DType dt = cfg.dtype;
  std::vector<unsigned char> xh = x.as(dt), wh = w.as(dt), bh = b.shape.empty() ? std::vector<unsigned char>() : b.as(dt),
                             rh = r.shape.empty() ? std::vector<unsigned char>() : r.as(dt);
  std::vector<unsigned char> y(static_cast<size_t>(p.output_elems()) * dtype_size(dt));
  Operand xs = place(device, xh), ws = place(device, wh);
  Operand bs = bh.empty() ? Operand{} : place(device, bh);
  Operand rs = rh.empty() ? Operand{} : place(device, rh);
  Buffer ybuf;
  void* yptr = y.data();
  if (device == Device::cuda) {
    ybuf = Buffer(device, y.size());
    yptr = ybuf.data();
  }
  const TensorView src{xs.ptr, dt, Layout::nchw, device, input_dims(p)};
  const TensorView wei{ws.ptr, dt, Layout::nchw, device, weight_dims(p)};
  const TensorView dst{yptr, dt, Layout::nchw, device, output_dims(p)};
  epi.bias = bs.ptr;
  epi.residual = rs.ptr;
  // The planner picks the layout too: NCHW files are computed in NHWC when the fastest algorithm for the
  // request reads NHWC only (the tensor-core kernels: f16, bf16, tf32 on CUDA), through layout transforms.
  PlanOptions po;
  po.algo = o.algo;
  po.variant = o.variant;
  po.any_layout = true;
  const ConvConfig request{dt, Layout::nchw, device, cfg.math};
  const convkit::Plan pl = plan(p, request, convkit::Operands::of(src, wei, dst, epi), po);
  if (!pl.transforms()) {
    execute(pl, p, src, wei, dst, epi);
  } else {
    auto moved = [&](const TensorView& t, Buffer& b) {
      b = Buffer(device, t.bytes());
      TensorView v = t;
      v.data = b.data();
      v.layout = pl.config.layout;
      return v;
    };
    Buffer xb, wb, yb, rb;
    const TensorView xn = moved(src, xb), wn = moved(wei, wb), yn = moved(dst, yb);
    transform_layout(src, xn);
    transform_layout(wei, wn);
    Epilogue e = epi;
    if (epi.residual != nullptr) {
      TensorView r = dst;
      r.data = const_cast<void*>(epi.residual);
      const TensorView rn = moved(r, rb);
      transform_layout(r, rn);
      e.residual = rn.data;
    }
    execute(pl, p, xn, wn, yn, e);
    transform_layout(yn, dst);
  }
  if (device == Device::cuda) {
    device_synchronize(device);
    ybuf.copy_to_host(y.data(), y.size());
  }
  write_npy(o.output, out_dims, y.data(), dt);
  return 0;
}

}  // namespace convkit::cli
