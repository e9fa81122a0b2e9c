"""Drop-in modules: convkit.nn.Conv2d (a torch.nn.Conv2d whose forward runs convkit), Conv2dAct (the same with a
fused activation), convert(model), which swaps every torch.nn.Conv2d in a model, and fuse(model) (convkit.fuse:
BatchNorm, activation and residual add folded into the convolutions)."""
import os
from typing import Optional

import torch
import torch.nn.functional as F

from . import _autograd, ops


def _is_channels_last(t: torch.Tensor) -> bool:
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


class Conv2d(torch.nn.Conv2d):
    """torch.nn.Conv2d with convkit's kernels.

    Same constructor (padding ints, 'same' or 'valid'; padding_mode 'zeros', 'reflect', 'replicate',
    'circular'), same parameters and state_dict keys; it IS an nn.Conv2d, so code that checks isinstance keeps
    working. Extra keywords: algo ("auto", "autotune" or a convkit algorithm name, optionally with "/tf32";
    see convkit.conv2d) and
    memory_format (torch.channels_last stores the weight as KRSC, the layout the op reads for channels_last
    inputs, so that no weight copy is made per call; `module.to(memory_format=torch.channels_last)` does the
    same later).
    """

    _activation = "none"
    # TensorFlow's 'SAME' at any stride (timm's Conv2dSame, which convkit.fuse takes): padding (0, 0), and each
    # call pads by the input's size so that the output has ceil(H / stride) rows, an odd row or column at the
    # bottom or right. Torch's padding='same' is stride 1 only.
    same_by_input = False

    def __init__(self, *args, algo: str = "auto", memory_format: Optional[torch.memory_format] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.algo = algo
        if memory_format is not None:
            self.to(memory_format=memory_format)

    @classmethod
    def from_torch(cls, module: torch.nn.Conv2d, algo: str = "auto",
                   memory_format: Optional[torch.memory_format] = None, **extra):
        """A convkit Conv2d with the same configuration and (shared-by-copy) parameters as `module`.

        The weight keeps `module`'s memory format (a channels_last weight stays channels_last) unless
        memory_format says otherwise. timm's Conv2dSame gives a Conv2d with same_by_input set.
        """
        if not isinstance(module, torch.nn.Conv2d):
            raise TypeError(f"convkit.nn.Conv2d.from_torch: expected a torch.nn.Conv2d, got {type(module).__name__}.")
        w = module.weight
        if memory_format is None and _is_channels_last(w):
            memory_format = torch.channels_last
        new = cls(module.in_channels, module.out_channels, module.kernel_size, stride=module.stride,
                  padding=module.padding, dilation=module.dilation, groups=module.groups,
                  bias=module.bias is not None, padding_mode=module.padding_mode, device=w.device, dtype=w.dtype,
                  algo=algo, memory_format=memory_format, **extra)
        new.load_state_dict(module.state_dict())  # copy_ into the new parameters keeps their memory format
        new.same_by_input = getattr(module, "same_by_input", False) or _timm_conv2d_same(module)
        new.train(module.training)
        return new

    def extra_repr(self):
        s = super().extra_repr()
        if self._activation != "none":
            s += f", activation={self._activation}"
        if self.algo != "auto":
            s += f", algo={self.algo}"
        if self.same_by_input:
            s += ", same_by_input=True"
        return s

    def _explicit_padding(self, x):
        """(x padded where convkit cannot express it, symmetric padding for convkit)."""
        if self.padding_mode != "zeros":
            # torch's own rule: pad with the mode first, then convolve without padding.
            return F.pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode), [0, 0]
        if self.padding == "valid":
            return x, [0, 0]
        if self.padding == "same" or self.same_by_input:
            # Each dimension padded by `total` = what keeps ceil(size / stride) outputs (d * (k - 1) at stride 1,
            # torch's 'same'), half on each side; an odd total's extra row/column on the high side, as in torch
            # and TensorFlow.
            pads = []
            extra = [0, 0, 0, 0]  # left, right, top, bottom
            for i, (d, k, st) in enumerate(zip(self.dilation, self.kernel_size, self.stride)):
                size = x.shape[-2 + i]
                total = max((-(-size // st) - 1) * st + d * (k - 1) + 1 - size, 0)
                lo = total // 2
                pads.append(lo)
                if total - lo != lo:
                    extra[(1 - i) * 2 + 1] = total - 2 * lo
            if any(extra):
                x = F.pad(x, extra)
            return x, pads
        return x, list(self.padding)

    def forward(self, x, residual: Optional[torch.Tensor] = None):
        if x.dim() == 4 and self.padding_mode == "zeros" and not isinstance(self.padding, str) and \
                not self.same_by_input:
            # the common case with nothing to rewrite: straight to the op (a call's host time is the model's
            # speed at small batches; bench_host.py)
            return _autograd.conv2d_call(x, self.weight, self.bias, list(self.stride), list(self.padding),
                                         list(self.dilation), self.groups, self._activation, residual, self.algo)
        unbatched = x.dim() == 3
        if unbatched:
            x = x.unsqueeze(0)
            residual = residual.unsqueeze(0) if residual is not None else None
        x, pad = self._explicit_padding(x)
        y = ops.conv2d(x, self.weight, self.bias, self.stride, pad, self.dilation, self.groups, self._activation,
                       residual, self.algo)
        return y.squeeze(0) if unbatched else y


class Conv2dAct(Conv2d):
    """Conv2d followed by an activation (relu, silu, gelu, relu6, hardswish, sigmoid, hardsigmoid or none), fused into
    the kernel's store.

    forward(x, residual=None): act(conv(x) + bias + residual).
    """

    def __init__(self, *args, activation: str = "relu", **kwargs):
        if activation not in ops.ACTIVATIONS:
            raise ValueError(f"convkit.nn.Conv2dAct: activation must be one of {ops.ACTIVATIONS}; got '{activation}'.")
        super().__init__(*args, **kwargs)
        self._activation = activation

    @property
    def activation(self):
        return self._activation


class MaxPool2d(torch.nn.MaxPool2d):
    """nn.MaxPool2d that runs convkit.max_pool2d (no indices) where no gradient is needed, torch's otherwise
    (and whenever return_indices is set). convkit.fuse puts it in place of nn.MaxPool2d."""

    @classmethod
    def from_torch(cls, module: torch.nn.MaxPool2d):
        return cls(module.kernel_size, module.stride, module.padding, module.dilation, module.return_indices,
                   module.ceil_mode)

    def forward(self, x):
        if self.return_indices or (torch.is_grad_enabled() and x.requires_grad):
            return super().forward(x)
        return ops.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)


class AdaptiveAvgPool2d(torch.nn.AdaptiveAvgPool2d):
    """nn.AdaptiveAvgPool2d that runs convkit.channel_mean where the output is one pixel and no gradient is
    needed, torch's otherwise. convkit.fuse puts it in place of nn.AdaptiveAvgPool2d((1, 1)) (squeeze-excitation
    blocks, classifier heads)."""

    @classmethod
    def from_torch(cls, module: torch.nn.AdaptiveAvgPool2d):
        return cls(module.output_size)

    def forward(self, x):
        return channel_mean(x) if one_pixel(self.output_size) else super().forward(x)


def one_pixel(output_size) -> bool:
    """Whether an adaptive pool's output_size (an int or a pair; None keeps the input's size) is one pixel."""
    if isinstance(output_size, (tuple, list)):
        return len(output_size) == 2 and all(v == 1 for v in output_size)
    return output_size == 1


def channel_mean(x: torch.Tensor, dims=(-2, -1)) -> torch.Tensor:
    """x.mean(dims, keepdim=True), where dims name the last two dimensions of a 4-D x (F.adaptive_avg_pool2d(x,
    1)), by convkit.channel_mean when no gradient is needed; torch's mean otherwise (any other x, a gradient).
    convkit.fuse calls it in place of a squeeze-excitation block's mean written as a function."""
    if x.dim() != 4 or (torch.is_grad_enabled() and x.requires_grad):
        return x.mean(tuple(dims), keepdim=True)
    return ops.channel_mean(x)


def scale_channels(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """x * s (s of shape (N, C, 1, 1): squeeze-excitation's scale) by convkit.scale_channels where no gradient is
    needed, torch's mul otherwise. convkit.fuse calls it in place of such a mul."""
    if torch.is_grad_enabled() and (x.requires_grad or s.requires_grad):
        return x * s
    return ops.scale_channels(x, s)


class SqueezeExcitationGate(torch.nn.Module):
    """A squeeze-excitation block's gate, act2(fc2(act1(fc1(mean(x))))) of shape (N, C, 1, 1), where fc1 and fc2
    are 1x1 convolutions with their activations fused (convkit.nn.Conv2d modules; the parameters are theirs,
    shared). Where no gradient is needed, the parameters have x's dtype, the batch has at most `max_batch` images
    and fc1 at most `max_hidden` outputs, it runs convkit.se_gate: one kernel where the mean and the two
    convolutions are four, each a few microseconds of latency at small batches; otherwise the three steps as
    they were. convkit.fuse puts it in place of the mean and the two
    convolutions (EfficientNet, MobileNetV3, RegNetY)."""

    # Batches above this run the three steps. The one kernel won at batch 1 and 32 alike (EfficientNet-B0 as a
    # CUDA graph, bf16, H100: 0.502 -> 0.441 ms and 1.124 -> 1.023; docs/perf.md), so by default every batch the
    # kernel takes (its grid's 65535 images). CONVKIT_SE_GATE_MAX_BATCH sets it at import (0: never the kernel).
    max_batch = int(os.environ.get("CONVKIT_SE_GATE_MAX_BATCH", "65535"))
    # Gates of more hidden units than this run the three steps (CONVKIT_SE_GATE_MAX_HIDDEN at import): the
    # kernel's excitation gives each output channel a thread that reads its R weights in a row. Measured as
    # CUDA graphs (bf16, H100, every gate on the kernel): EfficientNet-B0 (R 4-48) and RegNetY-400MF (R 12-110)
    # faster at batch 1 and 32, MobileNetV3-Large (R 24-240) slower at both; 112 keeps the first two whole
    # and MobileNetV3-Large's three gates of R 24-32 (0.369 / 0.783 ms at batch 1 / 32 under this rule, 0.446 /
    # 0.878 with every gate on the kernel: H200, same call; against no gate on the kernel not measured).
    max_hidden = int(os.environ.get("CONVKIT_SE_GATE_MAX_HIDDEN", "112"))

    def __init__(self, fc1: torch.nn.Module, fc2: torch.nn.Module):
        super().__init__()
        self.fc1, self.fc2 = fc1, fc2

    @staticmethod
    def takes(fc1: torch.nn.Module, fc2: torch.nn.Module) -> bool:
        """Whether fc1 -> fc2 is a gate this module computes: two convkit Conv2d 1x1 convolutions (no stride,
        padding, dilation or groups, zero padding mode), fc1 C -> R and fc2 R -> C."""
        def plain(m):
            return (isinstance(m, Conv2d) and tuple(m.kernel_size) == (1, 1) and tuple(m.stride) == (1, 1)
                    and tuple(m.dilation) == (1, 1) and m.groups == 1 and m.padding_mode == "zeros"
                    and not isinstance(m.padding, str) and tuple(m.padding) == (0, 0))
        return (plain(fc1) and plain(fc2) and fc1.out_channels == fc2.in_channels
                and fc2.out_channels == fc1.in_channels)

    def forward(self, x):
        fc1, fc2 = self.fc1, self.fc2
        same_dtype = all(t is None or t.dtype == x.dtype for t in (fc1.weight, fc1.bias, fc2.weight, fc2.bias))
        if (x.dim() == 4 and x.shape[0] <= self.max_batch and fc1.out_channels <= self.max_hidden
                and x.shape[1] == fc1.in_channels and same_dtype  # (an autocast region: the convolutions cast)
                and not (torch.is_grad_enabled() and (x.requires_grad or fc1.weight.requires_grad
                                                      or fc2.weight.requires_grad))):
            return ops.se_gate(x, fc1.weight, fc1.bias, fc2.weight, fc2.bias, fc1._activation, fc2._activation)
        return fc2(fc1(channel_mean(x)))


def layer_norm(x: torch.Tensor, normalized_shape, weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-5) -> torch.Tensor:
    """F.layer_norm(x, normalized_shape, weight, bias, eps), by convkit.layer_norm where normalized_shape is x's
    last dimension alone and no gradient is needed; torch's otherwise. convkit.fuse calls it in place of
    F.layer_norm (torchvision's and timm's LayerNorm2d trace to it)."""
    shape = tuple(normalized_shape) if isinstance(normalized_shape, (tuple, list, torch.Size)) else (normalized_shape,)
    if (len(shape) != 1 or x.dim() < 1 or x.shape[-1] != shape[0] or
            (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)))):
        return F.layer_norm(x, normalized_shape, weight, bias, eps)
    return ops.layer_norm(x, weight, bias, eps)


class LayerNorm(torch.nn.LayerNorm):
    """nn.LayerNorm that runs convkit.layer_norm where it normalizes over the last dimension alone and no
    gradient is needed, torch's otherwise. convkit.fuse puts it in place of such nn.LayerNorm modules (ConvNeXt's
    blocks, where torch's kernel takes a block a row: 0.84 ms of a fused ConvNeXt-T's 2.7 ms of GPU time on the
    H200)."""

    @classmethod
    def from_torch(cls, module: torch.nn.LayerNorm):
        new = cls(module.normalized_shape, module.eps, module.elementwise_affine, bias=module.bias is not None,
                  device="meta")
        new.weight, new.bias = module.weight, module.bias  # the same parameters (fuse works on its own copy)
        return new.train(module.training)

    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


def _timm_conv2d_same(m) -> bool:
    """timm's Conv2dSame (TensorFlow's 'SAME' padding at any stride: its forward pads the input by its size,
    then convolves without padding), which a convkit convolution computes with same_by_input set."""
    t = type(m)
    return (t.__name__ == "Conv2dSame" and t.__module__.startswith("timm.") and isinstance(m, torch.nn.Conv2d) and
            m.padding_mode == "zeros" and tuple(m.padding) == (0, 0))


def convert(model: torch.nn.Module, algo: str = "auto",
            memory_format: Optional[torch.memory_format] = None) -> torch.nn.Module:
    """Replaces every torch.nn.Conv2d in `model` (in place, recursively) with convkit.nn.Conv2d; returns model.

    timm's Conv2dSame (TensorFlow's 'SAME' padding by the input's size) too, as a Conv2d with same_by_input set;
    other subclasses of nn.Conv2d are left as they are.
    The new modules carry the same parameters (copied), so outputs match up to floating-point summation order.
    Weights keep their memory format; memory_format=torch.channels_last stores every converted weight
    channels_last (KRSC), what a channels_last model wants (the op then reads the weight in place; a
    contiguous weight would be copied on every call). A model that is itself a Conv2d is returned converted.
    """
    if type(model) is torch.nn.Conv2d or _timm_conv2d_same(model):
        return Conv2d.from_torch(model, algo=algo, memory_format=memory_format)
    for name, child in list(model.named_children()):
        if type(child) is torch.nn.Conv2d or _timm_conv2d_same(child):
            setattr(model, name, Conv2d.from_torch(child, algo=algo, memory_format=memory_format))
        else:
            convert(child, algo=algo, memory_format=memory_format)
    return model


def fuse(model: torch.nn.Module, **kwargs) -> torch.nn.Module:
    """convkit.fuse (see convkit/_fuse.py): BatchNorm, activations and residual adds folded into convkit
    convolutions of a copy of the eval-mode model."""
    from ._fuse import fuse as _fuse
    return _fuse(model, **kwargs)
