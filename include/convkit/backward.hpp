// convkit/backward.hpp: the gradients of a convolution, for training.
//
// For y = conv(x, w) (the convolution alone: pass the gradient at the convolution's output, after the
// epilogue's activation, bias and residual have been differentiated by the caller):
//   conv2d_backward_data:   grad_in  = dL/dx, from grad_out = dL/dy and the weight;
//   conv2d_backward_weight: grad_wei = dL/dw, from the input x and grad_out (a sum over N*P*Q per filter
//                           element, in a fixed order: the same bits on every call on one machine).
// Tensors as for conv2d(): grad_out has the output's dims, grad_in the input's, grad_wei the weight's; all
// share dtype, layout and device (weights KCRS for nchw, KRSC for nhwc).
//
// Supported:
//   CPU:  f32, every problem conv2d() accepts (a direct reference with float64 sums, exact: the test oracle);
//         with BackwardOptions::cpu_fast, the weight gradient also in f16/bf16, by fast kernels (below).
//   CUDA: depthwise problems (groups = C, any channel multiplier K/C), f32, f16 and bf16 (fp32
//         accumulation, one rounding), NHWC and NCHW, every filter size, stride, dilation and padding;
//         and the weight gradient of dense problems (groups = 1) in f16 and bf16 NHWC with C and K
//         multiples of 8 and 16-byte aligned x and grad_out (tensor cores, fp32 sums, one rounding).
//         Other problems' gradients are convolutions of their own (the data gradient: grad_out convolved
//         with the flipped, transposed filters; the weight gradient: the input correlated with grad_out),
//         which the PyTorch extension builds from conv2d(); here they throw Error(unsupported).
// CONVKIT_LOG=dispatch prints one line per (problem, configuration) naming the kernel.
#pragma once

#include <cstddef>

#include "convkit/convkit.hpp"

namespace convkit {

struct BackwardOptions {
  void* stream = nullptr;     // cudaStream_t for CUDA tensors
  void* workspace = nullptr;  // conv2d_backward_weight's scratch; if null, it allocates (and frees) one
  size_t workspace_bytes = 0;
  // conv2d_backward_weight on the CPU: false (default), the float64 reference above; true, the fast kernels
  // (the PyTorch extension's CPU weight gradient; float32 sums in a fixed order, f32/f16/bf16 with one
  // rounding): a direct loop vectorised over the channels for depthwise layers (groups = C), GEMMs (im2col and
  // OpenBLAS's SGEMM) for the rest where the build has OpenBLAS and their dimensions fit an int (else the
  // reference).
  bool cpu_fast = false;
};

// Checks shapes, dtypes, layouts, devices, nulls and aliasing; one sentence per failure.
Status validate_backward_data(const Conv2dProblem& problem, const TensorView& grad_out, const TensorView& wei,
                              const TensorView& grad_in);
Status validate_backward_weight(const Conv2dProblem& problem, const TensorView& src, const TensorView& grad_out,
                                const TensorView& grad_wei);

// Throws convkit::Error(unsupported) with the reason for what the list above does not cover.
void conv2d_backward_data(const Conv2dProblem& problem, const TensorView& grad_out, const TensorView& wei,
                          const TensorView& grad_in, const BackwardOptions& options = {});
void conv2d_backward_weight(const Conv2dProblem& problem, const TensorView& src, const TensorView& grad_out,
                            const TensorView& grad_wei, const BackwardOptions& options = {});

// The workspace conv2d_backward_weight needs for this request (0 on the CPU). On CUDA it depends on the
// current device's SM count.
size_t backward_weight_workspace_bytes(const Conv2dProblem& problem, const ConvConfig& config);

}  // namespace convkit
