"""convkit.fuse: torchvision models and hand-made edge cases, fused against unfused (fp32 rel L2 <= 1e-4), the
counts the architecture implies, torch.compile(fullgraph=True), and the refusal of training mode."""
import copy
import operator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import convkit
from conftest import DEVICES

torchvision = pytest.importorskip("torchvision")


def rel_l2(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def randomise_bn(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.SyncBatchNorm)):
            if m.running_mean is not None:
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            if m.weight is not None:
                m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.2)
    return model


def count(model, cls):
    return sum(isinstance(m, cls) for m in model.modules())


# (name, input size, expected (bn_folded, activations, residuals) or None to only check "all BN folded")
MODELS = [
    ("resnet18", 64, (20, 17, 8)),
    ("resnext50_32x4d", 64, (53, 49, 16)),
    ("mobilenet_v2", 64, (52, 35, 10)),
    ("mobilenet_v3_small", 64, None),
    ("efficientnet_b0", 64, None),
    ("regnet_y_400mf", 64, None),
    ("convnext_tiny", 64, None),
]


@pytest.mark.parametrize("name,size,expect", MODELS, ids=[m[0] for m in MODELS])
def test_torchvision_models(name, size, expect):
    torch.manual_seed(0)
    model = randomise_bn(getattr(torchvision.models, name)(weights=None)).eval()
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        want = model(x)
        fused = convkit.fuse(model)
        got = fused(x)
    s = fused.convkit_summary
    assert rel_l2(got, want) <= 1e-4, str(s)
    n_conv = count(model, nn.Conv2d)
    assert s.convs == n_conv, str(s)
    # No BatchNorm2d that follows a convolution is left (ConvNeXt has none at all).
    assert count(fused, nn.BatchNorm2d) == 0, str(s)
    assert s.bn_folded == count(model, nn.BatchNorm2d)
    if expect is not None:
        assert (s.bn_folded, s.activations, s.residuals) == expect, str(s)
    assert count(fused, convkit.FusedConv2d) - count(fused, convkit.FusedLinear) == n_conv
    assert "convkit.fuse:" in str(s)
    # The original is untouched.
    assert count(model, nn.BatchNorm2d) > 0 or name == "convnext_tiny"


def test_convnext_mlp_runs_as_1x1_convolutions():
    # Each CNBlock: depthwise 7x7 -> permute -> LayerNorm -> Linear -> GELU -> Linear -> permute ->
    # layer_scale * . -> + input. Both Linears become 1x1 convolutions; GELU, the layer scale and the residual
    # go to their epilogues. The classifier's Linear (on a flattened 2-D tensor) stays.
    torch.manual_seed(0)
    model = torchvision.models.convnext_tiny(weights=None).eval()
    for m in model.modules():
        if hasattr(m, "layer_scale"):
            m.layer_scale.data.uniform_(0.5, 1.5)  # (1e-6 at init would hide a wrong fold)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want = model(x)
        fused = convkit.fuse(model, linears=True)
        got = fused(x)
    s = fused.convkit_summary
    n_blocks = sum(type(m).__name__ == "CNBlock" for m in model.modules())
    assert n_blocks == 18
    assert (s.convs, s.linears, s.activations, s.residuals) == (22, 2 * n_blocks, n_blocks, n_blocks), str(s)
    assert [e.fused for e in s.entries if e.fused[0] == "linear"][:2] == [["linear", "gelu"],
                                                                          ["linear", "scale", "add"]]
    assert count(fused, nn.Linear) == 1 and count(fused, convkit.FusedLinear) == 2 * n_blocks
    assert rel_l2(got, want) <= 1e-4, str(s)
    assert "Linear layers as 1x1 convolutions" in str(s)
    assert convkit.fuse(model).convkit_summary.linears == 2 * n_blocks  # (the default)
    left = convkit.fuse(model, linears=False)
    assert left.convkit_summary.linears == 0 and count(left, nn.Linear) == 2 * n_blocks + 1


