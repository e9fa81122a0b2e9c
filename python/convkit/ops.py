"""Python entry points of torch.ops.convkit, with torch.nn.functional-style arguments."""
from typing import Optional, Sequence, Union

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
    output's memory format. weight: [K, C/groups, R, S]. activation: none, relu, silu or gelu (exact erf).
    algo: "auto" or a convkit algorithm name (`convkit list`), optionally with "/tf32" for TF32 math.
    """
    return torch.ops.convkit.conv2d(x, weight, bias, _pair(stride, "stride"), _pair(padding, "padding"),
                                    _pair(dilation, "dilation"), groups, activation, residual, algo)


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
