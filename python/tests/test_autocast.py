"""torch.autocast and convkit's ops (csrc/autocast.cpp): in an autocast region the convolutions return the
region's dtype as torch's conv2d does; on CUDA they compute in it (float32 inputs, weights, bias and residual cast;
the weight once a region), on the CPU too for a channels-last input in a bfloat16 region where the CPU computes
bfloat16 natively (convkit._C.cpu_bf16_native(): its dot product), elsewhere on the CPU in float32 with the
output cast (convkit's other 16-bit CPU paths widen to float32 anyway). Gradients reach the float32 leaves, and a converted or fused model gives the dtypes and, within
the 16-bit bound, the values of the torch model in the same region. On CUDA, layer_norm_last runs in float32
there as torch's layer_norm does. CPU (bfloat16 autocast) in CI, CUDA (bfloat16 and float16) on a GPU.
"""
import copy

import pytest
import torch
import torch.nn.functional as F

import convkit
from conftest import DEVICES, rel_err

BOUND = 2e-2  # test_lowp's backward bound: the same 16-bit convolutions, rounded inputs


def _dtypes(device):
    return [torch.bfloat16] + ([torch.float16] if device == "cuda" else [])


def _in_region_dtype(device, dt, x):
    """Whether convkit's convolution of x computes in the region's dtype dt (the operands cast) rather than in
    float32 with the output cast."""
    if device == "cuda":
        return True
    cl = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    return dt == torch.bfloat16 and cl and convkit._C.cpu_bf16_native()


def _operands(device, seed=0, memory_format=torch.channels_last):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 16, 9, 11, generator=g).to(device).contiguous(memory_format=memory_format)
    w = (torch.randn(24, 16, 3, 3, generator=g) / 12).to(device).contiguous(memory_format=memory_format)
    b = torch.randn(24, generator=g).to(device)
    res = torch.randn(2, 24, 9, 11, generator=g).to(device).contiguous(memory_format=memory_format)
    return [t.requires_grad_() for t in (x, w, b, res)]


@pytest.mark.parametrize("device", DEVICES)
def test_conv2d_runs_in_the_region_dtype_and_its_gradients_reach_float32(device):
    for dt in _dtypes(device):
        x, w, b, res = _operands(device)
        with torch.autocast(device, dtype=dt):
            y = convkit.conv2d(x, w, b, padding=1, activation="relu", residual=res)
        assert y.dtype == dt and y.is_contiguous(memory_format=torch.channels_last)
        gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(device, dt)
        grads = torch.autograd.grad(y, (x, w, b, res), gy)
        # the same as casting by hand, to the bit: the region only adds the casts
        leaves = [t.detach().clone().requires_grad_() for t in (x, w, b, res)]
        if not _in_region_dtype(device, dt, x):  # float32 math, the output cast
            want = convkit.conv2d(*leaves[:3], padding=1, activation="relu", residual=leaves[3]).to(dt)
        else:
            xs, ws, bs, rs = (t.to(dt) for t in leaves)
            want = convkit.conv2d(xs, ws, bs, padding=1, activation="relu", residual=rs)
        assert torch.equal(y, want)
        for got, ref, t in zip(grads, torch.autograd.grad(want, leaves, gy), (x, w, b, res)):
            assert got.dtype == torch.float32 and got.shape == t.shape
            assert torch.equal(got, ref)


def test_the_cpu_region_computes_in_bfloat16_where_the_cpu_does_so_natively():
    # channels-last x: bfloat16 math where the CPU has the dot product (the operands cast), else float32 with
    # the output cast; an NCHW x: float32 with the output cast (convkit widens NCHW bfloat16 anyway)
    for mf in (torch.channels_last, torch.contiguous_format):
        x, w, b, res = (t.detach() for t in _operands("cpu", seed=7, memory_format=mf))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = convkit.conv2d(x, w, b, padding=1, activation="silu", residual=res)
        assert y.dtype == torch.bfloat16
        if _in_region_dtype("cpu", torch.bfloat16, x):
            assert mf == torch.channels_last
            want = convkit.conv2d(x.bfloat16(), w.bfloat16(), b.bfloat16(), padding=1, activation="silu",
                                  residual=res.bfloat16())
        else:
            want = convkit.conv2d(x, w, b, padding=1, activation="silu", residual=res).bfloat16()
        assert torch.equal(y, want), mf