class ChannelsLastMlp(nn.Module):
    """Linears on [N, H, W, C] in the other forms: F.layer_norm, a (K,) scale before the permute, a residual
    added in the [N, H, W, K] view, an activation after the permute back, no bias, a buffer as the scale."""

    def __init__(self, c=6):
        super().__init__()
        self.a = nn.Linear(c, 3 * c, bias=False)
        self.b = nn.Linear(3 * c, c)
        self.c = nn.Linear(c, c)
        self.d = nn.Linear(c, 2 * c)
        self.w = nn.Parameter(torch.rand(c) + 0.5)
        self.register_buffer("s", torch.rand(c) + 0.5)

    def forward(self, x):
        y = x.permute(0, 2, 3, 1)
        z = F.layer_norm(y, (y.shape[-1],), self.w)
        z = F.silu(self.a(z))
        z = self.s * self.b(z) + y            # (K,) scale and a residual in the [N, H, W, K] view
        z = torch.permute(self.c(z), (0, 3, 1, 2))
        z = torch.relu(z)                      # an activation after the permute back
        return self.d(z.permute(0, 2, 3, 1))


@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_linears_on_channels_last_activations(fmt):
    torch.manual_seed(0)
    x = torch.randn(2, 6, 5, 7).contiguous(memory_format=fmt)
    s = fuse_and_check(ChannelsLastMlp(), x, linears=True)
    assert s.linears == 4, str(s)
    assert [e.fused for e in s.entries if e.fused[0] == "linear"] == [
        ["linear", "silu"], ["linear", "scale", "add"], ["linear", "relu"], ["linear"]], str(s)
    assert s.layer_norms == 1, str(s)  # the F.layer_norm on [N, H, W, C]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,convkit_f32", [(torch.float32, False), (torch.float32, True), (torch.bfloat16, True)])
def test_fused_linears_every_device_and_dtype(device, dtype, convkit_f32, monkeypatch):
    # convkit_f32: convkit's 1x1 convolution also where torch's Linear is the rule (CUDA float32, the CPU)
    monkeypatch.setattr(convkit.FusedLinear, "torch_for_cuda_f32", not convkit_f32)
    monkeypatch.setattr(convkit.FusedLinear, "torch_on_cpu", not convkit_f32)
    torch.manual_seed(0)
    m = ChannelsLastMlp(c=16).eval().to(device=device, dtype=dtype)
    x = torch.randn(2, 16, 9, 7, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        want = copy.deepcopy(m).double()(x.double())
        got = convkit.fuse(m, linears=True)(x)
    assert rel_l2(got, want) <= (1e-4 if dtype == torch.float32 else 3e-2)


def test_a_linear_on_a_2d_tensor_or_another_permute_is_left():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 5), nn.Linear(5, 3)

        def forward(self, x):
            return self.b(self.a(x.permute(0, 3, 2, 1)).flatten(1, 2))

    s = fuse_and_check(M(), torch.randn(2, 4, 3, 5), linears=True)
    assert s.linears == 0


def test_a_broadcast_that_changes_the_rank_runs_the_linear_as_it_was():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 3)

        def forward(self, x, t):
            return self.a(x.permute(0, 2, 3, 1) + t)  # t is 5-D: the Linear sees [2, N, H, W, C]

    s = fuse_and_check(M(), torch.randn(2, 4, 3, 5), torch.randn(2, 1, 1, 1, 1), linears=True)
    assert s.linears == 1


def test_compile_fullgraph_with_fused_linears():
    torch.manual_seed(0)
    m = ChannelsLastMlp().eval()
    x = torch.randn(2, 6, 5, 7)
    fused = convkit.fuse(m, linears=True)
    with torch.no_grad():
        want = m(x)
        got = torch.compile(fused, fullgraph=True)(x)
    assert rel_l2(got, want) <= 1e-4


def test_efficientnet_reaches_its_residual_adds():
    model = randomise_bn(torchvision.models.efficientnet_b0(weights=None)).eval()
    s = convkit.fuse(model).convkit_summary
    # 16 MBConv blocks, 9 of them with a residual (stochastic depth is the identity in eval mode).
    assert s.residuals == 9, str(s)
    assert s.activations >= 16, str(s)  # the stem, the head, each expand and depthwise (SiLU)


@pytest.mark.parametrize("name,gate", [("efficientnet_b0", "sigmoid"), ("mobilenet_v3_small", "hardsigmoid"),
                                       ("regnet_y_400mf", "sigmoid")])
