"""Backward formulas for torch.ops.convkit, registered with torch.library.register_autograd.

conv2d / conv2d_per_sample, with y = act(z), z = conv(x, w) + bias + residual and gz = dL/dz:
  * through the activation: relu uses the saved output (y > 0); silu and gelu recompute z with one more
    convkit forward (no pre-activation copy is kept from the fused forward).
  * bias: gz summed over batch and pixels; residual: gz itself.
  * input (data gradient): for stride 1 and padding <= dilation*(R-1) it IS a convolution, run by convkit:
    gz convolved with the spatially flipped, per-group transposed filters, padding dilation*(R-1) - padding,
    the same dilation and groups. Otherwise (stride > 1, or padding larger than the filter reach) it falls
    back to torch.ops.aten.convolution_backward (for conv2d_per_sample on the batch folded into groups).
  * weight: a correlation of x with gz, run by convkit as a convolution in every case: the batch becomes the
    reduction (channel) axis, gz the filter, stride and dilation swap roles, and the result is cropped to R x S.
    For conv2d_per_sample the samples are folded into groups, so each sample only meets its own gz.
If convkit has no kernel for a backward problem (NotImplementedError, e.g. a dtype without a kernel yet), the
whole backward falls back to aten.convolution_backward; set convkit._autograd.BACKWARD = "aten" to always
use it (a debugging aid).
"""
import math

import torch

from ._meta import _memory_format

BACKWARD = "convkit"  # or "aten"


def _pair(v):
    return [int(v[0]), int(v[1] if len(v) > 1 else v[0])]


def _math_suffix(algo):
    return "/tf32" if algo.endswith("/tf32") else ""


def _through_activation(grad, activation, out, recompute_z):
    if activation == "none":
        return grad
    if activation == "relu":
        return grad * (out > 0).to(grad.dtype)
    z = recompute_z()
    if activation == "silu":
        s = torch.sigmoid(z)
        return grad * (s * (1 + z * (1 - s)))
    if activation == "gelu":
        cdf = 0.5 * (1.0 + torch.erf(z * (1.0 / math.sqrt(2.0))))
        pdf = torch.exp(-0.5 * z * z) * (1.0 / math.sqrt(2.0 * math.pi))
        return grad * (cdf + z * pdf)
    raise ValueError(f"convkit: unknown activation '{activation}'.")


def _data_grad_is_conv(stride, padding, dilation, r, s):
    return stride == [1, 1] and padding[0] <= dilation[0] * (r - 1) and padding[1] <= dilation[1] * (s - 1)


def _weight_grad(x, gz, r, s, stride, padding, dilation, groups, per_sample, algo):
    """dL/dw as one convkit convolution (see the module docstring)."""
    n, c, h, w = x.shape
    k = gz.shape[1]
    cg = c // groups
    if per_sample:
        inp = x.reshape(n, groups, cg, h, w).permute(2, 0, 1, 3, 4).reshape(cg, n * groups, h, w)
        filt = gz.reshape(n * k, 1, gz.shape[2], gz.shape[3])
        g = n * groups
    else:
        inp = x.reshape(n, groups, cg, h, w).permute(2, 1, 0, 3, 4).reshape(cg, groups * n, h, w)
        filt = gz.permute(1, 0, 2, 3)
        g = groups
    out = torch.ops.convkit.conv2d(inp.contiguous(), filt.contiguous(), None, dilation, padding, stride, g, "none",
                                   None, algo)
    gw = out[:, :, :r, :s].permute(1, 0, 2, 3)
    return gw.reshape(n, k, cg, r, s) if per_sample else gw.contiguous()


def _flipped_transposed(w, groups, per_sample):
    if per_sample:
        n, k, cg, r, s = w.shape
        kg = k // groups
        return w.reshape(n, groups, kg, cg, r, s).transpose(2, 3).reshape(n, groups * cg, kg, r, s).flip(-2, -1)
    k, cg, r, s = w.shape
    kg = k // groups
    return w.reshape(groups, kg, cg, r, s).transpose(1, 2).reshape(groups * cg, kg, r, s).flip(-2, -1)


def _aten_grads(gz, x, w, stride, padding, dilation, groups, per_sample, need_x, need_w):
    if per_sample:
        n, c, h, wd = x.shape
        k = w.shape[1]
        gx, gw, _ = torch.ops.aten.convolution_backward(
            gz.reshape(1, n * k, gz.shape[2], gz.shape[3]), x.reshape(1, n * c, h, wd), w.reshape(n * k, *w.shape[2:]),
            None, stride, padding, dilation, False, [0, 0], n * groups, [need_x, need_w, False])
        return (gx.reshape(x.shape) if need_x else None), (gw.reshape(w.shape) if need_w else None)
    gx, gw, _ = torch.ops.aten.convolution_backward(gz, x, w, None, stride, padding, dilation, False, [0, 0], groups,
                                                    [need_x, need_w, False])
    return gx, gw


