"""Fake (meta) implementations: output shape, dtype, device and memory format without running a kernel, so
torch.compile(fullgraph=True) and torch.export trace through the ops. They mirror the C++ rules exactly
(csrc/ext.cpp: the layout is nchw when x is contiguous, nhwc when it is channels_last, else nchw)."""
import sys

import torch

_OPS = ("conv2d", "conv2d_per_sample", "conv2d_backward_data", "conv2d_backward_weight", "vector_add", "silu",
        "csr_matvec", "max_pool2d", "channel_mean", "scale_channels", "se_gate", "layer_norm_last")
_fallbacks_registered = False


def _inductor_fallbacks():
    """Inductor's fallback for every convkit op, registered before it lowers the graph and with the layout
    constraint its implicit path would choose (the op's tag, else the default). Its implicit path formats the op's
    arguments' IR for a log line first, eagerly: that text repeats a node once a path to it, so an op that first
    appears late in a graph that reads tensors twice (a classifier's mean after EfficientNet-B0's sixteen
    squeeze-excitation blocks) took minutes and gigabytes (torch 2.11, the CPU). Runs once, from the fake
    implementations, and only where Inductor is loaded; a torch whose internals differ keeps the implicit path."""
    global _fallbacks_registered
    if _fallbacks_registered or "torch._inductor.lowering" not in sys.modules:
        return
    _fallbacks_registered = True
    try:
        from torch._inductor.lowering import lowerings, make_fallback, tag_to_layout_constraint
        from torch._library.utils import get_layout_constraint_tag

        for name in _OPS:
            op = getattr(torch.ops.convkit, name).default
            if op not in lowerings:
                make_fallback(op, layout_constraint=tag_to_layout_constraint(
                    get_layout_constraint_tag(op, with_default=True)))
    except Exception:  # noqa: BLE001  (private API: the implicit fallback still works, only slowly)
        pass


def _out_size(size, pad, dil, k, stride):
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def _memory_format(x):
    if x.is_contiguous():
        return torch.contiguous_format
    if x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


def _pair(v):
    return [v[0], v[1] if len(v) > 1 else v[0]]


def _conv_out(x, k, r, s, stride, padding, dilation):
    st, pd, dl = _pair(stride), _pair(padding), _pair(dilation)
    p = _out_size(x.shape[2], pd[0], dl[0], r, st[0])
    q = _out_size(x.shape[3], pd[1], dl[1], s, st[1])
    torch._check(p >= 1 and q >= 1, lambda: "convkit.conv2d: the output would be empty (P or Q < 1).")
    return torch.empty((x.shape[0], k, p, q), dtype=x.dtype, device=x.device, memory_format=_memory_format(x))


@torch.library.register_fake("convkit::conv2d")
def _conv2d_fake(x, w, bias, stride, padding, dilation, groups, activation, residual, algo):
    _inductor_fallbacks()
    torch._check(x.dim() == 4 and w.dim() == 4, lambda: "convkit.conv2d: x and w must be 4-D.")
    torch._check(w.shape[1] * groups == x.shape[1], lambda: "convkit.conv2d: channels do not match groups.")
    return _conv_out(x, w.shape[0], w.shape[2], w.shape[3], stride, padding, dilation)


@torch.library.register_fake("convkit::conv2d_per_sample")
def _conv2d_per_sample_fake(x, w, bias, stride, padding, dilation, groups, activation):
    _inductor_fallbacks()
    torch._check(x.dim() == 4 and w.dim() == 5, lambda: "convkit.conv2d_per_sample: x 4-D, w 5-D.")
    torch._check(w.shape[2] * groups == x.shape[1], lambda: "convkit.conv2d_per_sample: channels/groups mismatch.")
    return _conv_out(x, w.shape[1], w.shape[3], w.shape[4], stride, padding, dilation)


@torch.library.register_fake("convkit::conv2d_backward_data")
def _conv2d_backward_data_fake(grad_out, weight, input_size, stride, padding, dilation, groups):
    _inductor_fallbacks()
    torch._check(len(input_size) == 4, lambda: "convkit.conv2d_backward_data: the input size has 4 entries.")
    return torch.empty(list(input_size), dtype=grad_out.dtype, device=grad_out.device,
                       memory_format=_memory_format(grad_out))


@torch.library.register_fake("convkit::conv2d_backward_weight")
def _conv2d_backward_weight_fake(x, grad_out, weight_size, stride, padding, dilation, groups):
    _inductor_fallbacks()
    torch._check(len(weight_size) == 4, lambda: "convkit.conv2d_backward_weight: the weight size has 4 entries.")
    return torch.empty(list(weight_size), dtype=x.dtype, device=x.device, memory_format=_memory_format(x))


@torch.library.register_fake("convkit::vector_add")
def _vector_add_fake(a, b):
    _inductor_fallbacks()
    torch._check(a.shape == b.shape, lambda: "convkit.vector_add: shapes differ.")
    return torch.empty(a.shape, dtype=a.dtype, device=a.device)


@torch.library.register_fake("convkit::silu")
def _silu_fake(x):
    _inductor_fallbacks()
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.register_fake("convkit::csr_matvec")
def _csr_matvec_fake(values, row_ptr, col_idx, dense):
    _inductor_fallbacks()
    return torch.empty((row_ptr.shape[0] - 1,), dtype=values.dtype, device=values.device)


@torch.library.register_fake("convkit::max_pool2d")
def _max_pool2d_fake(x, kernel_size, stride, padding, dilation, ceil_mode):
    _inductor_fallbacks()
    # torch's own shape rules and output memory format (the op computes the same function)
    return torch.nn.functional.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)


@torch.library.register_fake("convkit::channel_mean")
def _channel_mean_fake(x):
    _inductor_fallbacks()
    return torch.nn.functional.adaptive_avg_pool2d(x, 1)


@torch.library.register_fake("convkit::scale_channels")
def _scale_channels_fake(x, s):
    _inductor_fallbacks()
    return x * s


@torch.library.register_fake("convkit::se_gate")
def _se_gate_fake(x, w1, b1, w2, b2, act1, act2):
    _inductor_fallbacks()
    torch._check(x.dim() == 4, lambda: "convkit.se_gate: x must be 4-D.")
    return torch.empty((x.shape[0], x.shape[1], 1, 1), dtype=x.dtype, device=x.device)


@torch.library.register_fake("convkit::layer_norm_last")
def _layer_norm_last_fake(x, weight, bias, eps):
    _inductor_fallbacks()
    return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)
