"""convkit for PyTorch: torch.ops.convkit operators backed by convkit's convolution kernels.

    import convkit
    y = convkit.conv2d(x, w, bias, stride=1, padding=1, activation="relu", residual=skip)
    y = convkit.conv2d_per_sample(x, w_per_sample)         # a different filter bank for every sample
    model = convkit.nn.convert(model)                      # swap every nn.Conv2d for convkit.nn.Conv2d
    fused = convkit.fuse(model.eval())                     # BatchNorm, activation and residual add folded into
                                                           # the convolutions; print(fused.convkit_summary)
    y = convkit.conv2d(x, w, padding=1, algo="autotune")   # time the candidates once, keep the winner (tune cache)
    convkit.plan(x, w, padding=1)                          # ("cuda_igemm_wgmma", "nhwc"): what conv2d would run,
                                                           # with .variant and .source ("tune cache"/"heuristic")

The operators are torch.ops.convkit.{conv2d, conv2d_per_sample, max_pool2d, channel_mean, scale_channels,
layer_norm_last, vector_add, silu, csr_matvec}; they have
fake (meta) implementations for torch.compile and autograd formulas (see docs/pytorch.md).
"""
import torch  # noqa: F401  (loads libtorch before the extension)

from . import _C  # noqa: F401  (registers the operators)
from . import _meta  # noqa: F401  (fake implementations)
from . import _autograd  # noqa: F401  (backward formulas)
from . import nn
from ._fuse import FusedConv2d, FusedLinear, FuseSummary, fuse
from .ops import (Plan, channel_mean, conv2d, conv2d_per_sample, csr_matvec, layer_norm, max_pool2d, plan,
                  scale_channels, silu, vector_add)

__all__ = ["conv2d", "conv2d_per_sample", "plan", "Plan", "fuse", "FusedConv2d", "FusedLinear", "FuseSummary", "vector_add", "silu",
           "csr_matvec", "max_pool2d", "channel_mean", "scale_channels", "layer_norm", "nn"]
__version__ = "0.1.0"