def test_squeeze_excitation_gates_are_fused(name, gate):
    # Each squeeze-excitation block's second 1x1 convolution takes its gate (torchvision's
    # SqueezeExcitation: fc2 then sigmoid or hardsigmoid) into the epilogue.
    model = randomise_bn(getattr(torchvision.models, name)(weights=None)).eval()
    n_se = sum(type(m).__name__ == "SqueezeExcitation" for m in model.modules())
    assert n_se > 0
    s = fuse_and_check(model, torch.randn(2, 3, 64, 64))
    gates = [e for e in s.entries if e.fused and e.fused[-1] == gate]
    assert len(gates) == n_se, str(s)


def test_compile_fullgraph_matches():
    torch.manual_seed(0)
    model = randomise_bn(torchvision.models.resnet18(weights=None)).eval()
    x = torch.randn(2, 3, 48, 48)
    fused = convkit.fuse(model)
    with torch.no_grad():
        want = model(x)
        got = torch.compile(fused, fullgraph=True)(x)
    assert rel_l2(got, want) <= 1e-4


def test_training_mode_is_refused():
    model = torchvision.models.resnet18(weights=None)
    with pytest.raises(RuntimeError, match="training mode"):
        convkit.fuse(model)
    model.eval()
    model.layer1[0].bn1.train()
    with pytest.raises(RuntimeError, match="layer1.0.bn1"):
        convkit.fuse(model)


def test_weights_are_copies():
    model = randomise_bn(torchvision.models.resnet18(weights=None)).eval()
    fused = convkit.fuse(model)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        before = fused(x)
        model.conv1.weight.mul_(2)
        after = fused(x)
    assert torch.equal(before, after)


class Block(nn.Module):
    def __init__(self, affine=True, track=True, bias=False, inplace=False):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(4, affine=affine, track_running_stats=track)
        self.relu = nn.ReLU(inplace=inplace)

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)) + x)


def fuse_and_check(m, *inputs, bound=1e-4, **kwargs):
    m = randomise_bn(m).eval()
    with torch.no_grad():
        want = m(*inputs)
        fused = convkit.fuse(m, **kwargs)
        got = fused(*inputs)
    assert rel_l2(got, want) <= bound, str(fused.convkit_summary)
    return fused.convkit_summary


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("inplace", [True, False])
def test_conv_bn_add_relu(affine, bias, inplace):
    s = fuse_and_check(Block(affine=affine, bias=bias, inplace=inplace), torch.randn(2, 4, 9, 7))
    assert s.entries[0].fused == ["conv", "bn", "add", "relu"], str(s)


def test_bn_without_running_stats_is_left_with_the_reason():
    m = Block(track=False).eval()
    x = torch.randn(2, 4, 6, 6)
    with torch.no_grad():
        want = m(x)
        fused = convkit.fuse(m)
        got = fused(x)
    assert rel_l2(got, want) <= 1e-4
    s = fused.convkit_summary
    assert s.bn_folded == 0 and count(fused, nn.BatchNorm2d) == 1
    assert "track_running_stats=False" in str(s)


class BatchNormAct(nn.BatchNorm2d):
    """A BatchNorm2d subclass in the manner of timm's BatchNormAct2d: it asserts the input's rank, calls
    F.batch_norm itself (so tracing goes into it) and applies dropout and an activation of its own."""

    def __init__(self, c, act=True):
        super().__init__(c)
        self.drop = nn.Identity()
        self.act = nn.SiLU() if act else nn.Identity()

    def forward(self, x):
        torch._assert(x.ndim == 4, "expected 4D input")
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        x = F.batch_norm(x, self.running_mean if not self.training else None,
                         self.running_var if not self.training else None, self.weight, self.bias, bn_training,
                         0.1, self.eps)
        return self.act(self.drop(x))


class ConvBnActBlock(nn.Module):
    """timm's pattern: conv -> BatchNormAct (SiLU) -> conv -> BatchNormAct (no act) -> + x."""

    def __init__(self, c=8):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = BatchNormAct(c)
        self.conv2 = nn.Conv2d(c, c, 1, bias=False)
        self.bn2 = BatchNormAct(c, act=False)

    def forward(self, x):
        return self.bn2(self.conv2(self.bn1(self.conv1(x)))) + x


