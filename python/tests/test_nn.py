"""convkit.nn modules, the seed's CNN trained with convkit layers, and torch.compile(fullgraph=True)."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import convkit
from conftest import DEVICES, cuda_only, run_or_skip_unsupported


@pytest.mark.parametrize("kwargs", [
    dict(padding=1), dict(padding=0, stride=2), dict(padding="same"), dict(padding="valid"),
    dict(padding="same", dilation=2), dict(padding=(1, 2), groups=2, bias=False),
    dict(padding=1, padding_mode="reflect"), dict(padding=1, padding_mode="replicate"),
    dict(padding=2, padding_mode="circular"), dict(padding="same", dilation=(1, 2)),
])
@pytest.mark.parametrize("kernel_size", [3, (2, 4)])
def test_conv2d_module_matches_torch(kernel_size, kwargs):
    torch.manual_seed(0)
    ref = nn.Conv2d(4, 6, kernel_size, **kwargs)
    ours = convkit.nn.Conv2d(4, 6, kernel_size, **kwargs)
    ours.load_state_dict(ref.state_dict())  # state_dict compatible
    assert set(ours.state_dict()) == set(ref.state_dict())
    for x in (torch.randn(2, 4, 11, 10), torch.randn(4, 9, 8)):  # batched and unbatched
        torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)


def test_from_torch_and_convert():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                          nn.Sequential(nn.Conv2d(8, 8, 3, groups=8, padding=1), nn.BatchNorm2d(8)),
                          nn.Conv2d(8, 4, 1))
    x = torch.randn(2, 3, 12, 12)
    model.eval()
    want = model(x)
    conv = convkit.nn.convert(copy.deepcopy(model))
    convs = [m for m in conv.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 3 and all(type(m) is convkit.nn.Conv2d for m in convs)
    torch.testing.assert_close(conv(x), want, rtol=1e-5, atol=1e-5)
    single = convkit.nn.convert(nn.Conv2d(3, 2, 3))
    assert type(single) is convkit.nn.Conv2d
    with pytest.raises(TypeError, match="expected a torch.nn.Conv2d"):
        convkit.nn.Conv2d.from_torch(nn.Linear(2, 2))


def test_conv2d_act_fuses_activation_and_residual():
    torch.manual_seed(1)
    m = convkit.nn.Conv2dAct(4, 4, 3, padding=1, activation="gelu")
    x = torch.randn(2, 4, 7, 7)
    skip = torch.randn(2, 4, 7, 7)
    want = F.gelu(F.conv2d(x, m.weight, m.bias, padding=1) + skip)
    torch.testing.assert_close(m(x, skip), want, rtol=1e-5, atol=1e-5)
    assert "activation=gelu" in repr(m)
    with pytest.raises(ValueError, match="activation must be one of"):
        convkit.nn.Conv2dAct(4, 4, 3, activation="tanh")


class SeedNet(nn.Module):
    """The seed's small CNN: conv 1->10 5x5, max-pool 2, conv 10->20 5x5, max-pool 2, linear 320->10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc = nn.Linear(320, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        return F.log_softmax(self.fc(x.flatten(1)), dim=1)


@pytest.mark.parametrize("device", DEVICES)
def test_seed_cnn_trains_like_torch(device, torch_strict_fp32):
    # torch_strict_fp32: on CUDA the torch model would otherwise run its convolutions in TF32
    cuda_only(device)
    torch.manual_seed(0)
    ref = SeedNet().to(device)
    ours = convkit.nn.convert(copy.deepcopy(ref))
    run_or_skip_unsupported(lambda: ours(torch.zeros(1, 1, 28, 28, device=device)))
    assert type(ours.conv1) is convkit.nn.Conv2d
    g = torch.Generator().manual_seed(0)
    data = torch.randn(6, 32, 1, 28, 28, generator=g).to(device)
    labels = torch.randint(0, 10, (6, 32), generator=g).to(device)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.5)
    opt_ours = torch.optim.SGD(ours.parameters(), lr=0.05, momentum=0.5)
    losses = []
    for x, y in zip(data, labels):
        pair = []
        for model, opt in ((ref, opt_ref), (ours, opt_ours)):
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            opt.step()
            pair.append(loss.item())
        losses.append(pair)
    for r, o in losses:
        assert abs(r - o) <= 1e-4 * max(1.0, abs(r)), losses
    assert losses[-1][1] < losses[0][1]  # it learns
    for (n1, p1), (n2, p2) in zip(ref.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(p1, p2, rtol=1e-4, atol=1e-5, msg=n1)


class DynamicBlock(nn.Module):
    """Uses every op: a fused conv, per-sample filters predicted from the input, and the example ops."""

    def __init__(self):
        super().__init__()
        self.conv = convkit.nn.Conv2dAct(4, 4, 3, padding=1, activation="relu")
        self.predict = nn.Linear(4, 4 * 4 * 9)

    def forward(self, x):
        y = self.conv(x, x)
        w = self.predict(y.mean((2, 3))).view(x.shape[0], 4, 4, 3, 3)
        z = convkit.conv2d_per_sample(y, w, padding=1, activation="silu")
        return convkit.vector_add(convkit.silu(z), y)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["nchw", "nhwc"])
def test_torch_compile_fullgraph(memory_format):
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = DynamicBlock()
    x = torch.randn(2, 4, 8, 8).contiguous(memory_format=memory_format)
    want = m(x)
    compiled = torch.compile(m, fullgraph=True)
    torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)


def test_torch_compile_fullgraph_training_step():
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = DynamicBlock()
    x = torch.randn(2, 4, 8, 8)
    m(x).square().mean().backward()
    want = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    step = torch.compile(lambda x: m(x).square().mean(), fullgraph=True, backend="aot_eager")
    step(x).backward()
    for p, g in zip(m.parameters(), want):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_convert_takes_timm_conv2d_same(device, torch_strict_fp32):
    # timm's Conv2dSame pads by the input's size (TensorFlow's 'SAME' at stride 2): converted, it keeps that
    # (same_by_input), forward and backward, on an input of odd size. (torch_strict_fp32: on CUDA torch's
    # convolutions would otherwise run in TF32; eval: BatchNorm over a batch of 2 would amplify fp32 rounding.)
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    ref = timm.create_model("tf_efficientnet_b0", pretrained=False, num_classes=10).to(device).eval()
    ours = convkit.nn.convert(copy.deepcopy(ref))
    same = [m for m in ours.modules() if isinstance(m, convkit.nn.Conv2d) and m.same_by_input]
    assert len(same) == 5 and not any(type(m).__name__ == "Conv2dSame" for m in ours.modules())
    assert "same_by_input=True" in repr(same[0])
    x = torch.randn(2, 3, 33, 35, device=device)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ref(xa), ours(xb)
    assert (ya - yb).norm() <= 1e-4 * ya.norm()
    g = torch.randn_like(ya)
    (ya * g).sum().backward()
    (yb * g).sum().backward()
    assert (xa.grad - xb.grad).norm() <= 1e-4 * xa.grad.norm()
    wa = ref.conv_stem.weight.grad  # the stem is a Conv2dSame (stride 2) in the tf_ models
    wb = ours.conv_stem.weight.grad
    assert ours.conv_stem.same_by_input and (wa - wb).norm() <= 1e-4 * wa.norm()
