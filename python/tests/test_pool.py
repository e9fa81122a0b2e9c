"""convkit.max_pool2d / torch.ops.convkit.max_pool2d / convkit.nn.MaxPool2d: the values of F.max_pool2d, bit for
bit (a max is exact), on every window shape, padding, dilation and ceil_mode; NaN and -inf as torch treats
them; torch's kernel (and its errors) for what the CUDA kernel does not take (NCHW, channels off the 16-byte
vector, 3-D input, a gradient); convkit.fuse swaps nn.MaxPool2d; torch.compile(fullgraph=True) through it.
Squeeze-excitation's channel_mean and scale_channels likewise (the mean within its rounding, the product bit
for bit), and convkit.fuse's pattern for them."""
import pytest
import torch
import torch.nn.functional as F

import convkit

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
CASES = [  # (N, C, H, W, kernel, stride, padding, dilation, ceil_mode)
    (2, 64, 112, 112, 3, 2, 1, 1, False),   # ResNet's stem pool
    (1, 16, 13, 15, 3, 2, 1, 1, True),
    (3, 8, 9, 9, 2, 2, 0, 1, False),
    (1, 32, 10, 7, 2, 2, 0, 1, True),
    (2, 24, 17, 11, (3, 2), (1, 2), (1, 0), 1, False),
    (1, 40, 12, 12, 3, 1, 1, 2, False),
    (1, 8, 5, 5, 5, 3, 2, 1, True),
    (1, 64, 1, 1, 1, 1, 0, 1, False),
    (0, 16, 8, 8, 3, 2, 1, 1, False),
]


def _cl(x):
    return x.contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_equals_torch_bit_for_bit(device, dtype):
    g = torch.Generator().manual_seed(0)
    for n, c, h, w, k, s, p, d, ceil in CASES:
        x = _cl(torch.randn(n, c, h, w, generator=g).to(device=device, dtype=dtype))
        got = convkit.max_pool2d(x, k, s, p, d, ceil)
        want = F.max_pool2d(x, k, s, p, d, ceil)
        where = (n, c, h, w, k, s, p, d, ceil, dtype)
        assert got.shape == want.shape and got.dtype == want.dtype, where
        assert torch.equal(got, want), where
        if n:
            assert got.is_contiguous(memory_format=torch.channels_last), where


@pytest.mark.parametrize("device", DEVICES)
def test_nan_and_minus_inf_as_torch(device):
    x = torch.randn(2, 16, 9, 9)
    x[0, 3, 4, 4] = float("nan")
    x[1, 5] = float("-inf")
    x[1, 7, 0, 0] = float("nan")
    x = _cl(x.to(device=device, dtype=torch.bfloat16))
    got, want = convkit.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 3, 2, 1)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0))


@pytest.mark.parametrize("device", DEVICES)
def test_what_the_kernel_does_not_take_runs_torchs(device):
    g = torch.Generator().manual_seed(1)
    for x in (torch.randn(2, 16, 9, 9, generator=g),                  # NCHW
              _cl(torch.randn(2, 3, 9, 9, generator=g)),              # 6-byte pixels
              torch.randn(16, 9, 9, generator=g),                     # unbatched
              _cl(torch.randn(2, 17, 9, 9, generator=g))[:, 1:]):     # a view off the 16-byte vector
        x = x.to(device=device, dtype=torch.float16)
        assert torch.equal(convkit.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 3, 2, 1))
    with pytest.raises(RuntimeError, match="pad should be"):  # torch's own error for a bad request
        convkit.max_pool2d(_cl(torch.randn(1, 8, 9, 9, device=device)), 3, 2, 2)


@pytest.mark.parametrize("device", DEVICES)
def test_module_keeps_torchs_gradient_and_indices(device):
    pool = convkit.nn.MaxPool2d.from_torch(torch.nn.MaxPool2d(3, 2, 1))
    x = _cl(torch.randn(2, 8, 9, 9, device=device)).requires_grad_()
    pool(x).sum().backward()  # torch's kernel: a gradient exists
    ref = x.detach().clone().requires_grad_()
    F.max_pool2d(ref, 3, 2, 1).sum().backward()
    assert torch.equal(x.grad, ref.grad)
    with_indices = convkit.nn.MaxPool2d.from_torch(torch.nn.MaxPool2d(2, return_indices=True))
    y, i = with_indices(x.detach())
    assert i.dtype == torch.int64