def test_batchnorm_subclasses_and_functional_batch_norm_are_folded():
    s = fuse_and_check(ConvBnActBlock(), torch.randn(2, 8, 7, 9))
    assert [e.fused for e in s.entries] == [["conv", "bn", "silu"], ["conv", "bn", "add"]], str(s)
    assert s.bn_folded == 2 and not s.left, str(s)


def test_sync_batchnorm_is_folded():
    # a model converted for distributed training (nn.SyncBatchNorm) is an ordinary one in eval mode
    m = nn.SyncBatchNorm.convert_sync_batchnorm(torchvision.models.resnet18(weights=None))
    s = fuse_and_check(m, torch.randn(2, 3, 64, 64))
    assert (s.bn_folded, s.activations, s.residuals) == (20, 17, 8), str(s)


class ConvScaleAdd(nn.Module):
    """conv -> a layer scale reshaped in the model (timm's ConvNeXt) -> + x, and the same with a (K, 1, 1) buffer."""

    def __init__(self, c=8):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 1)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.gamma = nn.Parameter(torch.rand(c) + 0.5)
        self.register_buffer("scale", torch.rand(c, 1, 1) + 0.5)

    def forward(self, x):
        y = self.conv(x).mul(self.gamma.reshape(1, -1, 1, 1)) + x
        return F.relu(self.scale * self.conv2(y) + y)


def test_a_per_channel_scale_after_a_conv_is_folded():
    s = fuse_and_check(ConvScaleAdd(), torch.randn(2, 8, 5, 7))
    assert [e.fused for e in s.entries] == [["conv", "scale", "add"], ["conv", "scale", "add", "relu"]], str(s)


class PlainSubclass(nn.Conv2d):
    """A Conv2d subclass that only changes the initialisation: it computes nn.Conv2d's function."""

    def reset_parameters(self):
        nn.init.normal_(self.weight, std=0.1)
        if self.bias is not None:
            nn.init.zeros_(self.bias)


class PaddedByInput(nn.Conv2d):
    """A Conv2d subclass with a forward of its own that reads the input's size (timm's Conv2dSame): symbolic
    tracing cannot go into it."""

    def forward(self, x):
        pad = (x.shape[-1] + 1) % 2
        return super().forward(F.pad(x, (0, int(pad), 0, int(pad))))


class Subclasses(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = PlainSubclass(3, 8, 3, padding=1, bias=False)
        self.bn_a = nn.BatchNorm2d(8)
        self.b = PaddedByInput(8, 8, 3, stride=2)
        self.bn_b = nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.bn_b(self.b(F.relu(self.bn_a(self.a(x))))))


def test_conv2d_subclasses():
    # one that computes nn.Conv2d's function is fused like it; one with a forward of its own runs as it is and
    # no longer keeps the model around it from tracing whole
    s = fuse_and_check(Subclasses(), torch.randn(2, 3, 9, 9))
    assert [e.fused for e in s.entries] == [["conv", "bn", "relu"]], str(s)
    text = str(s)
    assert "PaddedByInput: a Conv2d subclass with a forward of its own" in text
    assert "BatchNorm2d left: after a Conv2d subclass with a forward of its own, which runs as it is" in text
    assert "not traceable" not in text


def test_a_batchnorm_left_after_a_convolution_says_why():
    class AfterActivationOrReadTwice(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.bn_a = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)  # after the ReLU
            self.b, self.bn_b = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)  # b's output read twice

        def forward(self, x):
            y = self.b(self.bn_a(F.relu(self.a(x))))
            return self.bn_b(y) * y

    s = fuse_and_check(AfterActivationOrReadTwice(), torch.randn(2, 3, 6, 6))
    assert [e.fused for e in s.entries] == [["conv", "relu"], ["conv"]], str(s)
    text = str(s)
    assert "BatchNorm2d left: after a convolution's relu (fused into it" in text
    assert "BatchNorm2d left: its convolution's output is used elsewhere too" in text


