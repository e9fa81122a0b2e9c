"""Python entry points of torch.ops.convkit, with torch.nn.functional-style arguments."""
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import _autograd

IntPair = Union[int, Sequence[int]]

ACTIVATIONS = ("none", "relu", "silu", "gelu", "relu6", "hardswish", "sigmoid", "hardsigmoid")


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
    every call. activation: none, relu, silu, gelu (exact erf), relu6, hardswish, sigmoid or hardsigmoid. algo:
    "auto" (the tune
    cache's entry for this problem if there is one, else the heuristic's choice), "autotune" (as "auto", but a problem without an
    entry is timed on its first call and the winner stored in the cache: docs/tuning.md), or a convkit
    algorithm name (`convkit list`), optionally with one of its variants as "name[variant]"; any of them with
    "/tf32" for TF32 math; float32 is strict fp32 otherwise, backward included.
    """
    args = (x, weight, bias, _pair(stride, "stride"), _pair(padding, "padding"), _pair(dilation, "dilation"), groups,
            activation, residual, algo)
    # NOTE: the op's Autograd kernel is C++ (csrc/autograd.cpp): the Python one that
    # torch.library.register_autograd installs was most of a call's host time (~7 us a call with no gradient to
    # record, ~70 us with one).
    return _autograd.conv2d_call(*args)


_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


class Plan(tuple):
    """What conv2d would run: a tuple (algorithm, layout) with more attributes (the library's convkit::plan).

    algorithm: the convkit algorithm name; "" for "autotune" when the tune cache has no entry yet (the first
    run times the candidates and decides). layout: "nchw" or "nhwc", the layout it computes in ("nhwc" for an
    NCHW x on CUDA means the op transforms x in and the output back). variant: the algorithm's variant (a tile
    shape, a split count; see `convkit list`), "" for the algorithm's own choice. source: where the choice
    comes from: "tune cache" (an entry written by algo="autotune" or `convkit tune`), "heuristic" (the first
    registered algorithm that can run it), "autotune" (no entry yet: decided on the first run) or "named"
    (the algo argument names it). workspace_bytes: what the op allocates for it (0 while undecided).
    verdicts: every algorithm of the device with its answer, in the order "auto" asks them, as a list of
    (algorithm, answer) pairs: "chosen", "rejected: <reason>", ... (`convkit plan` prints the same list).
    own_variant: with variant "", the variant the algorithm then runs by its own choice ("" when it has none):
    what `convkit plan` prints as "(its own choice)".
    """

    def __new__(cls, algorithm: str, layout: str, variant: str = "", source: str = "", workspace_bytes: int = 0,
                verdicts=(), own_variant: str = ""):
        self = super().__new__(cls, (algorithm, layout))
        self.variant = variant
        self.own_variant = own_variant
        self.source = source
        self.workspace_bytes = int(workspace_bytes)
        self.verdicts = [tuple(v) for v in verdicts]
        return self

    def __getnewargs__(self):
        return (self[0], self[1], self.variant, self.source, self.workspace_bytes, self.verdicts, self.own_variant)

    @property
    def algorithm(self) -> str:
        return self[0]

    @property
    def layout(self) -> str:
        return self[1]

    @property
    def algo(self) -> str:
        """The algo string that runs exactly this choice: "name" or "name[variant]" ("" if not decided yet)."""
        if not self[0]:
            return ""
        return f"{self[0]}[{self.variant}]" if self.variant else self[0]

    def __repr__(self):
        return (f"Plan(algorithm={self[0]!r}, layout={self[1]!r}, variant={self.variant!r}, "
                f"source={self.source!r})")


def plan(x: Tensor, weight: Tensor, stride: IntPair = 1, padding: IntPair = 0, dilation: IntPair = 1,
         groups: int = 1, algo: str = "auto", activation: str = "none") -> Plan:
    """What conv2d(x, weight, ..., activation=activation) would run, without running anything: the library's
    plan (convkit::plan, the same answer `convkit plan` prints), a Plan: the tuple (algorithm, layout) with
    .variant, .source, .workspace_bytes and .verdicts. For "auto" it is the tune cache's entry for this problem,
    dtype, layout and device if one applies, else the heuristic's (which weighs the epilogue's activation: a
    few 1x1 layers go to another kernel with SiLU or sigmoid). Raises NotImplementedError (with every
    algorithm's reason) when nothing can run the request. It reads the tune cache ($CONVKIT_TUNE_CACHE, docs/tuning.md) and prints
    nothing (the CONVKIT_LOG=dispatch line is written when a convolution runs).
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
    return Plan(*_C.plan(problem, _DTYPES[x.dtype], layout, x.device.type, algo, activation))


def conv2d_per_sample(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntPair = 1,
                      padding: IntPair = 0, dilation: IntPair = 1, groups: int = 1,
                      activation: str = "none") -> Tensor:
    """A convolution with a different filter bank for every sample (dynamic convolution), in one kernel.

    x: [N, C, H, W]; weight: [N, K, C/groups, R, S] (sample n uses weight[n]); bias: [N, K] or None.
    """
    args = (x, weight, bias, _pair(stride, "stride"), _pair(padding, "padding"), _pair(dilation, "dilation"), groups,
            activation)
    return _autograd.per_sample_call(*args)  # (as conv2d)


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


def max_pool2d(x: Tensor, kernel_size: IntPair, stride: Optional[IntPair] = None, padding: IntPair = 0,
               dilation: IntPair = 1, ceil_mode: bool = False) -> Tensor:
    """F.max_pool2d(x, ...) without the indices and without a gradient (inference): the same values. On CUDA a
    channels_last float32, float16 or bfloat16 x whose channels fill 16-byte vectors runs convkit's kernel
    (torch's CUDA kernel always writes int64 indices too); anything else runs torch's."""
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _pair(stride, "stride")
    return torch.ops.convkit.max_pool2d(x, k, s, _pair(padding, "padding"), _pair(dilation, "dilation"),
                                        bool(ceil_mode))


def channel_mean(x: Tensor) -> Tensor:
    """F.adaptive_avg_pool2d(x, 1) without a gradient (inference): the mean over H and W, shape (N, C, 1, 1). On
    CUDA a channels_last float32, float16 or bfloat16 x whose channels fill 16-byte vectors runs convkit's
    kernels (deterministic: partial sums added in a fixed order; equal to torch's within the rounding of the
    summation order); anything else runs torch's."""
    return torch.ops.convkit.channel_mean(x)


def scale_channels(x: Tensor, s: Tensor) -> Tensor:
    """x * s for s of shape (N, C, 1, 1), without a gradient (squeeze-excitation's scaling): bit-equal to torch's
    mul. On CUDA a channels_last float32, float16 or bfloat16 x whose channels fill 16-byte vectors, with s of x's
    dtype, runs convkit's kernel; anything else (other shapes: broadcasting) runs torch's mul."""
    return torch.ops.convkit.scale_channels(x, s)


def se_gate(x: Tensor, w1: Tensor, b1: Optional[Tensor], w2: Tensor, b2: Optional[Tensor], act1: str = "relu",
            act2: str = "sigmoid") -> Tensor:
    """Squeeze-excitation's gate without a gradient (inference): act2(conv2d(act1(conv2d(x.mean((2, 3),
    keepdim=True), w1, b1)), w2, b2)), shape (N, C, 1, 1), for 1x1 filters w1 [R, C, 1, 1] and w2 [C, R, 1, 1].
    On CUDA a channels_last float32, float16 or bfloat16 x whose channels fill 16-byte vectors runs one convkit
    kernel (a cluster of blocks an image, deterministic; the mean and the hidden units stay in float32 where
    the four-kernel form rounds both to x's dtype); anything else runs torch's ops in float32 (float64 for
    double). act1 and act2: any of ACTIVATIONS."""
    return torch.ops.convkit.se_gate(x, w1, b1, w2, b2, act1, act2)


def layer_norm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """F.layer_norm(x, x.shape[-1:], weight, bias, eps) without a gradient (inference): the LayerNorm over the last
    dimension (ConvNeXt's norm over the channels of a channels-last activation). On CUDA a contiguous float32,
    float16 or bfloat16 x whose rows fill 16-byte vectors (C * element size a multiple of 16, up to 2048 16-bit or
    1024 float32 channels), with weight and bias of x's dtype, runs convkit's kernel (a few lanes a row, the row in
    registers; equal to torch's within the rounding of the sums' order); anything else runs torch's."""
    return torch.ops.convkit.layer_norm_last(x, weight, bias, float(eps))
