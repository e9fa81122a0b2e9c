"""The autograd of torch.ops.convkit.

The backward of conv2d and conv2d_per_sample is ONE implementation, in C++ (csrc/autograd.cpp,
conv2d_backward and per_sample_backward, in a C++ autograd Function), registered as the ops' own Autograd
kernels: every call of the ops reaches it, convkit.conv2d's and torch.compile's generated code included, and a
call that records no gradient goes below autograd without entering Python (convkit.conv2d with the BACKWARD
switch below set to "aten" calls the same Function through convkit::_conv2d_autograd). This file holds the
dispatch of convkit.conv2d's calls, the aten fallback op, and the seed's example ops' autograd. What the formula does,
with y = act(z), z = conv(x, w) + bias + residual and gz = dL/dz:
  * through the activation: relu, relu6, sigmoid and hardsigmoid use the saved output (0 < y, y < 6;
    y (1 - y); 0 < y < 1); silu, gelu and hardswish
    recompute z with one more convkit forward (no pre-activation copy is kept from the fused forward).
  * bias: gz summed over batch and pixels; residual: gz itself.
  * input (data gradient): for stride 1 and padding <= dilation*(R-1) it IS a convolution, run by convkit:
    gz convolved with the spatially flipped, per-group transposed filters, padding dilation*(R-1) - padding,
    the same dilation and groups. Otherwise (stride > 1, or padding larger than the filter reach) it falls
    back to torch.ops.aten.convolution_backward (for conv2d_per_sample on the batch folded into groups),
    inside the opaque op convkit::_aten_conv_grads under the op's math mode (strict_conv_math below).
  * weight: a correlation of x with gz, run by convkit as a convolution: the batch becomes the reduction
    (channel) axis, gz the filter, stride and dilation swap roles, and the result is cropped to R x S. For
    conv2d_per_sample the samples are folded into groups, so each sample only meets its own gz. Depthwise layers
    have kernels of their own, and a 1x1 stride-1 layer is one GEMM. A dense (groups = 1) float16/bfloat16 layer
    on CUDA takes aten's convolution_backward (cuDNN) for this gradient: convkit's kernels for it ran at 0.24-0.53x
    cuDNN's speed on the H200 (docs/perf.md); CONVKIT_DENSE_WGRAD=convkit in the environment keeps them.
If convkit has no kernel for a backward problem (NotImplementedError, e.g. a dtype without a kernel yet), the
whole backward falls back to aten.convolution_backward; set convkit._autograd.BACKWARD = "aten" to always
use it (a debugging aid; it applies to convkit.conv2d / conv2d_per_sample in eager mode).

Math mode of the aten fallback: convkit's float32 is strict fp32 unless the algo ends in "/tf32", and so is the
fallback. PyTorch's own default differs: cuDNN convolutions may use TF32 (torch.backends.cudnn.conv.
fp32_precision is "tf32" by default), which put 1-3% errors into "strict" data gradients on the H200. The
fallback therefore runs under strict_conv_math(), which sets the per-op precision of the new API
(torch.backends.cudnn.conv.fp32_precision, torch.backends.mkldnn.conv.fp32_precision) and restores it, and it
runs inside the custom op convkit::_aten_conv_grads: under torch.compile, AOTAutograd traces that op as one
opaque call, so the precision is set when the graph RUNS (a context manager around a traced aten op would only
be active while tracing, and Inductor drops the allow_tf32 argument of aten._convolution). A float16/bfloat16
problem (no math mode to set) skips this op: csrc/autograd.cpp calls aten.convolution_backward directly.
"""
import contextlib
from typing import List, Tuple

import torch

from ._meta import _memory_format

BACKWARD = "convkit"  # or "aten"

_CONV2D = torch.ops.convkit.conv2d.default
_PER_SAMPLE = torch.ops.convkit.conv2d_per_sample.default
_CONV2D_AUTOGRAD = torch.ops.convkit._conv2d_autograd.default
_PER_SAMPLE_AUTOGRAD = torch.ops.convkit._conv2d_per_sample_autograd.default


def _aten_backward_wanted() -> bool:
    """Whether a call under BACKWARD = "aten" (the debugging switch) takes it: eager calls in grad mode, not
    while torch.compile traces or under functorch transforms, which get the op itself."""
    return (torch.is_grad_enabled() and not torch.compiler.is_compiling()
            and not torch._C._are_functorch_transforms_active())


def conv2d_call(*args):
    """torch.ops.convkit.conv2d(*args) as convkit.conv2d dispatches it (the backward's own convolutions too): the
    op itself, whose C++ Autograd kernel (csrc/autograd.cpp) records the C++ autograd Function where a gradient
    is wanted and goes straight below autograd where none is; with BACKWARD = "aten", the same Function through
    convkit::_conv2d_autograd with aten's backward.

    NOTE: a Python autograd.Function (2026-11-30, commit 1c27b81) cost ~13 us a conv in Function.apply and ~35 us
    in its backward's Python (CPU, 4x4x4 convs); choosing the way in here in Python (below autograd, the
    Function, or the op) cost ~2.5 us a call more than the op's own C++ kernel does (CPU, an 8x8 1x1 conv)."""
    if BACKWARD == "aten" and _aten_backward_wanted():
        return _CONV2D_AUTOGRAD(*args, True)
    return _CONV2D(*args)


