"""convkit.fuse(model) (also convkit.nn.fuse): BatchNorm, the activation and the residual add folded into each convolution.

    fused = convkit.fuse(model.eval())      # a new module; `model` is left as it was
    print(fused.convkit_summary)            # what was fused, what was left and why
    y = fused(x)                            # or torch.compile(fused, fullgraph=True)(x)

The model is traced with torch.fx (symbolic tracing). Where it cannot be traced whole, each child module is
fused on its own, recursively, and whatever still cannot be traced is left as it was (the summary says so).
For every convolution (torch.nn.Conv2d or a subclass that computes its function, timm's Conv2dSame, whose
TensorFlow 'SAME' padding by the input's size becomes convkit.nn.Conv2d.same_by_input, or a convkit.nn.Conv2d
without an activation) the pass looks at what consumes its output, one single-use step at a time (a Conv2d
subclass with a forward of its own is a leaf of the trace and runs as it is):

    conv -> [BatchNorm2d] -> [scale] -> [activation]                      act(bn(conv(x)))
    conv -> [BatchNorm2d] -> [scale] -> add(other) -> [activation]        act(bn(conv(x)) + other)

and replaces the whole chain by one convkit.FusedConv2d:
  * BatchNorm2d with running statistics (affine or not) is folded into the weight and bias
    (torch.nn.utils.fusion.fuse_conv_bn_weights, computed in float32, then cast to the parameter dtype);
    one without running statistics (track_running_stats=False) normalises with the batch's own statistics
    and is left, with that reason. So is F.batch_norm in its eval form, with statistics that are parameters
    or buffers of the model: what BatchNorm2d subclasses trace to (timm's BatchNormAct2d: its activation and
    an add after it are then fused too).
  * a scale: the product with a parameter or buffer of one value a channel (shape (K, 1, 1) or (1, K, 1, 1),
    maybe reshaped to it in the model: ConvNeXt's layer scale), folded into the weight and bias in float32.
  * activations: ReLU, ReLU6, SiLU, GELU (exact erf form), Hardswish, Sigmoid, Hardsigmoid; module, functional,
    method and in-place forms (nn.ReLU(inplace=True), F.relu, torch.relu, x.relu_(), x.sigmoid(),
    F.hardtanh(x, 0, 6), ...).
  * the add: `+`, `+=`, torch.add and Tensor.add(_) without alpha, of the chain's output and any other tensor.
    When both operands are convolution chains, the one whose convolution runs last takes the add (the
    other's output is then ready when it runs). The residual epilogue needs the other operand in the output's
    shape, dtype, device and memory format: this is checked on every call, and a call where it does not hold
    runs the convolution and then adds and activates in PyTorch (always the same answer, not always fused).
  * an output used more than once ends its chain there: a conv output used twice is never folded into a
    residual.
  * BatchNorm and an activation after torch.cat along the channels of convolutions read nowhere else (MixNet's
    MixedConv2d) are split over those convolutions first, a slice of the BatchNorm each, and then folded.
  * in eval mode nn.Dropout, nn.Identity and torchvision's StochasticDepth are the identity and are dropped,
    so that EfficientNet's `block(x) + x` reaches the add.
A torch.nn.Linear that acts on a 4-D channels-last activation (its input comes from x.permute(0, 2, 3, 1),
maybe through a LayerNorm over the channels, an activation or another such Linear: ConvNeXt's MLP) is a 1x1
convolution over x, and becomes one (convkit.FusedLinear, on the same memory: no copy), with the same epilogue:

    linear -> [activation]                                             act(linear(x))
    linear -> [permute(0, 3, 1, 2)] -> [mul(scale)] -> [add(other)] -> [activation]

where the scale is a parameter or buffer of shape (K, 1, 1) after the permute (ConvNeXt's layer_scale) or (K,)
before it, folded into the weight and bias in float32. This rewrite is on by default (linears=False leaves the
Linears to torch): with cuda_igemm_wgmma on the Linears and the LayerNorms on convkit, the fused ConvNeXt-T ran
faster with it on the H200 (docs/perf.md, 2026-12-04). On CUDA in float32 a FusedLinear computes with torch's
Linear (cuBLAS) and PyTorch's epilogue ops, which measured faster there
(FusedLinear.torch_for_cuda_f32), and so does it on the CPU (FusedLinear.torch_on_cpu: faster there too); in
16-bit types on CUDA it is convkit's convolution.
ConvTranspose2d, the other Linears and everything else stay as they were; convolutions that nothing fuses with
still become convkit convolutions. convkit.FusedConv2d is the module that replaces a chain.

Squeeze-excitation blocks (EfficientNet, MobileNetV3, RegNetY): their two convolutions are fused like any
other (SiLU or ReLU, then Sigmoid or Hardsigmoid, in the epilogue); nn.AdaptiveAvgPool2d to one pixel becomes
convkit.nn.AdaptiveAvgPool2d (convkit.channel_mean) and the product `x * s` of a block's input and the scale
computed from its mean becomes convkit.nn.scale_channels: channels-last kernels that read and write at the copy
rate where torch's reduction and broadcasting mul do not. Both compute torch's function for every input
(other shapes and layouts, and a gradient, run torch's).

LayerNorm over the channels (nn.LayerNorm over the last dimension of ConvNeXt's channels-last activations, and
F.layer_norm, which torchvision's and timm's LayerNorm2d trace to) becomes convkit.nn.LayerNorm /
convkit.nn.layer_norm: a kernel with a few lanes a row, where torch's gives each row of 96-768 channels a block.

Training mode is refused (RuntimeError): BatchNorm's statistics move while training, so no fold is valid.
The fused model owns copies of the weights: call fuse again after the original's weights change.
"""
import copy
import operator
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.fx
import torch.nn.functional as F
from torch.nn.utils.fusion import fuse_conv_bn_weights

from . import nn as cnn

__all__ = ["fuse", "FusedConv2d", "FusedLinear", "FuseSummary"]


