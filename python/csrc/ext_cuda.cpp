// CUDA registrations of torch.ops.convkit (CUDA builds only): each op runs under a device guard for its
// tensors' GPU and enqueues on PyTorch's current stream. Convolutions go to the convkit library; the seed's
// example ops to the small kernels in kernels.cu.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ext.hpp"
#include "kernels.hpp"

namespace convkit_ext {
namespace {

void* current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

Kind kind_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return Kind::f32;
    case at::kDouble: return Kind::f64;
    case at::kHalf: return Kind::f16;
    case at::kBFloat16: return Kind::bf16;
    case at::kInt: return Kind::i32;
    case at::kLong: return Kind::i64;
    default: TORCH_CHECK_TYPE(false, "convkit: dtype ", t, " has no CUDA kernel.");
  }
}

at::Tensor conv2d_cuda(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                       at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                       c10::string_view activation, const c10::optional<at::Tensor>& residual, c10::string_view algo) {
  // NOTE: the dispatcher picks this kernel when ANY argument is on CUDA, so x may be a CPU tensor here:
  // a device-generic guard (a no-op for the CPU) lets conv2d() report the mix as a ValueError, where a
  // CUDAGuard on a CPU device threw "CUDAGuardImpl initialized with non-CUDA DeviceType" (H200, 2026-11-29).
  const c10::OptionalDeviceGuard guard(x.device());
  return conv2d(x, w, bias, stride, padding, dilation, groups, activation, residual, algo, current_stream());
}

at::Tensor conv2d_per_sample_cuda(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                  int64_t groups, c10::string_view activation) {
  const c10::OptionalDeviceGuard guard(x.device());  // see conv2d_cuda
  return conv2d_per_sample(x, w, bias, stride, padding, dilation, groups, activation, current_stream());
}

at::Tensor conv2d_backward_data_cuda(const at::Tensor& gz, const at::Tensor& w, at::IntArrayRef input_size,
                                     at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                     int64_t groups) {
  const c10::OptionalDeviceGuard guard(gz.device());  // see conv2d_cuda
  return conv2d_backward_data(gz, w, input_size, stride, padding, dilation, groups, current_stream());
}

at::Tensor conv2d_backward_weight_cuda(const at::Tensor& x, const at::Tensor& gz, at::IntArrayRef weight_size,
                                       at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                       int64_t groups) {
  const c10::OptionalDeviceGuard guard(x.device());  // see conv2d_cuda
  return conv2d_backward_weight(x, gz, weight_size, stride, padding, dilation, groups, current_stream());
}

at::Tensor vector_add_cuda(const at::Tensor& a_in, const at::Tensor& b_in) {
  check_vector_add(a_in, b_in);
  const c10::cuda::CUDAGuard guard(a_in.device());
  const at::Tensor a = a_in.contiguous(), b = b_in.contiguous();
  at::Tensor out = at::empty(a.sizes(), a.options());
  if (a.numel() > 0)
    cuda_vector_add(kind_of(a.scalar_type()), a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel(), current_stream());
  return out;
}

at::Tensor silu_cuda(const at::Tensor& x_in) {
  check_silu(x_in);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() > 0) cuda_silu(kind_of(x.scalar_type()), x.data_ptr(), out.data_ptr(), x.numel(), current_stream());
  return out;
}

at::Tensor csr_matvec_cuda(const at::Tensor& values_in, const at::Tensor& row_ptr_in, const at::Tensor& col_idx_in,
                           const at::Tensor& dense_in) {
  check_csr_matvec(values_in, row_ptr_in, col_idx_in, dense_in);  // first: values may be on the CPU
  const c10::cuda::CUDAGuard guard(values_in.device());
  const at::Tensor values = values_in.contiguous(), dense = dense_in.contiguous();
  const at::Tensor row_ptr = row_ptr_in.contiguous(), col_idx = col_idx_in.contiguous();
  const int64_t rows = row_ptr.numel() - 1;
  at::Tensor out = at::empty({rows}, values.options());
  if (rows > 0)
    cuda_csr_matvec(kind_of(values.scalar_type()), kind_of(row_ptr.scalar_type()), values.data_ptr(),
                    row_ptr.data_ptr(), col_idx.data_ptr(), dense.data_ptr(), out.data_ptr(), rows, current_stream());
  return out;
}