@pytest.mark.parametrize("device", DEVICES)
def test_conv2d_outside_a_region_or_with_it_disabled_keeps_float32(device):
    x, w, b, res = _operands(device)
    with torch.no_grad():
        assert convkit.conv2d(x, w, b, padding=1).dtype == torch.float32
        with torch.autocast(device, dtype=torch.bfloat16, enabled=False):
            assert convkit.conv2d(x, w, b, padding=1).dtype == torch.float32
        if device == "cuda":  # a region of the other device type does not touch these tensors
            with torch.autocast("cpu", dtype=torch.bfloat16):
                assert convkit.conv2d(x, w, b, padding=1).dtype == torch.float32


@pytest.mark.parametrize("device", DEVICES)
def test_the_aten_backward_switch_and_per_sample_under_autocast(device, monkeypatch):
    x, w, b, _ = _operands(device)
    with torch.autocast(device, dtype=torch.bfloat16):
        y = convkit.conv2d(x, w, b, padding=1)
    monkeypatch.setattr(convkit._autograd, "BACKWARD", "aten")
    with torch.autocast(device, dtype=torch.bfloat16):
        y_aten = convkit.conv2d(x, w, b, padding=1)
    assert y_aten.dtype == torch.bfloat16 and torch.equal(y_aten, y)
    gx, gw = torch.autograd.grad(y_aten.float().square().sum(), (x, w))
    assert gx.dtype == gw.dtype == torch.float32
    monkeypatch.setattr(convkit._autograd, "BACKWARD", "convkit")
    ws = (torch.randn(2, 8, 16, 3, 3, generator=torch.Generator().manual_seed(3)) / 12).to(device)
    with torch.autocast(device, dtype=torch.bfloat16):
        yp = convkit.conv2d_per_sample(x.detach(), ws, None, padding=1)
    assert yp.dtype == torch.bfloat16
    if device == "cpu":
        want = convkit.conv2d_per_sample(x.detach(), ws, None, padding=1).bfloat16()
    else:
        want = convkit.conv2d_per_sample(x.detach().bfloat16(), ws.bfloat16(), None, padding=1)
    assert torch.equal(yp, want)


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_under_torch_compile(device):
    x, w, b, res = (t.detach() for t in _operands(device))

    def f(x, w, b, res):
        return convkit.conv2d(x, w, b, padding=1, activation="silu", residual=res)

    with torch.autocast(device, dtype=torch.bfloat16):
        eager = f(x, w, b, res)
        compiled = torch.compile(f, fullgraph=True)(x, w, b, res)
    assert compiled.dtype == eager.dtype == torch.bfloat16
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="an explicit TF32 request is a CUDA math mode")
def test_an_explicit_tf32_request_keeps_float32():
    x, w, b, _ = (t.detach() for t in _operands("cuda"))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert convkit.conv2d(x, w, b, padding=1, algo="auto/tf32").dtype == torch.float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CPU autocast leaves layer_norm alone")
def test_layer_norm_runs_in_float32_under_cuda_autocast():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 7, 96, generator=g).cuda().bfloat16()
    w, b = torch.randn(96, generator=g).cuda(), torch.randn(96, generator=g).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = convkit.layer_norm(x, w, b)
        want = F.layer_norm(x, (96,), w, b)
    assert got.dtype == want.dtype == torch.float32
    assert rel_err(got, want) <= 1e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model_name", ["resnet18", "mobilenet_v2"])
def test_converted_and_fused_models_under_autocast(device, model_name):
    import torchvision

    torch.manual_seed(5)
    m = getattr(torchvision.models, model_name)(weights=None).eval().to(device)
    for mod in m.modules():  # non-trivial BatchNorm statistics, so that the fold matters
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    mf = torch.channels_last
    m = m.to(memory_format=mf)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(6)).to(device).contiguous(memory_format=mf)
    converted = convkit.nn.convert(copy.deepcopy(m), memory_format=mf)
    fused = convkit.fuse(copy.deepcopy(m))
    with torch.no_grad():
        ref64 = m.double()(x.double()).float()
        m.float()
        for dt in _dtypes(device):
            with torch.autocast(device, dtype=dt):
                want = m(x)
                got = {"convert": converted(x), "fuse": fused(x)}
            for what, y in got.items():
                assert y.dtype == want.dtype, what
                # convkit's 16-bit model is as close to the float64 model as torch's 16-bit model is, within 2x
                assert rel_err(y, ref64) <= max(2 * rel_err(want, ref64), BOUND), what