class FunctionalBn(nn.Module):
    """F.batch_norm after a convolution in the forms that cannot be folded, and one not after a convolution."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 1)
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("var", torch.ones(4))

    def forward(self, x):
        y = F.batch_norm(self.conv(x), None, None, training=True)  # batch statistics
        y = F.batch_norm(self.conv2(y), y.mean((0, 2, 3)), self.var)  # a mean computed from the input
        return F.batch_norm(y + 1, self.mean, self.var)  # not after a convolution


def test_functional_batch_norm_that_cannot_be_folded_is_left_with_the_reason():
    s = fuse_and_check(FunctionalBn(), torch.randn(2, 3, 6, 6))
    assert s.bn_folded == 0, str(s)
    text = str(s)
    assert "training=True" in text and "computed in the model" in text and "not after a convolution" in text


@pytest.mark.parametrize("name,expect", [("efficientnet_b0", (49, 65, 9)), ("mobilenetv3_large_100", (46, 48, 10)),
                                         ("regnety_008", (47, 71, 14)), ("resnet50d", (55, 51, 16)),
                                         ("convnext_tiny", (0, 18, 18)), ("convnext_nano", (0, 14, 14)),
                                         ("tf_efficientnet_b0", (49, 65, 9)), ("mixnet_s", (49, 94, 1))])
def test_timm_models(name, expect):
    # timm's models build their BatchNorms from BatchNormAct2d (a BatchNorm2d subclass that tracing goes into)
    timm = pytest.importorskip("timm")
    m = timm.create_model(name, pretrained=False)
    s = fuse_and_check(m, torch.randn(2, 3, 64, 64))
    assert (s.bn_folded, s.activations, s.residuals) == expect, str(s)
    assert not s.left, str(s)  # tf_efficientnet_b0's five Conv2dSame (stride 2) fused too


def timm_same_block(k, stride, dilation, groups, act=True):
    """timm's Conv2dSame (TensorFlow's 'SAME' padding by the input's size) -> BatchNorm2d -> SiLU."""
    timm_same = pytest.importorskip("timm.layers.conv2d_same")
    conv = timm_same.Conv2dSame(6, 6, k, stride=stride, dilation=dilation, groups=groups, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(6), nn.SiLU() if act else nn.Identity())


@pytest.mark.parametrize("k,stride,dilation,groups", [(3, 2, 1, 1), (5, 2, 1, 6), (4, 3, 2, 1), (1, 2, 1, 1),
                                                      (3, 1, 2, 6)])
def test_timm_conv2d_same_is_fused_at_every_input_size(k, stride, dilation, groups):
    # The padding depends on the input's size (odd totals put the extra row and column at the bottom and right):
    # one fused model called on sizes of every parity against the unfused one, a 1-pixel image among them.
    m = randomise_bn(timm_same_block(k, stride, dilation, groups)).eval()
    fused = convkit.fuse(m)
    s = fused.convkit_summary
    assert (s.bn_folded, s.activations, s.left) == (1, 1, []), str(s)
    assert [c.same_by_input for c in fused.modules() if isinstance(c, convkit.nn.Conv2d)] == [True]
    for h, w in [(7, 9), (8, 10), (1, 1), (5, 2)]:
        x = torch.randn(2, 6, h, w)
        with torch.no_grad():
            want, got = m(x), fused(x)
        assert got.shape == want.shape and rel_l2(got, want) <= 1e-5, (h, w)
    with torch.no_grad():  # channels_last, and torch.compile (the padding decided while tracing)
        x = torch.randn(2, 6, 11, 6).contiguous(memory_format=torch.channels_last)
        assert rel_l2(fused(x), m(x)) <= 1e-5
        assert rel_l2(torch.compile(fused, fullgraph=True)(x), m(x)) <= 1e-5


def test_timm_conv2d_same_takes_a_residual():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = timm_same_block(3, 2, 1, 1, act=False)

        def forward(self, x, r):
            return F.relu(self.a(x) + r)

    m, x, r = M(), torch.randn(2, 6, 9, 8), torch.randn(2, 6, 5, 4)  # ceil(9 / 2) x ceil(8 / 2)
    s = fuse_and_check(m, x, r)
    assert s.entries[0].fused == ["conv", "bn", "add", "relu"], str(s)
    with torch.no_grad():  # under torch.compile the residual's fit is decided while tracing
        assert rel_l2(torch.compile(convkit.fuse(m), fullgraph=True)(x, r), m(x, r)) <= 1e-5


