// The extension's device-independent op bodies. ext.cpp registers them for the CPU; ext_cuda.cpp (CUDA builds
// only) registers them for CUDA with the device guard and PyTorch's current stream.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace convkit_ext {

at::Tensor conv2d(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                  c10::string_view activation, const c10::optional<at::Tensor>& residual, c10::string_view algo,
                  void* stream);

at::Tensor conv2d_per_sample(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                             int64_t groups, c10::string_view activation, void* stream);

// The gradients (convkit/backward.hpp); input_size / weight_size: the forward's x and weight sizes.
at::Tensor conv2d_backward_data(const at::Tensor& grad_out, const at::Tensor& w, at::IntArrayRef input_size,
                                at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                int64_t groups, void* stream);
at::Tensor conv2d_backward_weight(const at::Tensor& x, const at::Tensor& grad_out, at::IntArrayRef weight_size,
                                  at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                                  int64_t groups, void* stream);

// Squeeze-excitation's gate (torch.ops.convkit.se_gate): se_gate_check validates the arguments (a clear
// ValueError/TypeError), returns R and puts the two activations (convkit::Activation values) in acts;
// se_gate_composite computes the gate with torch's ops, in float32 (float64 for double x), rounded once.
int64_t se_gate_check(const at::Tensor& x, const at::Tensor& w1, const c10::optional<at::Tensor>& b1,
                      const at::Tensor& w2, const c10::optional<at::Tensor>& b2, c10::string_view act1,
                      c10::string_view act2, int (&acts)[2]);
at::Tensor se_gate_composite(const at::Tensor& x, const at::Tensor& w1, const c10::optional<at::Tensor>& b1,
                             const at::Tensor& w2, const c10::optional<at::Tensor>& b2, const int (&acts)[2]);

// Argument checks shared by both devices; each throws a Python ValueError/TypeError with a clear message.
void check_vector_add(const at::Tensor& a, const at::Tensor& b);
void check_silu(const at::Tensor& x);
void check_csr_matvec(const at::Tensor& values, const at::Tensor& row_ptr, const at::Tensor& col_idx,
                      const at::Tensor& dense);

}  // namespace convkit_ext
