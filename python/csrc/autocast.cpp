// torch.autocast for convkit's ops, as PyTorch's own ops behave in an autocast region:
//  - the convolutions (convkit::conv2d, conv2d_per_sample, and _conv2d_autograd, what convkit.conv2d calls with
//    convkit._autograd.BACKWARD = "aten") return the region's dtype, as torch's conv2d does (autocast's "lower
//    precision" list). On CUDA they compute in it: every floating-point tensor argument on the region's device
//    is cast to it, a weight once a region (at::autocast::cached_cast). On the CPU they do so in a bfloat16
//    region for a channels-last input where the CPU computes bfloat16 natively (convkit::cpu_bf16_native());
//    otherwise they compute in float32 and cast the output (compute_dtype says why). An algo that names
//    float32 math ("/tf32") is an explicit request and keeps float32.
//  - layer_norm_last runs in float32 on CUDA, as torch's layer_norm does there (CUDA autocast's float32 list;
//    CPU autocast leaves layer_norm alone, and so does this).
// Without these kernels an autocast region would leave convkit's convolutions in float32: slower, and not what
// the region asks for. The other ops (the pools, the channel scale) take the dtypes they are given, as torch's
// do. Registered for the CPU and CUDA autocast keys; a cast is an ordinary op above autograd, so gradients
// flow back through it to the float32 weights.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "convkit/system.hpp"