def per_sample_call(*args):
    """torch.ops.convkit.conv2d_per_sample(*args), dispatched as conv2d_call."""
    if BACKWARD == "aten" and _aten_backward_wanted():
        return _PER_SAMPLE_AUTOGRAD(*args, True)
    return _PER_SAMPLE(*args)


# What the fallback calls (a module attribute so that tests can wrap it and see the precision in force).
_aten_convolution_backward = torch.ops.aten.convolution_backward



@contextlib.contextmanager
def strict_conv_math(tf32: bool = False):
    """PyTorch's float32 convolutions in the given math mode while the block runs: strict IEEE fp32 on cuDNN
    and oneDNN (mkldnn), or TF32 allowed on cuDNN when tf32=True. Uses the per-op precision settings of the
    current API (torch.backends.<backend>.conv.fp32_precision), touches a setting only when its value differs
    from the one wanted, and restores what it changed on exit, exceptions included. float16/bfloat16
    convolutions are unaffected (the settings concern float32 only).

    NOTE: the settings are process-wide; a convolution that another thread runs meanwhile sees them too.
    NOTE: the getter returns the effective value (a "none" inherits from torch.backends.cudnn.fp32_precision);
    that effective value is what is restored.
    """
    want = {torch.backends.cudnn.conv: "tf32" if tf32 else "ieee", torch.backends.mkldnn.conv: "ieee"}
    changed = []
    try:
        for knob, value in want.items():
            old = knob.fp32_precision
            # "none" (nothing set anywhere) means no TF32/bf16: as good as "ieee" for strict math.
            if old != value and not (value == "ieee" and old == "none"):
                changed.append((knob, old))
                knob.fp32_precision = value
        yield
    finally:
        for knob, old in reversed(changed):
            knob.fp32_precision = old


@torch.library.custom_op("convkit::_aten_conv_grads", mutates_args=())
def _aten_conv_grads(gz: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stride: List[int], padding: List[int],
                     dilation: List[int], groups: int, per_sample: bool, need_x: bool, need_w: bool,
                     tf32: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """(dL/dx, dL/dw) by aten.convolution_backward under strict_conv_math(tf32); a gradient that is not needed
    comes back as an empty tensor. dL/dx has x's memory format, dL/dw w's."""
    with strict_conv_math(tf32):
        if per_sample:
            n, c, h, wd = x.shape
            k = w.shape[1]
            gx, gw, _ = _aten_convolution_backward(
                gz.reshape(1, n * k, gz.shape[2], gz.shape[3]), x.reshape(1, n * c, h, wd),
                w.reshape(n * k, *w.shape[2:]), None, stride, padding, dilation, False, [0, 0], n * groups,
                [need_x, need_w, False])
            gx = gx.reshape(x.shape) if need_x else None
            gw = gw.reshape(w.shape) if need_w else None
        else:
            gx, gw, _ = _aten_convolution_backward(gz, x, w, None, stride, padding, dilation, False, [0, 0], groups,
                                                   [need_x, need_w, False])
    gx = gx.contiguous(memory_format=_memory_format(x)) if need_x else x.new_empty(0)
    gw = gw.contiguous(memory_format=_memory_format(w)) if need_w else w.new_empty(0)
    return gx, gw


@_aten_conv_grads.register_fake
def _aten_conv_grads_fake(gz, x, w, stride, padding, dilation, groups, per_sample, need_x, need_w, tf32):
    gx = torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=_memory_format(x)) if need_x \
        else x.new_empty(0)
    gw = torch.empty(w.shape, dtype=w.dtype, device=w.device, memory_format=_memory_format(w)) if need_w \
        else w.new_empty(0)
    return gx, gw


# ---- the seed's example ops --------------------------------------------------------------------------------

def _vector_add_backward(ctx, grad):
    return grad, grad


torch.library.register_autograd("convkit::vector_add", _vector_add_backward,
                                setup_context=lambda ctx, inputs, output: None)


def _silu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _silu_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x  # one rounding for 16-bit tensors
    s = torch.sigmoid(xf)
    return (grad * (s * (1 + xf * (1 - s)))).to(grad.dtype)


torch.library.register_autograd("convkit::silu", _silu_backward, setup_context=_silu_setup)


def _csr_setup(ctx, inputs, output):
    values, row_ptr, col_idx, dense = inputs
    ctx.save_for_backward(values, row_ptr, col_idx, dense)


def _csr_backward(ctx, grad):
    values, row_ptr, col_idx, dense = ctx.saved_tensors
    need = ctx.needs_input_grad
    rows = row_ptr.shape[0] - 1
    counts = (row_ptr[1:] - row_ptr[:-1]).long()
    row_of = torch.repeat_interleave(torch.arange(rows, device=grad.device), counts, output_size=values.shape[0])
    g_row = grad[row_of]
    col = col_idx.long()
    gv = g_row * dense[col] if need[0] else None
    gd = torch.zeros_like(dense).index_add_(0, col, values * g_row) if need[3] else None
    return gv, None, None, gd


torch.library.register_autograd("convkit::csr_matvec", _csr_backward, setup_context=_csr_setup)
