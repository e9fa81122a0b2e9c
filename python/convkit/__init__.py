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
se_gate, layer_norm_last, vector_add, silu, csr_matvec}; they have
fake (meta) implementations for torch.compile and autograd formulas (see docs/pytorch.md).
"""
import torch  # noqa: F401  (loads libtorch before the extension)


def _load_onednn_on_its_own():
    """Loads the oneDNN library the extension links (Debian's libdnnl.so.2), if there is one, before the
    extension. Loaded as the extension's dependency, its symbol lookups also search the extension's other
    dependencies, libtorch_cpu among them (which exports C++ standard library symbols), and its float32 GEMM
    then refused every call (status 3) or ran at the speed of a plain loop (a 3x3 64 -> 64 layer at 32x32,
    batch 8: 12.1 ms through convkit.conv2d); loaded here first, on its own, 4.1 ms (docs/perf.md,
    2026-12-06). Which symbol it was is not known. The extension then binds to this copy (same soname)."""
    import ctypes

    try:
        ctypes.CDLL("libdnnl.so.2")
    except OSError:  # (a build without oneDNN, or none on this machine)
        pass


_load_onednn_on_its_own()

from . import _C  # noqa: F401,E402  (registers the operators)
from . import _meta  # noqa: F401,E402  (fake implementations)
from . import _autograd  # noqa: F401,E402  (backward formulas)
from . import nn
from ._fuse import FusedConv2d, FusedLinear, FuseSummary, fuse
from .ops import (Plan, channel_mean, conv2d, conv2d_per_sample, csr_matvec, layer_norm, max_pool2d, plan,
                  scale_channels, se_gate, silu, vector_add)


def _warn_if_openblas_is_generic():
    """A warning, once at import, where Debian's OpenBLAS did not recognise the CPU and runs its generic kernels
    and oneDNN's GEMM cannot stand in (no oneDNN in the build, or its first calls failed): the float32 CPU
    convolutions (cpu_im2col_gemm, cpu_winograd, the weight gradients) then run several times slower
    (docs/environment.md); OpenBLAS reads OPENBLAS_CORETYPE only when it loads, so the remedy is to set it
    before importing convkit."""
    import warnings

    why = _C.cpu_float32_gemm()
    if "did not recognise this CPU" in why and why.startswith("OpenBLAS"):
        warnings.warn(f"convkit: the float32 GEMM: {why}. Set OPENBLAS_CORETYPE (SkylakeX with AVX-512, else "
                      "Haswell) before importing convkit: float32 CPU convolutions ran about 3x faster with it "
                      "(docs/environment.md).", RuntimeWarning, stacklevel=2)


_warn_if_openblas_is_generic()

__all__ = ["conv2d", "conv2d_per_sample", "plan", "Plan", "fuse", "FusedConv2d", "FusedLinear", "FuseSummary", "vector_add", "silu",
           "csr_matvec", "max_pool2d", "channel_mean", "scale_channels", "se_gate", "layer_norm", "nn"]
__version__ = "0.1.0"
