"""Python entry points of torch.ops.convkit, with torch.nn.functional-style arguments."""
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

IntPair = Union[int, Sequence[int]]

ACTIVATIONS = ("none", "relu", "silu", "gelu")


def _pair(v: IntPair, name: str):
    if isinstance(v, int):
        return [v, v]
    v = [int(e) for e in v]
    if len(v) == 1:
        return v * 2
    if len(v) != 2:
        raise ValueError(f"convkit: {name} must be an int or a pair of ints; got {v}.")
    return v


def conv2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntPair = 1, padding: IntPair = 0,
           dilation: IntPair = 1, groups: int = 1, activation: str = "none", residual: Optional[Tensor] = None,
           algo: str = "auto") -> Tensor:
    """F.conv2d plus a fused epilogue: y = act(conv(x, weight) + bias + residual).

    x: [N, C, H, W], contiguous (NCHW) or channels_last (NHWC): its memory format picks the layout and the
    output's memory format. On CUDA an NCHW x is computed in NHWC when the library has a faster kernel there
    (the tensor-core kernels read NHWC only): one transform in, one out; convkit.plan() tells.
    weight: [K, C/groups, R, S]; for a channels_last x keep it channels_last too (KRSC), else it is copied on
    every call. activation: none, relu, silu or gelu (exact erf). algo: "auto" or a convkit algorithm name
    (`convkit list`), optionally with "/tf32" for TF32 math; float32 is strict fp32 otherwise, backward included.
    """
    return torch.ops.convkit.conv2d(x, weight, bias, _pair(stride, "stride"), _pair(padding, "padding"),
                                    _pair(dilation, "dilation"), groups, activation, residual, algo)


_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def plan(x: Tensor, weight: Tensor, stride: IntPair = 1, padding: IntPair = 0, dilation: IntPair = 1,
         groups: int = 1, algo: str = "auto") -> Tuple[str, str]:
    """(algorithm, layout) that conv2d(x, weight, ...) would run: the convkit algorithm name and the layout it
    computes in ("nhwc" for an NCHW x on CUDA means the op transforms x in and the output back, see
    docs/pytorch.md). Nothing is computed. The algorithm is "" for "autotune" (decided when it runs).
    Raises NotImplementedError (with every algorithm's reason) when nothing can run the request.
    """
    from . import _C
    from ._meta import _memory_format

    if x.dim() != 4 or weight.dim() != 4:
        raise ValueError("convkit.plan: x and weight must be 4-D.")
    if x.dtype not in _DTYPES:
        raise TypeError(f"convkit.plan: x has dtype {x.dtype}; convkit computes in float32, float16 or bfloat16.")
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride, "stride"), _pair(padding, "padding"), _pair(dilation, "dilation")
    n, c, h, w = x.shape
    k, _, r, s = weight.shape
    problem = f"n{n}c{c}h{h}w{w}k{k}r{r}s{s}ph{ph}pw{pw}uh{sh}uw{sw}dh{dh}dw{dw}g{groups}"
    layout = "nhwc" if _memory_format(x) == torch.channels_last else "nchw"
    return tuple(_C.plan(problem, _DTYPES[x.dtype], layout, x.device.type, algo))


def conv2d_per_sample(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntPair = 1,
                      padding: IntPair = 0, dilation: IntPair = 1, groups: int = 1,
                      activation: str = "none") -> Tensor:
    """A convolution with a different filter bank for every sample (dynamic convolution), in one kernel.

    x: [N, C, H, W]; weight: [N, K, C/groups, R, S] (sample n uses weight[n]); bias: [N, K] or None.
    """
    return torch.ops.convkit.conv2d_per_sample(x, weight, bias, _pair(stride, "stride"), _pair(padding, "padding"),
                                               _pair(dilation, "dilation"), groups, activation)


def vector_add(a: Tensor, b: Tensor) -> Tensor:
    """a + b for two tensors of one shape, dtype and device (the seed's first kernel)."""
    return torch.ops.convkit.vector_add(a, b)


def silu(x: Tensor) -> Tensor:
    """x * sigmoid(x) (the seed's custom activation)."""
    return torch.ops.convkit.silu(x)


def csr_matvec(values: Tensor, row_ptr: Tensor, col_idx: Tensor, dense: Tensor) -> Tensor:
    """A CSR sparse matrix times a dense vector: out[r] = sum(values[j] * dense[col_idx[j]]) for j in row r.

    row_ptr: [rows + 1], non-decreasing, row_ptr[0] == 0, row_ptr[-1] == nnz; col_idx: [nnz] in [0, len(dense));
    indices int32 or int64 (both the same). The indices are validated (on CUDA this synchronises).
    """
    return torch.ops.convkit.csr_matvec(values, row_ptr, col_idx, dense)