def test_fuse_swaps_max_pools_and_compiles():
    torchvision = pytest.importorskip("torchvision")
    m = torchvision.models.resnet18().eval()
    fused = convkit.fuse(m)
    assert fused.convkit_summary.pools == 1
    assert type(fused.maxpool) is convkit.nn.MaxPool2d
    assert "1 max pools without indices" in str(fused.convkit_summary)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        want = m(x)
        assert torch.allclose(fused(x), want, rtol=1e-4, atol=1e-4)
        compiled = torch.compile(fused, fullgraph=True)
        assert torch.allclose(compiled(x), want, rtol=1e-4, atol=1e-4)
    # a pool asked for indices, and a model that is only a pool, are left alone
    lone = convkit.fuse(torch.nn.MaxPool2d(2).eval())
    assert type(lone) is torch.nn.MaxPool2d or lone.convkit_summary.pools == 0
    keep = convkit.fuse(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.MaxPool2d(2, return_indices=True)).eval())
    assert keep.convkit_summary.pools == 0


# ---- squeeze-excitation: channel_mean (F.adaptive_avg_pool2d(x, 1)) and scale_channels (x * s) ----------------

SE_CASES = [(2, 32, 112, 112), (3, 144, 14, 14), (1, 1152, 7, 7), (2, 8, 1, 3), (5, 2056, 3, 2), (0, 16, 4, 4)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_channel_mean_matches_torch(device, dtype):
    g = torch.Generator().manual_seed(2)
    for n, c, h, w in SE_CASES:
        x = _cl(torch.randn(n, c, h, w, generator=g).to(device=device, dtype=dtype))
        got, want = convkit.channel_mean(x), F.adaptive_avg_pool2d(x, 1)
        assert got.shape == want.shape == (n, c, 1, 1) and got.dtype == dtype, (n, c, h, w)
        exact = x.double().mean((2, 3), keepdim=True)
        # one rounding of the result (16-bit: half an ulp, 2^-9 of bf16 relative) plus float summation
        tol = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
        assert torch.allclose(got.double(), exact, rtol=tol, atol=tol), (n, c, h, w, dtype)
        assert torch.allclose(got.double(), want.double(), rtol=2 * tol, atol=2 * tol), (n, c, h, w, dtype)
        assert torch.equal(convkit.channel_mean(x), got), "not deterministic"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_scale_channels_equals_torch_bit_for_bit(device, dtype):
    g = torch.Generator().manual_seed(3)
    for n, c, h, w in SE_CASES:
        x = _cl(torch.randn(n, c, h, w, generator=g).to(device=device, dtype=dtype))
        s = torch.rand(n, c, 1, 1, generator=g).to(device=device, dtype=dtype)
        for sc in (s, _cl(s)):
            got = convkit.scale_channels(x, sc)
            assert got.dtype == dtype and torch.equal(got, x * sc), (n, c, h, w, dtype)
            if n and h * w > 1:
                assert got.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("device", DEVICES)
def test_what_the_se_kernels_do_not_take_runs_torchs(device):
    g = torch.Generator().manual_seed(4)
    x = _cl(torch.randn(2, 16, 5, 5, generator=g)).to(device)
    s = torch.rand(2, 16, 1, 1, generator=g).to(device)
    for xx, ss in ((x.contiguous(), s),                        # NCHW
                   (_cl(torch.randn(2, 3, 5, 5)).to(device), s[:, :3]),  # 12-byte pixels
                   (x, s[:, :1]),                              # a broadcast over the channels
                   (x, torch.rand(2, 16, 5, 5).to(device)),    # no broadcast at all
                   (x, s.half()),                              # another dtype: torch's promotion
                   (x, s[:1])):                                # one scale for the batch
        assert torch.equal(convkit.scale_channels(xx, ss), xx * ss)
    for xx in (x.contiguous(), _cl(torch.randn(2, 3, 5, 5)).to(device), x[:, 1:]):
        assert torch.allclose(convkit.channel_mean(xx), F.adaptive_avg_pool2d(xx, 1), rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError):  # torch's own error
        convkit.scale_channels(x, torch.rand(3, 16, 1, 1, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_se_modules_keep_torchs_gradient(device):
    pool = convkit.nn.AdaptiveAvgPool2d.from_torch(torch.nn.AdaptiveAvgPool2d(1))
    x = _cl(torch.randn(2, 16, 5, 5, device=device)).requires_grad_()
    s = torch.rand(2, 16, 1, 1, device=device, requires_grad=True)
    (convkit.nn.scale_channels(x, s) * pool(x)).sum().backward()
    rx, rs = x.detach().clone().requires_grad_(), s.detach().clone().requires_grad_()
    ((rx * rs) * F.adaptive_avg_pool2d(rx, 1)).sum().backward()
    assert torch.allclose(x.grad, rx.grad) and torch.allclose(s.grad, rs.grad)
    two = convkit.nn.AdaptiveAvgPool2d.from_torch(torch.nn.AdaptiveAvgPool2d(2))
    assert torch.equal(two(x.detach()), F.adaptive_avg_pool2d(x.detach(), 2))


@pytest.mark.parametrize("name, scales, pools", [("efficientnet_b0", 16, 1), ("mobilenet_v3_small", 9, 1),
                                                 ("regnet_y_400mf", 16, 1), ("resnet18", 0, 1)])
def test_fuse_runs_squeeze_excitation_on_convkit_and_compiles(name, scales, pools):
    # (the squeeze-excitation blocks' means are inside their gates: the head's pool is the one left)
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)().eval()
    fused = convkit.fuse(m)
    summ = fused.convkit_summary
    assert (summ.channel_scales, summ.mean_pools) == (scales, pools), str(summ)
    if scales:
        assert f"{pools} mean pools and {scales} squeeze-excitation scales" in str(summ)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want = m(x)
        rel = lambda y: ((y - want).norm() / want.norm()).item()  # noqa: E731
        assert rel(fused(x)) < 1e-4
        assert rel(torch.compile(fused, fullgraph=True)(x)) < 1e-4


def test_se_pattern_needs_the_mean_of_the_same_tensor():
    class NotSE(torch.nn.Module):  # s is computed from another tensor's mean: not squeeze-excitation
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.pool = torch.nn.AdaptiveAvgPool2d(1)
            self.fc = torch.nn.Conv2d(8, 8, 1)

        def forward(self, x):
            y = self.conv(x)
            return y * torch.sigmoid(self.fc(self.pool(x))) + x * self.pool(y).sigmoid()

    m = NotSE().eval()
    fused = convkit.fuse(m)
    assert fused.convkit_summary.channel_scales == 0
    x = torch.randn(2, 8, 6, 6)
    with torch.no_grad():
        assert torch.allclose(fused(x), m(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("form", ["method", "torch_mean", "functional"])
def test_se_with_a_functional_mean(form):
    class SE(torch.nn.Module):  # timm's form: the mean as a call, the gate a module or a function
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
            self.fc1 = torch.nn.Conv2d(16, 4, 1)
            self.fc2 = torch.nn.Conv2d(4, 16, 1)
            self.gate = torch.nn.Sigmoid()

        def forward(self, x):
            y = self.conv(x)
            if form == "method":
                m = y.mean((2, 3), keepdim=True)
            elif form == "torch_mean":
                m = torch.mean(y, (-2, -1), True)
            else:
                m = F.adaptive_avg_pool2d(y, 1)
            return y * self.gate(self.fc2(F.relu(self.fc1(m))))

    m = SE().eval()
    fused = convkit.fuse(m)
    summ = fused.convkit_summary
    assert (summ.channel_scales, summ.mean_pools, summ.se_gates) == (1, 0, 1), str(summ)
    x = torch.randn(2, 8, 6, 6)
    with torch.no_grad():
        want = m(x)
        assert torch.allclose(fused(x), want, rtol=1e-4, atol=1e-5)
        assert torch.allclose(torch.compile(fused, fullgraph=True)(x), want, rtol=1e-4, atol=1e-5)
    # not 4-D: torch's mean over the same dimensions
    z = torch.randn(3, 5, 7)
    assert torch.equal(convkit.nn.channel_mean(z), z.mean((-2, -1), keepdim=True))


# ---- squeeze-excitation's gate in one op (convkit.se_gate, convkit.nn.SqueezeExcitationGate) ----------------

_ACT64 = {"none": lambda v: v, "relu": F.relu, "relu6": F.relu6, "silu": F.silu, "gelu": F.gelu,
          "hardswish": F.hardswish, "sigmoid": torch.sigmoid, "hardsigmoid": F.hardsigmoid}
GATE_CASES = [  # (N, C, R, H, W, act1, act2, bias)
    (1, 32, 8, 112, 112, "silu", "sigmoid", True),    # EfficientNet-B0's first block
    (2, 96, 4, 56, 56, "silu", "sigmoid", True),
    (3, 1152, 48, 7, 7, "silu", "sigmoid", True),
    (2, 120, 32, 28, 28, "relu", "hardsigmoid", True),  # MobileNetV3's
    (1, 16, 4, 5, 9, "gelu", "relu6", False),
    (5, 24, 6, 3, 1, "hardswish", "sigmoid", True),     # fewer pixels than the cluster's blocks
    (2, 40, 12, 1, 13, "none", "none", False),
    (1, 64, 200, 2, 2, "relu", "sigmoid", True),        # R > C
    (2, 960, 240, 7, 7, "hardswish", "hardsigmoid", True),  # MobileNetV3-Large's last (R = 240)
    (3, 4, 5, 3, 3, "relu", "sigmoid", True),           # (f32) half the cluster's blocks own no channel
    (9, 8, 2, 6, 6, "silu", "sigmoid", True),           # more images than a batch rule would take
    (1, 20, 5, 4, 4, "relu", "sigmoid", True),          # 16-bit channels off the 16-byte vector: torch's ops
    (2, 16, 4, 1, 1, "relu", "sigmoid", True),          # one pixel (channels_last is also contiguous)
]


def _gate64(x, w1, b1, w2, b2, act1, act2):
    m = x.double().mean((2, 3))
    h = m @ w1.double().flatten(1).T + (b1.double() if b1 is not None else 0)
    h = _ACT64[act1](h)
    y = h @ w2.double().flatten(1).T + (b2.double() if b2 is not None else 0)
    return _ACT64[act2](y).reshape(x.shape[0], x.shape[1], 1, 1)


def _gate_args(n, c, r, h, w, bias, dtype, device, g, memory_format=torch.channels_last):
    x = torch.randn(n, c, h, w, generator=g).to(device=device, dtype=dtype).contiguous(memory_format=memory_format)
    w1 = (torch.randn(r, c, 1, 1, generator=g) / c ** 0.5).to(device=device, dtype=dtype)
    w2 = (torch.randn(c, r, 1, 1, generator=g) / r ** 0.5).to(device=device, dtype=dtype)
    b1 = torch.randn(r, generator=g).to(device=device, dtype=dtype) if bias else None
    b2 = torch.randn(c, generator=g).to(device=device, dtype=dtype) if bias else None
    return x, w1, b1, w2, b2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("memory_format", [torch.channels_last, torch.contiguous_format])
def test_se_gate_against_float64(device, dtype, memory_format):
    # The mean, both convolutions and both activations in float, rounded once: within float32's rounding of
    # the sums, or one rounding of the 16-bit output (the gate's values are O(1)).
    g = torch.Generator().manual_seed(0)
    tol = 2e-5 if dtype == torch.float32 else (8e-3 if dtype == torch.bfloat16 else 1e-3)
    for n, c, r, h, w, act1, act2, bias in GATE_CASES:
        x, w1, b1, w2, b2 = _gate_args(n, c, r, h, w, bias, dtype, device, g, memory_format)
        got = convkit.se_gate(x, w1, b1, w2, b2, act1, act2)
        want = _gate64(x, w1, b1, w2, b2, act1, act2)
        where = (n, c, r, h, w, act1, act2, bias, dtype, memory_format)
        assert got.shape == (n, c, 1, 1) and got.dtype == dtype and got.device == x.device, where
        err = (got.double() - want).abs() / (1 + want.abs())
        assert err.max().item() <= tol, (where, err.max().item())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")
def test_se_gate_is_deterministic_and_agrees_with_the_four_ops():
    # the cluster kernel adds in a fixed order: the same bits every run; and what the fused model ran before
    # (the mean, then the two 1x1 convolutions) within the 16-bit rounding of its intermediates
    g = torch.Generator().manual_seed(1)
    x, w1, b1, w2, b2 = _gate_args(4, 480, 20, 14, 14, True, torch.bfloat16, "cuda", g)
    a = convkit.se_gate(x, w1, b1, w2, b2, "silu", "sigmoid")
    for _ in range(3):
        assert torch.equal(convkit.se_gate(x, w1, b1, w2, b2, "silu", "sigmoid"), a)
    four = convkit.conv2d(convkit.conv2d(convkit.channel_mean(x), w1, b1, activation="silu"), w2, b2,
                          activation="sigmoid")
    assert (a.float() - four.float()).abs().max().item() < 2e-2


def test_se_gate_errors_and_empty_batch():
    x = _cl(torch.randn(2, 16, 5, 5))
    w1, w2 = torch.randn(4, 16, 1, 1), torch.randn(16, 4, 1, 1)
    with pytest.raises(ValueError, match="w1"):
        convkit.se_gate(x, torch.randn(4, 15, 1, 1), None, w2, None)
    with pytest.raises(ValueError, match="w2"):
        convkit.se_gate(x, w1, None, torch.randn(16, 4, 3, 3), None)
    with pytest.raises(ValueError, match="b2"):
        convkit.se_gate(x, w1, None, w2, torch.randn(4))
    with pytest.raises(ValueError, match="activation"):
        convkit.se_gate(x, w1, None, w2, None, "swish")
    with pytest.raises(TypeError, match="dtype"):
        convkit.se_gate(x, w1.double(), None, w2, None)
    with pytest.raises(ValueError, match="4-D"):
        convkit.se_gate(x[0], w1, None, w2, None)
    assert convkit.se_gate(x[:0], w1, None, w2, None).shape == (0, 16, 1, 1)


@pytest.mark.parametrize("device", DEVICES)
def test_gate_module_paths(device):
    # SqueezeExcitationGate: the op up to max_batch images, the three steps above it and under autograd; the
    # same function either way.
    torch.manual_seed(0)
    fc1 = convkit.nn.Conv2dAct(24, 6, 1, activation="silu").to(device)
    fc2 = convkit.nn.Conv2dAct(6, 24, 1, activation="sigmoid").to(device)
    gate = convkit.nn.SqueezeExcitationGate(fc1, fc2)
    gate.max_batch = 2
    assert convkit.nn.SqueezeExcitationGate.takes(fc1, fc2)
    assert not convkit.nn.SqueezeExcitationGate.takes(fc1, convkit.nn.Conv2d(6, 24, 3).to(device))
    for n in (1, gate.max_batch + 1):
        x = _cl(torch.randn(n, 24, 9, 9, device=device))
        with torch.no_grad():
            want = fc2(fc1(x.mean((2, 3), keepdim=True)))
            assert torch.allclose(gate(x), want, rtol=1e-5, atol=1e-6), n
    x = _cl(torch.randn(2, 24, 9, 9, device=device)).requires_grad_()
    gate(x).sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


@pytest.mark.parametrize("name, scales, pools, gates", [("efficientnet_b0", 16, 1, 16), ("mobilenet_v3_small", 9, 1, 9),
                                                        ("regnet_y_400mf", 16, 1, 16)])
def test_fuse_puts_the_gates_in_one_op(name, scales, pools, gates):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)().eval()
    fused = convkit.fuse(m)
    summ = fused.convkit_summary
    assert (summ.channel_scales, summ.mean_pools, summ.se_gates) == (scales, pools, gates), str(summ)
    assert f"{gates} squeeze-excitation gates by convkit.se_gate" in str(summ)
    assert sum(isinstance(mod, convkit.nn.SqueezeExcitationGate) for mod in fused.modules()) == gates
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want = m(x)
        assert ((fused(x) - want).norm() / want.norm()).item() < 1e-4


def test_gate_in_an_autocast_region():
    # float32 parameters, bfloat16 activations: the gate takes the convolutions' way (their autocast casts),
    # not the op (which wants one dtype)
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = torchvision.models.efficientnet_b0().eval()
    fused = convkit.fuse(m)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = m(x).float(), fused(x).float()
    assert ((got - want).norm() / want.norm()).item() < 5e-2