def _conv_grads(gz, x, w, stride, padding, dilation, groups, per_sample, algo, need_x, need_w):
    r, s = w.shape[-2], w.shape[-1]
    if BACKWARD == "aten":
        return _aten_grads(gz, x, w, stride, padding, dilation, groups, per_sample, need_x, need_w)
    try:
        gx = gw = None
        if need_x:
            if _data_grad_is_conv(stride, padding, dilation, r, s):
                wt = _flipped_transposed(w, groups, per_sample)
                pad_t = [dilation[0] * (r - 1) - padding[0], dilation[1] * (s - 1) - padding[1]]
                if per_sample:
                    gx = torch.ops.convkit.conv2d_per_sample(gz, wt, None, [1, 1], pad_t, dilation, groups, "none")
                else:
                    gx = torch.ops.convkit.conv2d(gz, wt, None, [1, 1], pad_t, dilation, groups, "none", None, algo)
            else:
                gx, _ = _aten_grads(gz, x, w, stride, padding, dilation, groups, per_sample, True, False)
        if need_w:
            gw = _weight_grad(x, gz, r, s, stride, padding, dilation, groups, per_sample, algo)
        return gx, gw
    except NotImplementedError:
        return _aten_grads(gz, x, w, stride, padding, dilation, groups, per_sample, need_x, need_w)


# ---- conv2d ------------------------------------------------------------------------------------------------

def _conv2d_setup(ctx, inputs, output):
    x, w, bias, stride, padding, dilation, groups, activation, residual, algo = inputs
    ctx.save_for_backward(x, w, bias, residual, output)
    ctx.conf = (_pair(stride), _pair(padding), _pair(dilation), groups, activation, algo)


def _conv2d_backward(ctx, grad):
    x, w, bias, residual, out = ctx.saved_tensors
    stride, padding, dilation, groups, activation, algo = ctx.conf
    need = ctx.needs_input_grad
    algo_bw = "auto" + _math_suffix(algo)
    mf = _memory_format(x)
    gz = _through_activation(
        grad, activation, out,
        lambda: torch.ops.convkit.conv2d(x, w, bias, stride, padding, dilation, groups, "none", residual, algo))
    gz = gz.contiguous(memory_format=mf)
    gx, gw = _conv_grads(gz, x, w, stride, padding, dilation, groups, False, algo_bw, need[0], need[1])
    gb = gz.sum(dim=(0, 2, 3)) if (bias is not None and need[2]) else None
    gr = gz if (residual is not None and need[8]) else None
    return gx, gw, gb, None, None, None, None, None, gr, None


torch.library.register_autograd("convkit::conv2d", _conv2d_backward, setup_context=_conv2d_setup)


# ---- conv2d_per_sample -------------------------------------------------------------------------------------

def _per_sample_setup(ctx, inputs, output):
    x, w, bias, stride, padding, dilation, groups, activation = inputs
    ctx.save_for_backward(x, w, bias, output)
    ctx.conf = (_pair(stride), _pair(padding), _pair(dilation), groups, activation)


def _per_sample_backward(ctx, grad):
    x, w, bias, out = ctx.saved_tensors
    stride, padding, dilation, groups, activation = ctx.conf
    need = ctx.needs_input_grad
    gz = _through_activation(
        grad, activation, out,
        lambda: torch.ops.convkit.conv2d_per_sample(x, w, bias, stride, padding, dilation, groups, "none"))
    gz = gz.contiguous(memory_format=_memory_format(x))
    gx, gw = _conv_grads(gz, x, w, stride, padding, dilation, groups, True, "auto", need[0], need[1])
    gb = gz.sum(dim=(2, 3)) if (bias is not None and need[2]) else None
    return gx, gw, gb, None, None, None, None, None


torch.library.register_autograd("convkit::conv2d_per_sample", _per_sample_backward, setup_context=_per_sample_setup)


# ---- the seed's example ops --------------------------------------------------------------------------------

def _vector_add_backward(ctx, grad):
    return grad, grad


torch.library.register_autograd("convkit::vector_add", _vector_add_backward,
                                setup_context=lambda ctx, inputs, output: None)


def _silu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _silu_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    s = torch.sigmoid(x)
    return grad * (s * (1 + x * (1 - s)))


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