class MixedConv(nn.Module):
    """MixNet's MixedConv2d: the channels split into groups, each its own convolution and filter size, the outputs
    concatenated; then a BatchNorm (a module, or the functional form of BatchNormAct) and an activation."""

    def __init__(self, functional=False, act=True, affine=True, extra=None):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(2, 3, 3, padding=1, bias=False), nn.Conv2d(4, 5, 5, padding=2)])
        self.bn = BatchNormAct(8, act=act) if functional else nn.BatchNorm2d(8, affine=affine)
        self.act = nn.ReLU(inplace=True) if act and not functional else nn.Identity()
        self.extra = extra  # "relu": one branch activated before the concatenation; "twice": one read again

    def forward(self, x):
        p = torch.split(x, [2, 4], 1)
        parts = [self.convs[0](p[0]), self.convs[1](p[1])]
        if self.extra == "relu":
            parts[1] = F.relu(parts[1])
        y = self.act(self.bn(torch.cat(parts, 1)))
        return y * parts[0].mean() if self.extra == "twice" else y


@pytest.mark.parametrize("functional,act,affine", [(False, True, True), (False, False, False), (True, True, True),
                                                   (True, False, True)])
def test_batchnorm_and_activation_after_a_concatenation_of_convolutions_are_split_over_them(functional, act, affine):
    s = fuse_and_check(MixedConv(functional, act, affine), torch.randn(2, 6, 9, 7))
    tail = (["silu"] if functional else ["relu"]) if act else []
    assert [e.fused for e in s.entries] == [["conv", "bn"] + tail] * 2, str(s)
    assert s.bn_folded == 1 and s.activations == (2 if act else 0) and not s.left, str(s)
    assert "after torch.cat of 2 convolutions: split over them" in str(s)


@pytest.mark.parametrize("extra", ["relu", "twice"])
def test_a_concatenation_with_more_than_convolutions_keeps_its_batchnorm(extra):
    s = fuse_and_check(MixedConv(extra=extra), torch.randn(2, 6, 9, 7))
    assert s.bn_folded == 0 and s.activations == (extra == "relu"), str(s)
    assert "BatchNorm2d left: after torch.cat of values other than convolutions read only there" in str(s)


def test_an_activation_after_a_concatenation_of_convolutions_is_split_over_them():
    class CatAct(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 4, 1), nn.Conv2d(3, 2, 3, padding=1)
            self.c, self.d = nn.Conv2d(3, 6, 1), nn.Conv2d(3, 6, 1)

        def forward(self, x):
            return F.silu(torch.cat((self.a(x), self.b(x)), dim=1)) + F.silu(torch.cat([self.c(x), self.d(x)], 0))[:2]

    s = fuse_and_check(CatAct(), torch.randn(2, 3, 5, 5))
    # the first concatenation's SiLU goes to its two convolutions; the second is along the batch: left
    assert [e.fused for e in s.entries] == [["conv", "silu"]] * 2 + [["conv"]] * 2, str(s)


class UsedTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return F.relu(y + x) * y


def test_conv_output_used_twice_is_not_a_residual():
    s = fuse_and_check(UsedTwice(), torch.randn(1, 3, 8, 8))
    assert s.residuals == 0 and s.activations == 0
    assert "more than once" in str(s)


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(3)
        self.bn2 = nn.BatchNorm2d(3)

    def forward(self, x):
        return F.relu(self.bn1(self.conv(x))) + torch.relu(self.bn2(self.conv(x)))


def test_a_shared_conv_gets_one_copy_per_call_site():
    s = fuse_and_check(Shared(), torch.randn(2, 3, 5, 5))
    assert s.convs == 2 and s.bn_folded == 2
    assert "2 places" in str(s)