// torch's pooling_output_shape: the windows that start inside the input or its left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;  // floor division
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// The channels-last 16-byte-vector form the pooling and scaling kernels below take: f32/f16/bf16, dense
// channels_last (and not also contiguous: one pixel or one channel), C * element size a multiple of 16, a
// 16-byte aligned pointer.
bool nhwc_vectors(const at::Tensor& x) {
  const at::ScalarType t = x.scalar_type();
  return x.is_cuda() && x.dim() == 4 && (t == at::kFloat || t == at::kHalf || t == at::kBFloat16) &&
         x.is_contiguous(at::MemoryFormat::ChannelsLast) && !x.is_contiguous() &&
         (x.size(1) * int64_t(x.element_size())) % 16 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}

at::Tensor max_pool2d_cuda(const at::Tensor& x, at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef p,
                           at::IntArrayRef d, bool ceil_mode) {
  const c10::OptionalDeviceGuard guard(x.device());
  const auto fallback = [&] { return at::max_pool2d(x, k, s, p, d, ceil_mode); };
  // torch's own kernel (and its errors) for whatever the NHWC kernel does not take or torch would refuse
  if (!nhwc_vectors(x) || k.size() != 2 || s.size() != 2 || p.size() != 2 || d.size() != 2) return fallback();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  for (int i = 0; i < 2; ++i)
    if (k[i] < 1 || s[i] < 1 || d[i] < 1 || p[i] < 0 || p[i] > ((k[i] - 1) * d[i] + 1) / 2 || k[i] > 65535 ||
        s[i] > 65535 || d[i] > 65535 || p[i] > 65535)
      return fallback();
  const int64_t P = pooled_size(H, k[0], p[0], s[0], d[0], ceil_mode);
  const int64_t Q = pooled_size(W, k[1], p[1], s[1], d[1], ceil_mode);
  if (P < 1 || Q < 1 || N == 0) return fallback();
  at::Tensor y = at::empty({N, C, P, Q}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  const int64_t g[14] = {N, H, W, C, P, Q, k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]};
  cuda_max_pool_nhwc(kind_of(x.scalar_type()), x.data_ptr(), y.data_ptr(), g, current_stream());
  return y;
}