namespace convkit_ext {
namespace {

using Conv2dSig = at::Tensor(const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&, at::IntArrayRef,
                             at::IntArrayRef, at::IntArrayRef, int64_t, c10::string_view,
                             const c10::optional<at::Tensor>&, c10::string_view);
using Conv2dAutogradSig = at::Tensor(const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
                                     at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, int64_t, c10::string_view,
                                     const c10::optional<at::Tensor>&, c10::string_view, bool);
using PerSampleSig = at::Tensor(const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
                                at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, int64_t, c10::string_view);
using LayerNormSig = at::Tensor(const at::Tensor&, const c10::optional<at::Tensor>&,
                                const c10::optional<at::Tensor>&, double);

template <typename Sig>
c10::TypedOperatorHandle<Sig> op_of(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// The region's casts on device type kDev: the tensors autocast may cast (floating point, on kDev, not double)
// go to `to`, the others stay as they are.
template <c10::DeviceType kDev>
struct Region {
  at::ScalarType to;
  c10::impl::ExcludeDispatchKeyGuard below{at::autocast::get_autocast_dispatch_key_from_device_type(kDev)};

  explicit Region(at::ScalarType t) : to(t) {}
  at::Tensor operator()(const at::Tensor& t) const { return at::autocast::cached_cast(to, t, kDev); }
  c10::optional<at::Tensor> operator()(const c10::optional<at::Tensor>& t) const {
    return at::autocast::cached_cast(to, t, kDev);
  }
};

bool names_tf32(c10::string_view algo) { return algo.size() >= 5 && algo.substr(algo.size() - 5) == "/tf32"; }

// The dtype a convolution of x computes in: the region's on CUDA. On the CPU the region's where that is
// bfloat16, x is channels-last and the CPU computes bfloat16 NHWC natively (its dot product: a fused ResNet-50
// at 160x160 on 2 Zen 4 threads, 20 ms a forward in bfloat16 against 34 in float32); elsewhere float32, the
// output then cast to the region's dtype so that the dtypes are torch's: there convkit's CPU convolutions
// widen 16-bit operands to float32 anyway (cpu_im2col_gemm's NCHW and float16 paths, cpu_depthwise), so
// casting the inputs would only round them. An explicit "/tf32" keeps float32 throughout.
template <c10::DeviceType kDev>
at::ScalarType compute_dtype(c10::string_view algo, const at::Tensor& x) {
  if (names_tf32(algo)) return at::kFloat;
  const at::ScalarType region = at::autocast::get_autocast_dtype(kDev);
  if (kDev != c10::DeviceType::CPU) return region;
  const bool native = region == at::kBFloat16 && x.dim() == 4 &&
                      x.suggest_memory_format() == at::MemoryFormat::ChannelsLast && convkit::cpu_bf16_native();
  return native ? region : at::kFloat;
}

// y in the dtype the region's op returns (see compute_dtype).
template <c10::DeviceType kDev>
at::Tensor region_output(const at::Tensor& y, c10::string_view algo) {
  if (kDev != c10::DeviceType::CPU || names_tf32(algo) || !y.is_floating_point()) return y;
  return y.to(at::autocast::get_autocast_dtype(kDev));  // (a no-op where it computed in the region's dtype)
}

template <c10::DeviceType kDev>
at::Tensor conv2d_autocast(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                           c10::string_view act, const c10::optional<at::Tensor>& residual, c10::string_view algo) {
  static const auto op = op_of<Conv2dSig>("convkit::conv2d");
  const Region<kDev> cast(compute_dtype<kDev>(algo, x));
  return region_output<kDev>(
      op.call(cast(x), cast(w), cast(bias), stride, padding, dilation, groups, act, cast(residual), algo), algo);
}

template <c10::DeviceType kDev>
at::Tensor conv2d_autograd_autocast(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                                    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                    int64_t groups, c10::string_view act, const c10::optional<at::Tensor>& residual,
                                    c10::string_view algo, bool aten_backward) {
  static const auto op = op_of<Conv2dAutogradSig>("convkit::_conv2d_autograd");
  const Region<kDev> cast(compute_dtype<kDev>(algo, x));
  return region_output<kDev>(op.call(cast(x), cast(w), cast(bias), stride, padding, dilation, groups, act,
                                     cast(residual), algo, aten_backward),
                             algo);
}

template <c10::DeviceType kDev>
at::Tensor per_sample_autocast(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                               at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                               int64_t groups, c10::string_view act) {
  static const auto op = op_of<PerSampleSig>("convkit::conv2d_per_sample");
  // (per-sample weights on the CPU are float32 only: cpu_per_sample)
  const Region<kDev> cast(kDev == c10::DeviceType::CPU ? at::kFloat : compute_dtype<kDev>("", x));
  return region_output<kDev>(op.call(cast(x), cast(w), cast(bias), stride, padding, dilation, groups, act), "");
}

template <c10::DeviceType kDev>
at::Tensor layer_norm_autocast(const at::Tensor& x, const c10::optional<at::Tensor>& w,
                               const c10::optional<at::Tensor>& b, double eps) {
  static const auto op = op_of<LayerNormSig>("convkit::layer_norm_last");
  const Region<kDev> cast(at::kFloat);
  return op.call(cast(x), cast(w), cast(b), eps);
}

}  // namespace
}  // namespace convkit_ext

TORCH_LIBRARY_IMPL(convkit, AutocastCPU, m) {
  m.impl("conv2d", &convkit_ext::conv2d_autocast<c10::DeviceType::CPU>);
  m.impl("_conv2d_autograd", &convkit_ext::conv2d_autograd_autocast<c10::DeviceType::CPU>);
  m.impl("conv2d_per_sample", &convkit_ext::per_sample_autocast<c10::DeviceType::CPU>);
}

TORCH_LIBRARY_IMPL(convkit, AutocastCUDA, m) {
  m.impl("conv2d", &convkit_ext::conv2d_autocast<c10::DeviceType::CUDA>);
  m.impl("_conv2d_autograd", &convkit_ext::conv2d_autograd_autocast<c10::DeviceType::CUDA>);
  m.impl("conv2d_per_sample", &convkit_ext::per_sample_autocast<c10::DeviceType::CUDA>);
  m.impl("layer_norm_last", &convkit_ext::layer_norm_autocast<c10::DeviceType::CUDA>);
}