class Forms(nn.Module):
    """Functional, method and in-place forms of the activations and the add."""

    def __init__(self):
        super().__init__()
        self.c = nn.ModuleList(nn.Conv2d(4, 4, 3, padding=1) for _ in range(10))
        self.b = nn.ModuleList(nn.BatchNorm2d(4) for _ in range(10))

    def forward(self, x):
        y = F.relu6(self.b[0](self.c[0](x)))
        y = F.silu(torch.add(self.b[1](self.c[1](y)), y))
        y = F.gelu(self.b[2](self.c[2](y)))
        z = self.b[3](self.c[3](y))
        z += y
        y = F.hardswish(z)
        y = self.b[4](self.c[4](y)).relu_()
        y = F.hardtanh(operator.add(y, self.b[5](self.c[5](y))), 0.0, 6.0)
        y = F.relu(self.b[6](self.c[6](y)), inplace=True)
        y = torch.sigmoid(self.b[7](self.c[7](y)))
        y = self.b[8](self.c[8](y)).sigmoid()
        return F.hardsigmoid(self.b[9](self.c[9](y)))


def test_every_form():
    s = fuse_and_check(Forms(), torch.randn(2, 4, 6, 6))
    acts = [e.fused[-1] for e in s.entries]
    assert acts == ["relu6", "silu", "gelu", "hardswish", "relu", "relu6", "relu", "sigmoid", "sigmoid",
                    "hardsigmoid"], str(s)
    assert s.residuals == 3, str(s)


class OtherDtypeResidual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x, r):
        return torch.relu(self.conv(x) + r)


@pytest.mark.parametrize("kind", ["dtype", "memory_format", "broadcast"])
def test_a_residual_that_does_not_fit_is_added_by_torch(kind):
    x = torch.randn(2, 3, 5, 5)
    r = {"dtype": torch.randn(2, 3, 5, 5, dtype=torch.float64),
         "memory_format": torch.randn(2, 3, 5, 5).contiguous(memory_format=torch.channels_last),
         "broadcast": torch.randn(1, 3, 1, 5)}[kind]
    m = OtherDtypeResidual().eval()
    with torch.no_grad():
        want = m(x, r)
        got = convkit.fuse(m)(x, r)
    assert got.dtype == want.dtype and rel_l2(got, want) <= 1e-6


def test_not_traceable_model_is_fused_inside_its_children():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
            self.b = nn.Sequential(nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4))

        def forward(self, x):
            y = self.a(x)
            if y.sum() > 0:  # data-dependent control flow: not symbolically traceable
                y = self.b(y)
            return y

    x = torch.randn(1, 3, 6, 6)
    with torch.no_grad():
        x = x.abs()
    s = fuse_and_check(Branchy(), x)
    assert s.bn_folded == 2 and s.activations == 1
    assert "not traceable as a whole" in str(s)


def test_conv_transpose_and_linear_are_left():
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ConvTranspose2d(4, 2, 2), nn.Flatten(), nn.LazyLinear(3))
    x = torch.randn(1, 3, 6, 6)
    m(x)
    s = fuse_and_check(m, x)
    assert s.convs == 1 and s.bn_folded == 1
    assert "ConvTranspose2d" in str(s)


def test_nn_fuse_is_the_same():
    m = randomise_bn(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU6())).eval()
    x = torch.randn(1, 3, 6, 6)
    with torch.no_grad():
        assert torch.equal(convkit.nn.fuse(m)(x), convkit.fuse(m)(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_resnet_block_every_device_and_dtype(device, dtype):
    if device == "cpu" and dtype == torch.bfloat16:
        pytest.skip("convkit's CPU kernels compute f32 only")
    model = randomise_bn(torchvision.models.resnet18(weights=None)).eval().to(device=device, dtype=dtype)
    fmt = torch.channels_last if dtype == torch.bfloat16 else torch.contiguous_format
    model = model.to(memory_format=fmt)
    x = torch.randn(2, 3, 64, 64, device=device, dtype=dtype).contiguous(memory_format=fmt)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(x.double())
        got = convkit.fuse(model, memory_format=fmt)(x)
    assert rel_l2(got, want) <= (1e-4 if dtype == torch.float32 else 3e-2)


def test_fuse_after_convert():
    """A model already converted by convkit.nn.convert fuses the same way (its convolutions are leaves)."""
    torch.manual_seed(0)
    model = randomise_bn(torchvision.models.resnet18(weights=None)).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        want = model(x)
        fused = convkit.fuse(convkit.nn.convert(copy.deepcopy(model)))
        got = fused(x)
    s = fused.convkit_summary
    assert (s.convs, s.bn_folded, s.activations, s.residuals) == (20, 20, 17, 8), str(s)
    assert rel_l2(got, want) <= 1e-4