// torch's adaptive_avg_pool2d(x, 1) (the mean over H and W, shape (N, C, 1, 1), channels_last); torch's own for
// what the kernel does not take.
at::Tensor channel_mean_cuda(const at::Tensor& x) {
  const c10::OptionalDeviceGuard guard(x.device());
  if (!nhwc_vectors(x) || x.size(0) > 65535 || x.numel() == 0) return at::adaptive_avg_pool2d(x, {1, 1});
  const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
  const Kind k = kind_of(x.scalar_type());
  const int64_t splits = channel_mean_splits(k, N, HW, C);
  at::Tensor partial = at::empty({splits, N, C}, x.options().dtype(at::kFloat));
  at::Tensor y = at::empty({N, C, 1, 1}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  cuda_channel_mean_nhwc(k, x.data_ptr(), partial.data_ptr<float>(), y.data_ptr(), N, HW, C, splits, current_stream());
  return y;
}

// Squeeze-excitation's gate: the kernel for a channels-last f32/f16/bf16 x whose channels fill 16-byte vectors,
// with contiguous, 16-byte aligned filters and biases; the composite (torch's ops) for anything else.
at::Tensor se_gate_cuda(const at::Tensor& x, const at::Tensor& w1, const c10::optional<at::Tensor>& b1,
                        const at::Tensor& w2, const c10::optional<at::Tensor>& b2, c10::string_view act1,
                        c10::string_view act2) {
  const c10::OptionalDeviceGuard guard(x.device());
  int acts[2];
  const int64_t R = se_gate_check(x, w1, b1, w2, b2, act1, act2, acts);
  const auto aligned = [](const at::Tensor& t) {
    return t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  };
  if (!x.is_cuda() || !nhwc_vectors(x) || x.numel() == 0 || !aligned(w1) || !aligned(w2) ||
      (b1 && !aligned(*b1)) || (b2 && !aligned(*b2)))
    return se_gate_composite(x, w1, b1, w2, b2, acts);
  const int64_t N = x.size(0), C = x.size(1);
  const Kind k = kind_of(x.scalar_type());
  if (!se_gate_takes(k, N, C, R)) return se_gate_composite(x, w1, b1, w2, b2, acts);
  at::Tensor y = at::empty({N, C, 1, 1}, x.options());
  cuda_se_gate_nhwc(k, x.data_ptr(), w1.data_ptr(), b1 ? b1->data_ptr() : nullptr, w2.data_ptr(),
                    b2 ? b2->data_ptr() : nullptr, y.data_ptr(), N, x.size(2) * x.size(3), C, R, acts[0], acts[1],
                    current_stream());
  return y;
}

// x * s for s of shape (N, C, 1, 1) (squeeze-excitation's scale); torch's mul for anything else.
at::Tensor scale_channels_cuda(const at::Tensor& x, const at::Tensor& s) {
  const c10::OptionalDeviceGuard guard(x.device());
  const auto fallback = [&] { return at::mul(x, s); };
  if (!nhwc_vectors(x) || !s.is_cuda() || s.device() != x.device() || s.scalar_type() != x.scalar_type() ||
      s.dim() != 4)
    return fallback();
  const int64_t N = x.size(0), C = x.size(1);
  if (s.size(0) != N || s.size(1) != C || s.size(2) != 1 || s.size(3) != 1 || (N > 1 && s.stride(0) != C) ||
      s.stride(1) != 1 || reinterpret_cast<uintptr_t>(s.data_ptr()) % 16 != 0)
    return fallback();
  at::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  cuda_scale_channels_nhwc(kind_of(x.scalar_type()), x.data_ptr(), s.data_ptr(), y.data_ptr(), N,
                           x.size(2) * x.size(3), C, current_stream());
  return y;
}

// torch's layer_norm(x, {C}, w, b, eps) over the last dimension C of x: the rows kernel for a contiguous,
// 16-byte aligned f32/f16/bf16 x whose rows fill 16-byte vectors, with w and b of x's dtype (or absent); torch's
// own (and its errors) for anything else.
at::Tensor layer_norm_last_cuda(const at::Tensor& x, const c10::optional<at::Tensor>& w,
                                const c10::optional<at::Tensor>& b, double eps) {
  const c10::OptionalDeviceGuard guard(x.device());
  TORCH_CHECK(x.dim() >= 1, "convkit.layer_norm: x needs at least one dimension.");
  const int64_t C = x.size(-1);
  const auto fallback = [&] { return at::layer_norm(x, {C}, w, b, eps); };
  const at::ScalarType t = x.scalar_type();
  if (!(t == at::kFloat || t == at::kHalf || t == at::kBFloat16) || !x.is_contiguous() || x.numel() == 0 ||
      !layer_norm_rows_takes(kind_of(t), C) || reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 != 0)
    return fallback();
  for (const auto* p : {&w, &b})
    if (p->has_value() && (*p)->defined()) {
      const at::Tensor& v = **p;
      if (!v.is_cuda() || v.device() != x.device() || v.scalar_type() != t || v.dim() != 1 || v.size(0) != C ||
          !v.is_contiguous() || reinterpret_cast<uintptr_t>(v.data_ptr()) % 16 != 0)
        return fallback();
    }
  const auto ptr = [](const c10::optional<at::Tensor>& v) -> const void* {
    return v.has_value() && v->defined() ? v->data_ptr() : nullptr;
  };
  at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  cuda_layer_norm_rows(kind_of(t), x.data_ptr(), ptr(w), ptr(b), y.data_ptr(), x.numel() / C, C, float(eps),
                       current_stream());
  return y;
}

}  // namespace
}  // namespace convkit_ext

TORCH_LIBRARY_IMPL(convkit, CUDA, m) {
  m.impl("conv2d", &convkit_ext::conv2d_cuda);
  m.impl("conv2d_per_sample", &convkit_ext::conv2d_per_sample_cuda);
  m.impl("conv2d_backward_data", &convkit_ext::conv2d_backward_data_cuda);
  m.impl("conv2d_backward_weight", &convkit_ext::conv2d_backward_weight_cuda);
  m.impl("vector_add", &convkit_ext::vector_add_cuda);
  m.impl("silu", &convkit_ext::silu_cuda);
  m.impl("csr_matvec", &convkit_ext::csr_matvec_cuda);
  m.impl("max_pool2d", &convkit_ext::max_pool2d_cuda);
  m.impl("channel_mean", &convkit_ext::channel_mean_cuda);
  m.impl("scale_channels", &convkit_ext::scale_channels_cuda);
  m.impl("se_gate", &convkit_ext::se_gate_cuda);
  m.impl("layer_norm_last", &convkit_ext::layer_norm_last_cuda);
}