class FusedConv2d(cnn.Conv2d):
    """A convkit convolution with BatchNorm folded in and a fused activation and residual.

    forward(x, residual=None) = act(conv(x) + bias + residual). A residual that cannot go to the epilogue
    (another shape, dtype, device or memory format than the output; broadcasting) is added after the
    convolution by PyTorch instead, and the activation applied after it: the same function either way.
    """

    def __init__(self, *args, activation: str = "none", fused_from: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self._activation = activation
        self.fused_from = fused_from

    @property
    def activation(self):
        return self._activation

    def extra_repr(self):
        s = super().extra_repr()
        return s + (f", fused_from='{self.fused_from}'" if self.fused_from else "")

    def _residual_fits(self, x, residual):
        if residual.dtype != x.dtype or residual.device != x.device or residual.dim() != x.dim():
            return False
        # The output's shape (padding modes, 'same' and 'valid' included: what the convolution will produce).
        n = x.shape[0] if x.dim() == 4 else None
        sizes = []
        for i in range(2):
            h = x.shape[-2 + i]
            k, st, d = self.kernel_size[i], self.stride[i], self.dilation[i]
            if self.padding == "valid":
                pad = 0
            elif self.padding == "same" or self.same_by_input:  # ceil(h / stride) (torch's 'same': stride 1)
                sizes.append(-(-h // st))
                continue
            else:
                pad = 2 * self.padding[i]
            sizes.append((h + pad - d * (k - 1) - 1) // st + 1)
        want = ([n] if n is not None else []) + [self.out_channels] + sizes
        if list(residual.shape) != want:
            return False
        if x.dim() == 4:
            # The output takes x's memory format (channels_last stays channels_last).
            cl = cnn._is_channels_last(x)
            if cl:
                return residual.is_contiguous(memory_format=torch.channels_last)
            return residual.is_contiguous()
        return residual.is_contiguous()

    def forward(self, x, residual: Optional[torch.Tensor] = None):
        if residual is None:
            return super().forward(x)
        if torch.compiler.is_compiling():
            if self._residual_fits(x, residual):  # (decided while tracing: no cost when the graph runs)
                return super().forward(x, residual)
        elif residual.dtype == x.dtype and residual.device == x.device and residual.dim() == x.dim():
            # Eager: the op checks the residual's shape itself (ValueError) and takes any memory format (a copy
            # into the output's): asking it costs nothing on the common path, where _residual_fits cost ~5 us a
            # call on the CPU.
            try:
                return super().forward(x, residual)
            except ValueError:
                pass
        act, self._activation = self._activation, "none"
        try:
            y = super().forward(x)
        finally:
            self._activation = act
        return _apply_activation(y + residual, act)


class FusedLinear(FusedConv2d):
    """A torch.nn.Linear on a 4-D channels-last activation, run as the 1x1 convolution it is, with the epilogue.

    forward(x, residual=None): x is [N, H, W, C] (the features last, as after x.permute(0, 2, 3, 1)); the
    product is computed by convkit on x.permute(0, 3, 1, 2), the same memory seen as [N, C, H, W]. With
    nchw_out=False it returns act(linear(x) + residual) as [N, H, W, K] (residual in that shape too); with
    nchw_out=True it returns the same values permuted to [N, K, H, W], what the permute back that it absorbed
    returned (residual in that shape). The weight is the Linear's, [K, C] viewed as [K, C, 1, 1].
    """

    # float32 on CUDA runs as torch's Linear (cuBLAS) and PyTorch's epilogue ops: convkit's strict-fp32 1x1
    # kernel (cuda_igemm_simt) is slower than cuBLAS on these GEMMs and computes NCHW, so each call also pays
    # two layout copies (ConvNeXt-T f32 batch 32 on the H200: 20.7 ms that way against 11.6 for the Linears
    # left alone; docs/perf.md, 2026-12-03). False runs convkit there too.
    torch_for_cuda_f32 = True
    # On the CPU (every dtype) the same: torch's Linear (its BLAS) and PyTorch's epilogue ops measured faster than
    # convkit's CPU 1x1 convolution (ConvNeXt-T, 160x160, batch 1, 2 threads: 49 ms a forward against 62 in
    # float32). False runs convkit there too.
    torch_on_cpu = True

    def __init__(self, in_features, out_features, *, nchw_out=False, **kwargs):
        super().__init__(in_features, out_features, 1, **kwargs)
        self.nchw_out = nchw_out

    def extra_repr(self):
        return super().extra_repr() + (", nchw_out=True" if self.nchw_out else "")

    def _as_linear(self, x, residual):
        y = F.linear(x, self.weight.flatten(1), self.bias)
        if self.nchw_out:
            y = y.permute(0, 3, 1, 2)
        return _apply_activation(y + residual if residual is not None else y, self._activation)

    def forward(self, x, residual: Optional[torch.Tensor] = None):
        if x.dim() != 4:
            # Not the 4-D activation the pass expected (a broadcast changed the rank): the Linear it was.
            return self._as_linear(x, residual)
        if (self.torch_for_cuda_f32 and x.is_cuda and x.dtype == torch.float32) or (self.torch_on_cpu and x.is_cpu):
            return self._as_linear(x, residual)
        xc = x.permute(0, 3, 1, 2)
        if not (xc.is_contiguous() or xc.is_contiguous(memory_format=torch.channels_last)):
            xc = xc.contiguous(memory_format=torch.channels_last)
        if residual is not None and not self.nchw_out:
            residual = residual.permute(0, 3, 1, 2)
        y = super().forward(xc, residual)
        return y if self.nchw_out else y.permute(0, 2, 3, 1)


def _apply_activation(y, act):
    if act == "none":
        return y
    if act == "relu":
        return F.relu(y)
    if act == "relu6":
        return F.relu6(y)
    if act == "silu":
        return F.silu(y)
    if act == "gelu":
        return F.gelu(y)
    if act == "hardswish":
        return F.hardswish(y)
    if act == "sigmoid":
        return torch.sigmoid(y)
    if act == "hardsigmoid":
        return F.hardsigmoid(y)
    raise ValueError(f"convkit.fuse: unknown activation '{act}'.")


@dataclass
class FuseEntry:
    where: str         # the convolution's module path (or the subtree that was left)
    fused: List[str]   # e.g. ["conv", "bn", "add", "relu"]
    note: str = ""     # why a chain stopped where it did, or why something was left
    split_from: str = ""  # the concatenation whose BatchNorm was split over this convolution and others


@dataclass
class FuseSummary:
    """What convkit.fuse did: one entry per convolution call site and one per thing it left, with the reason.

    print(summary) shows a table; .convs, .bn_folded, .activations and .residuals count.
    """
    entries: List[FuseEntry] = field(default_factory=list)
    left: List[FuseEntry] = field(default_factory=list)

    @property
    def convs(self):
        return sum(e.fused[:1] == ["conv"] for e in self.entries)

    @property
    def linears(self):
        """Linear layers run as 1x1 convolutions (FusedLinear)."""
        return sum(e.fused[:1] == ["linear"] for e in self.entries)

    @property
    def bn_folded(self):
        """BatchNorms folded (one split over the convolutions of a concatenation counts once)."""
        whole = sum("bn" in e.fused and not e.split_from for e in self.entries)
        return whole + len({e.split_from for e in self.entries if "bn" in e.fused and e.split_from})

    @property
    def activations(self):
        return sum(any(a in e.fused for a in _ACT_NAMES) for e in self.entries)

    @property
    def residuals(self):
        return sum("add" in e.fused for e in self.entries)

    @property
    def pools(self):
        """nn.MaxPool2d layers now convkit.nn.MaxPool2d (no indices)."""
        return sum(e.fused[:1] == ["maxpool"] for e in self.entries)

    @property
    def mean_pools(self):
        """nn.AdaptiveAvgPool2d((1, 1)) layers now convkit.nn.AdaptiveAvgPool2d (convkit.channel_mean)."""
        return sum(e.fused[:1] == ["avgpool"] for e in self.entries)

    @property
    def se_gates(self):
        """Squeeze-excitation gates (the mean and two 1x1 convolutions) now convkit.nn.SqueezeExcitationGate."""
        return sum(e.fused[:1] == ["segate"] for e in self.entries)

    @property
    def layer_norms(self):
        """LayerNorms over the channels (nn.LayerNorm, F.layer_norm, LayerNorm2d) now convkit.layer_norm."""
        return sum(e.fused[:1] == ["layernorm"] for e in self.entries)

    @property
    def channel_scales(self):
        """Squeeze-excitation products x * s now convkit.nn.scale_channels."""
        return sum(e.fused[:1] == ["scale"] for e in self.entries)

    def extend(self, other, prefix):
        for e in other.entries:
            split = _join(prefix, e.split_from) if e.split_from else ""
            self.entries.append(FuseEntry(_join(prefix, e.where), e.fused, e.note, split))
        for e in other.left:
            self.left.append(FuseEntry(_join(prefix, e.where), e.fused, e.note))

    def __str__(self):
        lin = f", {self.linears} Linear layers as 1x1 convolutions" if self.linears else ""
        pools = f"; {self.pools} max pools without indices" if self.pools else ""
        if self.mean_pools or self.channel_scales:
            pools += f"; {self.mean_pools} mean pools and {self.channel_scales} squeeze-excitation scales by convkit"
        if self.se_gates:
            pools += f"; {self.se_gates} squeeze-excitation gates by convkit.se_gate"
        if self.layer_norms:
            pools += f"; {self.layer_norms} LayerNorms by convkit"
        lines = [f"convkit.fuse: {self.convs} convolutions{lin}; {self.bn_folded} BatchNorms folded, "
                 f"{self.activations} activations and {self.residuals} residual adds in the epilogue{pools}"]
        w = max([len(e.where) for e in self.entries + self.left] + [8])
        for e in self.entries:
            lines.append(f"  {e.where:<{w}}  {' + '.join(e.fused):<28} {e.note}".rstrip())
        if self.left:
            lines.append("left as it was:")
            for e in self.left:
                lines.append(f"  {e.where:<{w}}  {e.note}")
        return "\n".join(lines)

    __repr__ = __str__


_ACT_NAMES = ("relu", "relu6", "silu", "gelu", "hardswish", "sigmoid", "hardsigmoid")


def _join(prefix, name):
    return f"{prefix}.{name}" if prefix and name else (prefix or name)


# ---- recognising nodes -------------------------------------------------------------------------------

def _module(gm, node):
    if node.op != "call_module":
        return None
    return gm.get_submodule(node.target)


def _plain_conv(m):
    """nn.Conv2d, or a subclass that computes what it does (forward and _conv_forward not overridden), or timm's
    Conv2dSame (convkit.nn._timm_conv2d_same)."""
    return (isinstance(m, torch.nn.Conv2d) and not isinstance(m, cnn.Conv2d) and
            ((type(m).forward is torch.nn.Conv2d.forward and type(m)._conv_forward is torch.nn.Conv2d._conv_forward)
             or cnn._timm_conv2d_same(m)))


def _is_conv(gm, node):
    m = _module(gm, node)
    if _plain_conv(m):
        return True
    return isinstance(m, cnn.Conv2d) and m._activation == "none" and not isinstance(m, FusedConv2d)


def _activation_of(gm, node):
    """The convkit activation name `node` computes from its first argument alone, or None."""
    m = _module(gm, node)
    if m is not None:
        t = type(m)
        if t is torch.nn.ReLU:
            return "relu"
        if t is torch.nn.ReLU6:
            return "relu6"
        if t is torch.nn.SiLU:
            return "silu"
        if t is torch.nn.Hardswish:
            return "hardswish"
        if t is torch.nn.Sigmoid:
            return "sigmoid"
        if t is torch.nn.Hardsigmoid:
            return "hardsigmoid"
        if t is torch.nn.GELU and m.approximate == "none":
            return "gelu"
        if t is torch.nn.Hardtanh and m.min_val == 0.0 and m.max_val == 6.0:
            return "relu6"
        return None
    if node.op == "call_function":
        f = node.target
        extra = [a for a in node.args[1:]]
        if f in (F.relu, torch.relu, torch.relu_, F.relu_):
            return "relu"
        if f is F.relu6:
            return "relu6"
        if f is F.silu:
            return "silu"
        if f is F.hardswish:
            return "hardswish"
        if f in (torch.sigmoid, F.sigmoid):
            return "sigmoid"
        if f is F.hardsigmoid:
            return "hardsigmoid"
        if f is F.gelu:
            return "gelu" if node.kwargs.get("approximate", "none") == "none" and not extra else None
        if f in (F.hardtanh, F.hardtanh_):
            lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min_val", -1.0)
            hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max_val", 1.0)
            return "relu6" if (lo, hi) == (0.0, 6.0) else None
        return None
    if node.op == "call_method" and node.target in ("relu", "relu_"):
        return "relu"
    if node.op == "call_method" and node.target in ("sigmoid", "sigmoid_"):
        return "sigmoid"
    return None


def _add_other(node, chain_out):
    """For an add of chain_out and another tensor node: that other node; else None."""
    if node.op == "call_function" and node.target in (operator.add, operator.iadd, torch.add):
        if node.kwargs.get("alpha", 1) != 1 or node.kwargs.get("out") is not None or len(node.args) != 2:
            return None
        a, b = node.args
    elif node.op == "call_method" and node.target in ("add", "add_"):
        if node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
            return None
        a, b = node.args
        if node.target == "add_" and a is not chain_out:
            return None  # other.add_(conv): the result must live in `other`'s storage
    else:
        return None
    other = b if a is chain_out else a if b is chain_out else None
    if other is None or other is chain_out or not isinstance(other, torch.fx.Node):
        return None
    return other


def _is_bn(gm, node):
    # (SyncBatchNorm, what a model converted for distributed training has, is a BatchNorm in eval mode)
    return type(_module(gm, node)) in (torch.nn.BatchNorm2d, torch.nn.SyncBatchNorm)


_BN_ARGS = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")


def _attr(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass
class _Stats:
    """What _fold reads of a BatchNorm: a functional batch_norm's running statistics, affine parameters, eps."""
    running_mean: torch.Tensor
    running_var: torch.Tensor
    weight: Optional[torch.Tensor]
    bias: Optional[torch.Tensor]
    eps: float


def _functional_bn(gm, node):
    """For a call of F.batch_norm (what timm's BatchNormAct2d and other BatchNorm2d subclasses trace to), its
    statistics as _Stats where it is foldable: eval form (training=False) with running statistics, weight and
    bias that are attributes of the model; else a string saying why not. None for any other node."""
    if node.op != "call_function" or node.target is not F.batch_norm:
        return None
    v = dict(weight=None, bias=None, training=False, momentum=0.1, eps=1e-5)
    v.update(zip(_BN_ARGS, node.args))
    v.update(node.kwargs)
    if v["training"] is not False:
        return "batch_norm with training=True (or a computed flag) normalises with the batch's own statistics"
    if v["running_mean"] is None or v["running_var"] is None:
        return "batch_norm without running statistics: not foldable"
    got = {}
    for key in ("running_mean", "running_var", "weight", "bias"):
        a = v[key]
        t = _attr(gm, a.target) if isinstance(a, torch.fx.Node) and a.op == "get_attr" else None if a is None else a
        if t is not None and not isinstance(t, torch.Tensor):
            return f"batch_norm's {key} is computed in the model, not a parameter or buffer"
        got[key] = t
    if not isinstance(v["eps"], (int, float)):
        return "batch_norm's eps is computed in the model"
    return _Stats(eps=float(v["eps"]), **got)


def _is_identity_in_eval(gm, node):
    m = _module(gm, node)
    if m is None:
        # torchvision.ops.stochastic_depth is an FX leaf function (torch.fx.wrap): identity when not training.
        if node.op == "call_function" and getattr(node.target, "__name__", "") == "stochastic_depth":
            training = node.args[3] if len(node.args) > 3 else node.kwargs.get("training", True)
            return training is False
        return False
    if type(m) in (torch.nn.Identity, torch.nn.Dropout, torch.nn.Dropout2d):
        return not m.training or type(m) is torch.nn.Identity
    name = type(m).__module__ + "." + type(m).__name__
    return name == "torchvision.ops.stochastic_depth.StochasticDepth" and not m.training


def _redirect_ndim_reads(node, to):
    """Points the reads of node's number of dimensions (x.ndim, x.dim(): timm's BatchNormAct2d asserts it) at
    `to`, a value with as many dimensions, so that they do not keep node's chain from being fused."""
    for u in list(node.users):
        if ((u.op == "call_function" and u.target is getattr and len(u.args) == 2 and u.args[1] == "ndim")
                or (u.op == "call_method" and u.target == "dim" and len(u.args) == 1 and not u.kwargs)):
            u.replace_input_with(node, to)


def _single_user(node):
    users = list(node.users)
    return users[0] if len(users) == 1 else None


# ---- the pass ----------------------------------------------------------------------------------------

def _fold(conv, bn):
    """(weight, bias) of conv with bn folded, computed in float32 and cast to the conv's parameter dtype."""
    w = conv.weight.detach()
    dt = w.dtype
    b = conv.bias.detach().float() if conv.bias is not None else None
    rm, rv = bn.running_mean.detach().float(), bn.running_var.detach().float()
    bw = bn.weight.detach().float() if bn.weight is not None else None
    bb = bn.bias.detach().float() if bn.bias is not None else None
    fw, fb = fuse_conv_bn_weights(w.float(), b, rm, rv, bn.eps, bw, bb)
    fmt = torch.channels_last if cnn._is_channels_last(w) else torch.contiguous_format
    return fw.detach().to(dt).contiguous(memory_format=fmt), fb.detach().to(dt)


def _new_conv(conv, weight, bias, activation, algo, memory_format, fused_from):
    w = conv.weight
    m = FusedConv2d(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride, padding=conv.padding,
                    dilation=conv.dilation, groups=conv.groups, bias=bias is not None, padding_mode=conv.padding_mode,
                    device=w.device, dtype=w.dtype, algo=getattr(conv, "algo", algo) if algo == "auto" else algo,
                    activation=activation, fused_from=fused_from)
    with torch.no_grad():
        fmt = torch.channels_last if cnn._is_channels_last(weight) else torch.contiguous_format
        m.weight = torch.nn.Parameter(weight.detach().clone().contiguous(memory_format=fmt))
        if bias is not None:
            m.bias = torch.nn.Parameter(bias.detach().clone())
    m.same_by_input = cnn._timm_conv2d_same(conv) or getattr(conv, "same_by_input", False)
    if memory_format is not None:
        m.to(memory_format=memory_format)
    m.eval()
    return m


def _epilogue_tail(gm, cur, order, chain, fused):
    """What follows cur, the chain's output so far, into the epilogue: an activation, or an add of another
    value computed before it and then maybe an activation. Appends the nodes it takes to chain and their
    names to fused; returns (activation, the add's other operand or None)."""
    user = _single_user(cur)
    if user is None:
        return "none", None
    act = _activation_of(gm, user)
    if act is not None:
        chain.append(user)
        fused.append(act)
        return act, None
    other = _add_other(user, cur)
    if other is None or order[other] >= order[user] or other in chain:
        return "none", None
    chain.append(user)
    fused.append("add")
    nxt = _single_user(user)
    act = _activation_of(gm, nxt) if nxt is not None else None
    if act is not None:
        chain.append(nxt)
        fused.append(act)
    return act or "none", other


def _permute_dims(node):
    """The dims of a permute node (torch.permute(x, dims), x.permute(*dims) or x.permute(dims)), else None."""
    if node.op == "call_function" and node.target is torch.permute:
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dims")
    elif node.op == "call_method" and node.target == "permute":
        dims = node.args[1] if len(node.args) == 2 else node.args[1:]
    else:
        return None
    try:
        return tuple(int(d) for d in dims)
    except (TypeError, ValueError):
        return None


def _is_lastdim_norm(gm, node):
    """A LayerNorm over the last dimension alone (module or F.layer_norm): keeps the channels-last shape."""
    m = _module(gm, node)
    if m is not None:
        return type(m) is torch.nn.LayerNorm and len(m.normalized_shape) == 1
    if node.op == "call_function" and node.target is F.layer_norm:
        shape = node.args[1] if len(node.args) > 1 else node.kwargs.get("normalized_shape")
        return isinstance(shape, (tuple, list)) and len(shape) == 1
    return False


def _channel_scale(gm, node, cur, k, nchw):
    """For node = cur * s (either order) with s a parameter or buffer that scales each of the k channels
    ((k, 1, 1) or (1, k, 1, 1) in the [N, K, H, W] view, (k,) or (1, 1, 1, k) in the [N, H, W, K] one), maybe
    reshaped or viewed to that shape first (timm's ConvNeXt: gamma.reshape(1, -1, 1, 1)): s; else None."""
    if not (_is_binary(node, "mul") and not node.kwargs):
        return None
    a, b = node.args
    other = b if a is cur else a if b is cur else None
    if not isinstance(other, torch.fx.Node) or other is cur:
        return None
    shape = None
    if other.op == "call_method" and other.target in ("reshape", "view") and not other.kwargs:
        shape = other.args[1:] if not (len(other.args) == 2 and isinstance(other.args[1], (tuple, list))) \
            else tuple(other.args[1])
        if not all(isinstance(d, int) for d in shape) or not isinstance(other.args[0], torch.fx.Node):
            return None
        other = other.args[0]
    if other.op != "get_attr":
        return None
    try:
        t = operator.attrgetter(other.target)(gm)
    except AttributeError:
        return None
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return None
    if shape is not None:
        try:
            t = t.reshape(shape)
        except RuntimeError:
            return None
    want = (k, 1, 1) if nchw else (k,)
    got = tuple(t.shape)
    return t if got[len(got) - len(want):] == want and all(d == 1 for d in got[:len(got) - len(want)]) \
        and len(got) <= 4 else None


def _is_binary(node, name):
    """node is `a <name> b` for name "add" or "mul" (operator, torch.<name>, or the Tensor method)."""
    fns = {"add": (operator.add, operator.iadd, torch.add), "mul": (operator.mul, operator.imul, torch.mul)}[name]
    if len(node.args) != 2:
        return False
    return ((node.op == "call_function" and node.target in fns) or
            (node.op == "call_method" and node.target in (name, name + "_")))


def _fuse_linears(gm, algo, memory_format, summary):
    """nn.Linear on a 4-D channels-last activation -> FusedLinear with its epilogue (the module docstring)."""
    g = gm.graph
    nhwc = set()  # nodes whose value is [N, H, W, C]
    for node in g.nodes:
        src = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
        if _permute_dims(node) == (0, 2, 3, 1):
            nhwc.add(node)
        elif src in nhwc and (_is_lastdim_norm(gm, node) or _activation_of(gm, node) is not None or
                              type(_module(gm, node)) is torch.nn.Linear):
            nhwc.add(node)
        elif (_is_binary(node, "add") or _is_binary(node, "mul")) and any(a in nhwc for a in node.args):
            # (an elementwise op with the other operand broadcast; a rank it changes is caught by FusedLinear)
            nhwc.add(node)
    lins = [n for n in g.nodes if type(_module(gm, n)) is torch.nn.Linear and n.args and n.args[0] in nhwc]
    for lin_node in lins:
        order = {n: i for i, n in enumerate(g.nodes)}  # (the nodes this loop inserts too)
        lin = gm.get_submodule(lin_node.target)
        k = lin.out_features
        chain, fused = [lin_node], ["linear"]
        nchw_out, scale = False, None
        cur = lin_node
        user = _single_user(cur)
        if user is not None and _activation_of(gm, user) is None:
            if _permute_dims(user) == (0, 3, 1, 2):
                nchw_out = True
                chain.append(user)
                cur = user
                user = _single_user(cur)
            s = _channel_scale(gm, user, cur, k, nchw_out) if user is not None else None
            if s is not None:
                scale = s
                chain.append(user)
                fused.append("scale")
                cur = user
        activation, residual = _epilogue_tail(gm, cur, order, chain, fused)
        w = lin.weight.detach()
        b = lin.bias.detach() if lin.bias is not None else None
        if scale is not None:
            sc = scale.detach().float().reshape(k)
            b = (b.float() * sc).to(w.dtype) if b is not None else None
            w = (w.float() * sc[:, None]).to(w.dtype)
        name = _free_name(gm, lin_node.target + "_fused")
        new = FusedLinear(lin.in_features, k, nchw_out=nchw_out, bias=b is not None, device=w.device, dtype=w.dtype,
                          algo=algo, activation=activation, fused_from=" + ".join(fused[1:]))
        with torch.no_grad():
            new.weight = torch.nn.Parameter(w.clone().reshape(k, lin.in_features, 1, 1))
            if b is not None:
                new.bias = torch.nn.Parameter(b.clone())
        if memory_format is not None:
            new.to(memory_format=memory_format)
        new.eval()
        gm.add_submodule(name, new)
        last = chain[-1]
        with g.inserting_before(last):
            kwargs = {"residual": residual} if residual is not None else {}
            repl = g.call_module(name, args=(lin_node.args[0],), kwargs=kwargs)
        last.replace_all_uses_with(repl)
        # the scale's get_attr and reshape nodes, once nothing reads them
        dead = [a for n in chain for a in n.args if isinstance(a, torch.fx.Node) and a.op in ("get_attr", "call_method")
                and a not in chain]
        dead += [a.args[0] for a in dead if a.op == "call_method" and isinstance(a.args[0], torch.fx.Node)]
        for n in reversed(chain):
            g.erase_node(n)
        for a in dead:
            if not a.users and (a.op == "get_attr" or a.target in ("reshape", "view")):
                g.erase_node(a)
        summary.entries.append(FuseEntry(name, fused, "a Linear on channels-last activations: a 1x1 convolution"))


def _is_mean_pool_of(gm, node, x):
    """Whether node is the mean of x over H and W, kept as (N, C, 1, 1): nn.AdaptiveAvgPool2d(1) (torch's or
    convkit's), F.adaptive_avg_pool2d(x, 1), x.mean((2, 3), keepdim=True) or torch.mean(x, (2, 3), True)."""
    if not node.args or node.args[0] is not x:
        return False
    m = _module(gm, node)
    if m is not None:
        return isinstance(m, torch.nn.AdaptiveAvgPool2d) and cnn.one_pixel(m.output_size)
    if node.op == "call_function" and node.target is F.adaptive_avg_pool2d:
        return cnn.one_pixel(node.args[1] if len(node.args) > 1 else node.kwargs.get("output_size"))
    if (node.op == "call_method" and node.target == "mean") or (node.op == "call_function" and node.target is torch.mean):
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        return keep is True and isinstance(dims, (tuple, list)) and sorted(dims) in ([2, 3], [-2, -1])
    return False


def _scale_of_excitation(gm, s, x):
    """The node that takes the mean of x over H and W, if s is computed from it through single-input steps
    (modules: the squeeze and excitation convolutions; activations): squeeze-excitation's scale for x. Else
    None."""
    cur = s
    for _ in range(12):
        if not isinstance(cur, torch.fx.Node) or not cur.args:
            return None
        if _is_mean_pool_of(gm, cur, x):
            return cur
        nodes = [a for a in cur.args if isinstance(a, torch.fx.Node)]
        single = len(nodes) == 1 and cur.args[0] is nodes[0]
        if cur.op == "call_module" and single and len(cur.args) == 1 and not cur.kwargs:
            cur = cur.args[0]
        elif cur.op in ("call_function", "call_method") and single and _activation_of(gm, cur) is not None:
            cur = cur.args[0]
        else:
            return None
    return None


def _fuse_channel_scales(gm, summary):
    """Each `x * s` (operator.mul, torch.mul, Tensor.mul) whose s is squeeze-excitation's scale for x runs
    convkit.nn.scale_channels: one channels-last pass where torch's broadcasting mul reads x at a third of the
    copy rate (EfficientNet-B0, docs/perf.md). Any other shape runs torch's mul there, so the function is the
    same for every input. A mean written as a function (F.adaptive_avg_pool2d(x, 1), x.mean((2, 3),
    keepdim=True): timm's blocks) becomes convkit.nn.channel_mean; the module form is swapped after the pass
    (_swap_mean_pools)."""
    g = gm.graph
    for node in list(g.nodes):
        if not ((node.op == "call_function" and node.target in (operator.mul, torch.mul))
                or (node.op == "call_method" and node.target == "mul")) or node.kwargs or len(node.args) != 2:
            continue
        a, b = node.args
        if not (isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node)):
            continue
        for x, sc in ((a, b), (b, a)):
            pool = _scale_of_excitation(gm, sc, x)
            if pool is not None:
                if pool.op != "call_module":
                    with g.inserting_before(pool):
                        if pool.target is F.adaptive_avg_pool2d:
                            dims = (-2, -1)
                        else:  # x.mean(dims, keepdim=True) or torch.mean(x, dims, True)
                            dims = pool.args[1] if len(pool.args) > 1 else pool.kwargs["dim"]
                        mean = g.call_function(cnn.channel_mean, args=(x, tuple(dims)))
                    pool.replace_all_uses_with(mean)
                    g.erase_node(pool)
                    mean.meta["convkit_entry"] = FuseEntry(pool.name, ["avgpool"], "the mean over H and W by "
                                                           "convkit.channel_mean")
                    summary.entries.append(mean.meta["convkit_entry"])
                with g.inserting_before(node):
                    repl = g.call_function(cnn.scale_channels, args=(x, sc))
                node.replace_all_uses_with(repl)
                g.erase_node(node)
                summary.entries.append(FuseEntry(node.name, ["scale"], "squeeze-excitation's x * s: "
                                                 "convkit.scale_channels"))
                break


def _fuse_se_gates(gm, summary):
    """Each squeeze-excitation gate that feeds convkit.nn.scale_channels and is the mean of x over H and W, then a
    1x1 convolution with its activation and another (convkit Conv2d modules, each step read by the next alone),
    becomes one call of convkit.nn.SqueezeExcitationGate on x, which shares the two convolutions' parameters: at
    small batches one kernel (convkit.se_gate) where these were four."""
    g = gm.graph

    def module_step(node):  # a module call on one input, read by the next step alone
        return (isinstance(node, torch.fx.Node) and node.op == "call_module" and len(node.users) == 1
                and not node.kwargs and len(node.args) == 1)

    for node in list(g.nodes):
        if not (node.op == "call_function" and node.target is cnn.scale_channels):
            continue
        x, fc2_node = node.args
        if not module_step(fc2_node):
            continue
        fc1_node = fc2_node.args[0]
        if not module_step(fc1_node):
            continue
        pool = fc1_node.args[0]
        if not (isinstance(pool, torch.fx.Node) and len(pool.users) == 1 and pool.args and pool.args[0] is x):
            continue
        if not (_is_mean_pool_of(gm, pool, x) or (pool.op == "call_function" and pool.target is cnn.channel_mean
                                                 and sorted(d % 4 for d in pool.args[1]) == [2, 3])):
            continue
        fc1, fc2 = _module(gm, fc1_node), _module(gm, fc2_node)
        if not cnn.SqueezeExcitationGate.takes(fc1, fc2):
            continue
        target = _free_name(gm, _join(fc1_node.target.rpartition(".")[0], "se_gate"))
        gm.add_submodule(target, cnn.SqueezeExcitationGate(fc1, fc2))
        with g.inserting_before(pool):
            gate = g.call_module(target, args=(x,))
        fc2_node.replace_all_uses_with(gate)
        for n in (fc2_node, fc1_node, pool):
            g.erase_node(n)
        # a functional mean the scale pass made convkit's: now inside the gate
        summary.entries = [e for e in summary.entries if e is not pool.meta.get("convkit_entry")]
        summary.entries.append(FuseEntry(target, ["segate"], "squeeze-excitation's mean and its two 1x1 "
                                         "convolutions: convkit.se_gate (one kernel) at small batches"))


def _fuse_layer_norms(gm, summary):
    """F.layer_norm over the last dimension alone (what torchvision's and timm's LayerNorm2d trace to: a permute
    to channels-last, the norm, a permute back) -> convkit.nn.layer_norm; the module form is swapped after the
    pass (_swap_layer_norms)."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is F.layer_norm and _is_lastdim_norm(gm, node):
            node.target = cnn.layer_norm
            summary.entries.append(FuseEntry(node.name, ["layernorm"], "F.layer_norm by convkit.layer_norm"))


_CATS = (torch.cat, torch.concat, torch.concatenate)


def _cat_of_convs(gm, node):
    """For torch.cat along the channels (dim=1) of convolutions whose outputs nothing else reads, those
    convolution nodes in order; else None."""
    if node.op != "call_function" or node.target not in _CATS:
        return None
    parts = node.args[0] if node.args else node.kwargs.get("tensors")
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", node.kwargs.get("axis", 0))
    if dim != 1 or not isinstance(parts, (list, tuple)) or not parts:
        return None
    if not all(isinstance(p, torch.fx.Node) and _is_conv(gm, p) and _single_user(p) is node for p in parts):
        return None
    if len(set(parts)) != len(parts):
        return None
    return list(parts)


def _split_over_cats(gm):
    """BatchNorm and an activation after a concatenation of convolutions along the channels (MixNet's
    MixedConv2d: the input's channels split into groups, each group its own convolution and filter size, the
    outputs concatenated, then BatchNorm and the activation) are per-channel and elementwise, so they are
    moved in front of the concatenation, each convolution getting its own slice of the BatchNorm:

        act(bn(cat([conv_1(a), conv_2(b)], 1)))  ->  cat([act(bn_1(conv_1(a))), act(bn_2(conv_2(b)))], 1)

    after which the pass folds them into each convolution as usual. Returns {conv node: (the concatenation's
    name, note)}."""
    g = gm.graph
    notes = {}
    for cat in list(g.nodes):
        parts = _cat_of_convs(gm, cat)
        if parts is None:
            continue
        _redirect_ndim_reads(cat, parts[0])  # (timm's BatchNormAct2d asserts the rank of its input)
        user = _single_user(cat)
        if user is None:
            continue
        stats = _functional_bn(gm, user)
        bn = gm.get_submodule(user.target) if _is_bn(gm, user) else stats if isinstance(stats, _Stats) else None
        if bn is not None and (bn.running_mean is None or bn.running_var is None):
            bn = None
        widths = [gm.get_submodule(p.target).out_channels for p in parts]
        if bn is not None and sum(widths) != bn.running_mean.numel():
            bn = None
        last = user if bn is not None else cat
        act_node = _single_user(last)
        act = _activation_of(gm, act_node) if act_node is not None else None
        if bn is None and act is None:
            continue
        new_parts, offset = [], 0
        with g.inserting_before(cat):
            for p, k in zip(parts, widths):
                out = p
                if bn is not None:
                    rm = bn.running_mean
                    piece = torch.nn.BatchNorm2d(k, eps=bn.eps, device=rm.device, dtype=rm.dtype).eval()
                    with torch.no_grad():
                        piece.running_mean.copy_(rm[offset:offset + k])
                        piece.running_var.copy_(bn.running_var[offset:offset + k])
                        piece.weight.copy_(bn.weight[offset:offset + k] if bn.weight is not None else 1)
                        piece.bias.copy_(bn.bias[offset:offset + k] if bn.bias is not None else 0)
                    name = _free_name(gm, f"{p.target.replace('.', '_')}_bn")
                    gm.add_submodule(name, piece)
                    out = g.call_module(name, args=(out,))
                if act is not None:
                    out = g.node_copy(act_node, lambda n, out=out: out if n is last else n)
                new_parts.append(out)
                offset += k
        if cat.args:
            cat.update_arg(0, new_parts)
        else:
            cat.update_kwarg("tensors", new_parts)
        done = [n for n in (user if bn is not None else None, act_node if act is not None else None) if n]
        done[-1].replace_all_uses_with(cat)
        for n in reversed(done):
            inputs = [a for a in n.all_input_nodes if a is not cat]
            g.erase_node(n)
            for a in inputs:  # a functional batch_norm's statistics, no longer read
                if not a.users and a.op == "get_attr":
                    g.erase_node(a)
        what = " and ".join(w for w in ("BatchNorm" if bn is not None else "", act or "") if w)
        for p in parts:
            notes[p] = (cat.name, f"{what} after torch.cat of {len(parts)} convolutions: split over them")
    return notes


def _fuse_graph(gm: torch.fx.GraphModule, algo, memory_format, linears=False) -> FuseSummary:
    summary = FuseSummary()
    g = gm.graph
    for node in list(g.nodes):  # the identities of eval mode
        if _is_identity_in_eval(gm, node) and node.args and isinstance(node.args[0], torch.fx.Node):
            node.replace_all_uses_with(node.args[0])
            g.erase_node(node)
    split_notes = _split_over_cats(gm)
    order = {n: i for i, n in enumerate(g.nodes)}
    convs = [n for n in g.nodes if _is_conv(gm, n)]
    call_sites = {}
    for n in convs:
        call_sites[n.target] = call_sites.get(n.target, 0) + 1
    done = []
    # Later convolutions first: where both operands of an add are convolution chains, the one that runs last
    # claims it (see the module docstring).
    for conv_node in reversed(convs):
        conv = gm.get_submodule(conv_node.target)
        split_from, split_note = split_notes.get(conv_node, ("", ""))
        chain, fused, notes = [conv_node], ["conv"], [split_note] if split_note else []
        cur = conv_node
        weight, bias = conv.weight, conv.bias
        activation, residual = "none", None
        # a convolution, and BatchNorm after it, keep the number of dimensions of the convolution's input
        _redirect_ndim_reads(conv_node, conv_node.args[0])
        user = _single_user(cur)
        if user is not None and (_is_bn(gm, user) or _functional_bn(gm, user) is not None):
            _redirect_ndim_reads(user, conv_node.args[0])
        stats = _functional_bn(gm, user) if user is not None else None
        if user is not None and _is_bn(gm, user):
            bn = gm.get_submodule(user.target)
            if bn.running_mean is None or bn.running_var is None:
                notes.append(f"{user.target}: BatchNorm2d without running statistics (track_running_stats=False) "
                             "normalises with each batch's own statistics: not foldable")
            else:
                weight, bias = _fold(conv, bn)
                chain.append(user)
                fused.append("bn")
                cur = user
        elif isinstance(stats, str):
            notes.append(f"{user.name}: {stats}")
        elif stats is not None:
            weight, bias = _fold(conv, stats)
            chain.append(user)
            fused.append("bn")
            cur = user
        elif user is None and len(cur.users) > 1:
            notes.append("output used more than once: nothing fused after it")
        user = _single_user(cur)
        scale = _channel_scale(gm, user, cur, conv.out_channels, True) if user is not None else None
        if scale is not None:  # a per-channel scale (timm's ConvNeXt with conv_mlp: layer scale), in float32
            sc = scale.detach().float().reshape(-1)
            dt = weight.dtype
            fmt = torch.channels_last if cnn._is_channels_last(weight) else torch.contiguous_format
            weight = (weight.detach().float() * sc[:, None, None, None]).to(dt).contiguous(memory_format=fmt)
            bias = (bias.detach().float() * sc).to(dt) if bias is not None else None
            chain.append(user)
            fused.append("scale")
            cur = user
            user = _single_user(cur)
        if user is not None:
            activation, residual = _epilogue_tail(gm, cur, order, chain, fused)
        elif len(cur.users) > 1 and cur is not conv_node:
            notes.append("output used more than once: nothing fused after it")
        if len(chain) == 1 and isinstance(conv, cnn.Conv2d):
            summary.entries.append(FuseEntry(conv_node.target, fused, "already a convkit convolution; " +
                                             "; ".join(notes) if notes else "already a convkit convolution"))
            done.append(conv_node)
            continue
        name = _free_name(gm, conv_node.target + "_fused")
        if call_sites[conv_node.target] > 1:
            notes.append(f"its module is called at {call_sites[conv_node.target]} places: each gets its own copy")
        new = _new_conv(conv, weight, bias, activation, algo, memory_format, " + ".join(fused[1:]))
        gm.add_submodule(name, new)
        last = chain[-1]
        with g.inserting_before(last):
            kwargs = {"residual": residual} if residual is not None else {}
            repl = g.call_module(name, args=(conv_node.args[0],), kwargs=kwargs)
        last.replace_all_uses_with(repl)
        for n in reversed(chain):
            inputs = n.all_input_nodes
            g.erase_node(n)
            while inputs:  # a folded batch_norm's statistics or scale (and its reshape): no longer read
                a = inputs.pop()
                if a.users or not (a.op == "get_attr" or (a.op == "call_method" and a.target in ("reshape", "view"))):
                    continue
                inputs += a.all_input_nodes
                g.erase_node(a)
        summary.entries.append(FuseEntry(name, fused, "; ".join(notes), split_from if "bn" in fused else ""))
    summary.entries.reverse()  # graph order
    if linears:
        _fuse_linears(gm, algo, memory_format, summary)
    _fuse_channel_scales(gm, summary)
    _fuse_se_gates(gm, summary)
    _fuse_layer_norms(gm, summary)
    # Everything else that was left, with its reason.
    for node in g.nodes:
        m = _module(gm, node)
        if m is None:
            why = _functional_bn(gm, node)
            if why is not None:
                why = why if isinstance(why, str) else _bn_left_reason(gm, node)
                summary.left.append(FuseEntry(node.name, [], f"batch_norm left: {why}"))
            continue
        if type(m) in (torch.nn.BatchNorm2d, torch.nn.SyncBatchNorm):
            why = "BatchNorm2d without running statistics: not foldable" if m.running_mean is None else \
                _bn_left_reason(gm, node)
            summary.left.append(FuseEntry(node.target, [], f"BatchNorm2d left: {why}"))
        elif isinstance(m, torch.nn.Conv2d) and not isinstance(m, cnn.Conv2d) and not _plain_conv(m):
            summary.left.append(FuseEntry(node.target, [], f"{type(m).__name__}: a Conv2d subclass with a forward "
                                          "of its own, run as it is"))
        elif isinstance(m, (torch.nn.ConvTranspose2d, torch.nn.Conv1d, torch.nn.Conv3d)):
            summary.left.append(FuseEntry(node.target, [], f"{type(m).__name__}: not a 2-D convolution convkit runs"))
    g.lint()
    gm.recompile()
    gm.delete_all_unused_submodules()
    return summary


def _bn_left_reason(gm, node):
    """Why a foldable BatchNorm (module or call) was left: what produces its input."""
    prod = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
    if prod is not None and prod.op == "call_function" and prod.target in _CATS:
        return "after torch.cat of values other than convolutions read only there"
    m = _module(gm, prod) if prod is not None else None
    if not isinstance(m, torch.nn.Conv2d):
        return "not after a convolution"
    if isinstance(m, cnn.Conv2d) and m._activation != "none":
        return (f"after a convolution's {m._activation} (fused into it, or a convkit convolution with that "
                "activation): a BatchNorm after a nonlinearity cannot be folded into the convolution")
    if not isinstance(m, cnn.Conv2d) and not _plain_conv(m):
        return "after a Conv2d subclass with a forward of its own, which runs as it is"
    return "its convolution's output is used elsewhere too"


def _free_name(gm, name):
    """name, or name2, name3, ...: the first that is not a submodule of gm yet."""
    i, out = 1, name
    while _has_submodule(gm, out):
        i += 1
        out = f"{name}{i}"
    return out


def _has_submodule(gm, name):
    try:
        gm.get_submodule(name)
        return True
    except AttributeError:
        return False


class _Tracer(torch.fx.Tracer):
    """torch.fx's tracer with convkit's modules as leaves (a converted model's convolutions stay call_module
    nodes instead of being traced into their forward)."""

    def is_leaf_module(self, m, qualname):
        # every Conv2d subclass too: one that computes nn.Conv2d's function (or timm's Conv2dSame, which pads by
        # the input's size, which symbolic tracing cannot follow) is fused like it; one with a forward of its own
        # runs as it is and no longer keeps the model around it from tracing
        return isinstance(m, torch.nn.Conv2d) or super().is_leaf_module(m, qualname)


def _trace(m):
    graph = _Tracer().trace(m)
    return torch.fx.GraphModule(m, graph, type(m).__name__)


def _fuse_module(m, algo, memory_format, prefix, summary, linears=False):
    """m fused (a GraphModule) where it traces, else m with its children fused in place."""
    if _plain_conv(m) or (isinstance(m, cnn.Conv2d) and m._activation == "none" and not isinstance(m, FusedConv2d)):
        summary.entries.append(FuseEntry(prefix or "(model)", ["conv"], "a lone convolution"))
        return _new_conv(m, m.weight, m.bias, "none", algo, memory_format, "")
    try:
        gm = _trace(m)
    except Exception as e:  # noqa: BLE001  (any tracing failure: fuse inside the children instead)
        if not any(True for _ in m.children()):
            summary.left.append(FuseEntry(prefix or "(model)", [], f"not traceable ({type(e).__name__}: "
                                          f"{str(e).splitlines()[0][:100]}) and has no children"))
            return m
        summary.left.append(FuseEntry(prefix or "(model)", [], f"not traceable as a whole ({type(e).__name__}: "
                                      f"{str(e).splitlines()[0][:100]}): fused inside its children"))
        for name, child in list(m.named_children()):
            setattr(m, name, _fuse_module(child, algo, memory_format, _join(prefix, name), summary, linears))
        return m
    sub = _fuse_graph(gm, algo, memory_format, linears)
    summary.extend(sub, prefix)
    return gm


def fuse(model: torch.nn.Module, algo: str = "auto", memory_format: Optional[torch.memory_format] = None,
         inplace: bool = False, linears: bool = True) -> torch.nn.Module:
    """A copy of the eval-mode `model` with BatchNorm, activations and residual adds folded into convkit
    convolutions (see the module docstring). Its `convkit_summary` attribute says what was fused and what was
    left, with the reason. algo: as convkit.conv2d's, for every fused convolution. memory_format=
    torch.channels_last stores the weights KRSC (what channels_last inputs want). inplace=True works on `model`
    itself instead of a deep copy (its children may then be replaced). linears (on by default) also runs every
    nn.Linear on a 4-D channels-last activation (ConvNeXt's MLP) as a 1x1 convolution with its epilogue
    (FusedLinear); linears=False leaves them to torch (the module docstring).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"convkit.fuse: expected a torch.nn.Module, got {type(model).__name__}.")
    training = [n for n, m in model.named_modules() if m.training and isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if model.training or training:
        where = f" ({training[0] or 'the model'} is in training mode)" if training else ""
        raise RuntimeError("convkit.fuse: the model is in training mode" + where + ". BatchNorm's statistics "
                           "change while training, so folding them would be wrong: call model.eval() first, "
                           "and fuse again after the weights change.")
    m = model if inplace else copy.deepcopy(model)
    summary = FuseSummary()
    out = _fuse_module(m, algo, memory_format, "", summary, linears)
    _swap_max_pools(out, summary)
    _swap_mean_pools(out, summary)
    _swap_layer_norms(out, summary)
    out.convkit_summary = summary
    return out


def _swap_max_pools(model, summary):
    """Every nn.MaxPool2d (not asked for indices) becomes convkit.nn.MaxPool2d: the same function, without the
    int64 indices torch's CUDA kernel writes (ResNet's stem pool: 0.112 ms, 9% of the fused ResNet-50)."""
    for name, mod in list(model.named_modules()):
        if type(mod) is not torch.nn.MaxPool2d or mod.return_indices or not name:
            continue
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, cnn.MaxPool2d.from_torch(mod))
        summary.entries.append(FuseEntry(name, ["maxpool"], "torch's max pool without the indices"))


def _swap_mean_pools(model, summary):
    """Every nn.AdaptiveAvgPool2d to one pixel becomes convkit.nn.AdaptiveAvgPool2d (convkit.channel_mean where
    no gradient is needed): squeeze-excitation's squeeze and a classifier's pool, which torch computes at a
    fraction of the copy rate on channels-last 16-bit tensors (docs/perf.md)."""
    for name, mod in list(model.named_modules()):
        if type(mod) is not torch.nn.AdaptiveAvgPool2d or not cnn.one_pixel(mod.output_size) or not name:
            continue
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, cnn.AdaptiveAvgPool2d.from_torch(mod))
        summary.entries.append(FuseEntry(name, ["avgpool"], "the mean over H and W by convkit.channel_mean"))


def _swap_layer_norms(model, summary):
    """Every nn.LayerNorm over one (the last) dimension becomes convkit.nn.LayerNorm (convkit.layer_norm where no
    gradient is needed): torch's kernel gives each row a block of its own, which on ConvNeXt's 96-768 channels
    runs at a few percent of the copy rate (docs/perf.md)."""
    for name, mod in list(model.named_modules()):
        if type(mod) is not torch.nn.LayerNorm or len(mod.normalized_shape) != 1 or not name:
            continue
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, cnn.LayerNorm.from_torch(mod))
        summary.entries.append(FuseEntry(name, ["layernorm"], "nn.LayerNorm by convkit.layer_norm"))
