"""The gradient ops torch.ops.convkit.conv2d_backward_data / conv2d_backward_weight (convkit/backward.hpp), and
convkit.conv2d's backward through them on CUDA depthwise layers.

On the CPU the ops are the library's f32 reference (every problem); on CUDA they are the depthwise gradient
kernels, which the C++ autograd uses for every depthwise layer of a CUDA model (any stride: no aten fallback),
and the dense weight-gradient kernel (16-bit channels_last), which it uses for the weight of every such layer
that is not a 1x1 stride-1 GEMM.
Each is checked against PyTorch's autograd of F.conv2d in float64.
"""
import pytest
import torch
import torch.nn.functional as F

import convkit
from conftest import DEVICES, MEMORY_FORMATS, make_case

# N, C, H, W, K, R, S, stride, padding, dilation, groups
CASES = {
    "dense": (2, 4, 7, 9, 6, 3, 3, 1, 1, 1, 1),
    "grouped_stride2": (1, 6, 8, 8, 4, 3, 3, 2, 1, 1, 2),
    "depthwise": (2, 16, 9, 11, 16, 3, 3, 1, 1, 1, 16),
    "depthwise_stride2_odd": (2, 24, 13, 11, 24, 3, 3, 2, 1, 1, 24),
    "depthwise_5x5_stride2": (1, 32, 15, 15, 32, 5, 5, 2, 2, 1, 32),
    "depthwise_7x7": (2, 8, 14, 14, 8, 7, 7, 1, 3, 1, 8),
    "depthwise_multiplier2": (2, 8, 9, 9, 16, 3, 3, 1, 1, 1, 8),
    "depthwise_dilation2_pad4": (1, 17, 10, 10, 17, 3, 3, 1, 4, 2, 17),
    "depthwise_stride3_c3": (2, 3, 11, 10, 3, 3, 3, 3, 2, 1, 3),
}
DEPTHWISE = [k for k in CASES if k.startswith("depthwise")]


def _case(case, device, dtype, memory_format, seed=0):
    """x, w, grad_out (of the forward's output shape) and the conv arguments, every tensor in memory_format."""
    x, w, _, conv = make_case(case, device, dtype, memory_format, seed)
    g = torch.Generator().manual_seed(seed + 1000)
    gz = torch.randn(F.conv2d(x.double().cpu(), w.double().cpu(), **conv).shape, generator=g, dtype=torch.float64)
    to = lambda t: t.to(device=device, dtype=dtype).contiguous(memory_format=memory_format)  # noqa: E731
    return x, to(w), to(gz), conv


def _reference(x, w, gz, conv):
    xd = x.detach().double().cpu().requires_grad_()
    wd = w.detach().double().cpu().requires_grad_()
    out = F.conv2d(xd, wd, **conv)
    return torch.autograd.grad(out, (xd, wd), gz.double().cpu())


def _pairs(conv):
    return [conv["stride"]] * 2, [conv["padding"]] * 2, [conv["dilation"]] * 2, conv["groups"]


@pytest.mark.parametrize("memory_format", MEMORY_FORMATS, ids=["nchw", "nhwc"])
@pytest.mark.parametrize("name", list(CASES))
def test_ops_on_the_cpu_match_float64_torch(name, memory_format):
    x, w, gz, conv = _case(CASES[name], "cpu", torch.float32, memory_format, seed=1)
    st, pd, dl, groups = _pairs(conv)
    gx = torch.ops.convkit.conv2d_backward_data(gz, w, list(x.shape), st, pd, dl, groups)
    gw = torch.ops.convkit.conv2d_backward_weight(x, gz, list(w.shape), st, pd, dl, groups)
    want_x, want_w = _reference(x, w, gz, conv)
    torch.testing.assert_close(gx.double(), want_x, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw.double(), want_w, rtol=1e-5, atol=1e-5)
    assert gx.is_contiguous(memory_format=memory_format)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("memory_format", MEMORY_FORMATS, ids=["nchw", "nhwc"])
@pytest.mark.parametrize("name", DEPTHWISE)
def test_depthwise_ops_on_cuda_match_float64_torch(name, memory_format, dtype):
    x, w, gz, conv = _case(CASES[name], "cuda", dtype, memory_format, seed=2)
    st, pd, dl, groups = _pairs(conv)
    gx = torch.ops.convkit.conv2d_backward_data(gz, w, list(x.shape), st, pd, dl, groups)
    gw = torch.ops.convkit.conv2d_backward_weight(x, gz, list(w.shape), st, pd, dl, groups)
    want_x, want_w = _reference(x, w, gz, conv)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for got, want in ((gx, want_x), (gw, want_w)):
        err = (got.double().cpu() - want).norm() / want.norm()
        assert err <= tol, f"relative L2 error {err:.3g}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("memory_format", MEMORY_FORMATS, ids=["nchw", "nhwc"])
@pytest.mark.parametrize("name", DEPTHWISE)
def test_conv2d_backward_of_depthwise_layers_on_cuda(name, memory_format):
    # The whole backward (activation, bias) of convkit.conv2d, stride 2 included, against float64 torch.
    x, w, gz, conv = _case(CASES[name], "cuda", torch.float32, memory_format, seed=3)
    b = torch.randn(w.shape[0], device="cuda")
    ours = [t.clone().requires_grad_() for t in (x, w, b)]
    out = convkit.conv2d(*ours, **conv, activation="relu6")
    got = torch.autograd.grad(out, ours, gz)
    ref = [t.detach().double().cpu().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(F.relu6(F.conv2d(*ref, **conv)), ref, gz.double().cpu())
    for g_, w_, what in zip(got, want, ("x", "w", "bias")):
        torch.testing.assert_close(g_.double().cpu(), w_, rtol=1e-4, atol=1e-4, msg=lambda m: f"{what}: {m}")


# Dense layers for the tensor-core weight-gradient kernel (16-bit channels_last, C and K multiples of 8):
# N, C, H, W, K, R, S, stride, padding, dilation, groups
DENSE = {
    "3x3": (2, 16, 9, 11, 24, 3, 3, 1, 1, 1, 1),
    "3x3_stride2_odd": (3, 24, 13, 11, 72, 3, 3, 2, 1, 1, 1),
    "7x7_stride2": (2, 8, 14, 14, 40, 7, 7, 2, 3, 1, 1),
    "1x1_stride2": (2, 32, 9, 9, 16, 1, 1, 2, 0, 1, 1),
    "5x5_dilation2_pad4": (1, 16, 12, 10, 8, 5, 5, 1, 4, 2, 1),
    "k136_many_pixels": (4, 136, 20, 20, 136, 3, 3, 1, 1, 1, 1),
}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("name", list(DENSE))
def test_dense_weight_gradient_kernel_on_cuda(name, dtype):
    # the op itself, and convkit.conv2d's backward (cuDNN's weight gradient for these layers unless
    # CONVKIT_DENSE_WGRAD=convkit), against float64 torch
    cl = torch.channels_last
    x, w, gz, conv = _case(DENSE[name], "cuda", dtype, cl, seed=5)
    st, pd, dl, groups = _pairs(conv)
    want_x, want_w = _reference(x, w, gz, conv)
    gw = torch.ops.convkit.conv2d_backward_weight(x, gz, list(w.shape), st, pd, dl, groups)
    assert gw.is_contiguous(memory_format=cl)
    again = torch.ops.convkit.conv2d_backward_weight(x, gz, list(w.shape), st, pd, dl, groups)
    assert torch.equal(gw, again), "not the same bits on a second call"
    ours = [t.clone().requires_grad_() for t in (x, w)]
    got_x, got_w = torch.autograd.grad(convkit.conv2d(*ours, **conv), ours, gz)
    for got, want, what in ((gw, want_w, "op"), (got_w, want_w, "autograd w"), (got_x, want_x, "autograd x")):
        err = (got.double().cpu() - want).norm() / want.norm()
        assert err <= 2e-2, f"{what}: relative L2 error {err:.3g}"


@pytest.mark.parametrize("device", DEVICES)
def test_an_empty_batch(device):
    x = torch.randn(0, 8, 5, 5, device=device)
    w = torch.randn(8, 1, 3, 3, device=device)
    gz = torch.randn(0, 8, 5, 5, device=device)
    gx = torch.ops.convkit.conv2d_backward_data(gz, w, [0, 8, 5, 5], [1, 1], [1, 1], [1, 1], 8)
    gw = torch.ops.convkit.conv2d_backward_weight(x, gz, [8, 1, 3, 3], [1, 1], [1, 1], [1, 1], 8)
    assert gx.shape == (0, 8, 5, 5)
    assert gw.shape == (8, 1, 3, 3) and bool((gw == 0).all())


@pytest.mark.parametrize("device", DEVICES)
def test_bad_input_gets_a_clear_error(device):
    gz = torch.randn(1, 8, 5, 5, device=device)
    w = torch.randn(8, 1, 3, 3, device=device)
    with pytest.raises(ValueError, match="grad_out must have the output's shape"):
        torch.ops.convkit.conv2d_backward_data(gz, w, [1, 8, 9, 9], [1, 1], [0, 0], [1, 1], 8)
    with pytest.raises(ValueError, match="4 entries"):
        torch.ops.convkit.conv2d_backward_weight(gz, gz, [8, 1, 3], [1, 1], [1, 1], [1, 1], 8)
    if device == "cuda":  # a grouped (not depthwise) problem has no CUDA gradient kernel
        wg = torch.randn(8, 4, 3, 3, device=device)
        with pytest.raises(NotImplementedError, match="depthwise"):
            torch.ops.convkit.conv2d_backward_data(gz, wg, [1, 8, 5, 5], [1, 1], [1, 1], [1, 1], 2)
    else:
        with pytest.raises(NotImplementedError, match="f32 only"):
            torch.ops.convkit.conv2d_backward_data(gz.bfloat16(), w.bfloat16(), [1, 8, 5, 5], [1, 1], [1, 1],
                                                   [1, 1], 8)


@pytest.mark.parametrize("device", DEVICES)
def test_the_ops_trace_under_torch_compile(device):
    x, w, gz, conv = _case(CASES["depthwise_stride2_odd"], device, torch.float32, torch.channels_last, seed=4)
    st, pd, dl, groups = _pairs(conv)

    def both(x, w, gz):
        return (torch.ops.convkit.conv2d_backward_data(gz, w, list(x.shape), st, pd, dl, groups),
                torch.ops.convkit.conv2d_backward_weight(x, gz, list(w.shape), st, pd, dl, groups))

    eager = both(x, w, gz)
    compiled = torch.compile(both, fullgraph=True)(x, w, gz)
    for a, b in zip(eager, compiled):
        assert a.shape == b.shape and a.stride() == b.stride()
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_depthwise_training_under_torch_compile(device):
    # A MobileNet-like block (depthwise stride 2 and stride 1 with multiplier 2, a pointwise conv) trained
    # through torch.compile(fullgraph=True): AOTAutograd traces the C++ backward into the gradient ops (their
    # fake kernels) on CUDA; the gradients equal eager's.
    g = torch.Generator().manual_seed(11)
    mf = torch.channels_last
    x = torch.randn(2, 8, 13, 11, generator=g).to(device).contiguous(memory_format=mf)
    w1 = (torch.randn(8, 1, 3, 3, generator=g) / 3).to(device).contiguous(memory_format=mf)
    w2 = (torch.randn(16, 1, 5, 5, generator=g) / 5).to(device).contiguous(memory_format=mf)
    w3 = (torch.randn(4, 16, 1, 1, generator=g) / 4).to(device).contiguous(memory_format=mf)

    def step(x, w1, w2, w3):
        y = convkit.conv2d(x, w1, None, stride=2, padding=1, groups=8, activation="relu6")
        y = convkit.conv2d(y, w2, None, padding=2, groups=8, activation="hardswish")
        return convkit.conv2d(y, w3).square().mean()

    def grads(fn):
        ts = [t.detach().clone().requires_grad_() for t in (x, w1, w2, w3)]
        return torch.autograd.grad(fn(*ts), ts)

    for e, c in zip(grads(step), grads(torch.compile(step, fullgraph=True))):
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_16bit_aten_gradients_under_torch_compile(device):
    # A bf16 channels_last dense layer at stride 2: its data gradient is no convolution (aten's, called from C++
    # without the float32 custom op), and its weight gradient aten's on CUDA. Traced by torch.compile
    # (fullgraph=True), the gradients equal eager's.
    g = torch.Generator().manual_seed(12)
    mf = torch.channels_last
    x = torch.randn(2, 16, 9, 11, generator=g).to(device, torch.bfloat16).contiguous(memory_format=mf)
    w = (torch.randn(8, 16, 3, 3, generator=g) / 12).to(device, torch.bfloat16).contiguous(memory_format=mf)

    def loss(x, w):
        return convkit.conv2d(x, w, None, stride=2, padding=1, activation="relu").float().square().mean()

    def grads(fn):
        ts = [t.detach().clone().requires_grad_() for t in (x, w)]
        return torch.autograd.grad(fn(*ts), ts)

    eager = grads(loss)
    for got, t in zip(eager, (x, w)):
        assert got.dtype == torch.bfloat16 and got.is_contiguous(memory_format=mf) and got.shape == t.shape
    for e, c in zip(eager, grads(torch.compile(loss, fullgraph=True))):
        torch.testing.assert_close(c.float(), e.float(), rtol=2e-2, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_pointwise_data_gradient_as_one_gemm(device):
    # CONVKIT_POINTWISE_DGRAD=gemm (read once a process: a child process here) takes a 1x1 stride-1 16-bit
    # channels_last layer's data gradient as one GEMM; it matches float64 torch as the default path does.
    import os
    import subprocess
    import sys

    script = f"""
import torch, torch.nn.functional as F, convkit
g = torch.Generator().manual_seed(13)
mf = torch.channels_last
x = torch.randn(2, 24, 7, 5, generator=g).bfloat16().to("{device}").contiguous(memory_format=mf).requires_grad_()
w = (torch.randn(40, 24, 1, 1, generator=g) / 5).bfloat16().to("{device}").contiguous(memory_format=mf).requires_grad_()
gz = torch.randn(2, 40, 7, 5, generator=g).bfloat16().to("{device}").contiguous(memory_format=mf)
gx, gw = torch.autograd.grad(convkit.conv2d(x, w), (x, w), gz)
assert gx.is_contiguous(memory_format=mf) and gx.shape == x.shape and gx.dtype == torch.bfloat16
xd, wd = x.detach().double().cpu().requires_grad_(), w.detach().double().cpu().requires_grad_()
rx, rw = torch.autograd.grad(F.conv2d(xd, wd), (xd, wd), gz.double().cpu())
for got, want in ((gx, rx), (gw, rw)):
    err = float((got.double().cpu() - want).norm() / want.norm())
    assert err <= 2e-2, err
print("ok")
"""
    env = dict(os.environ, CONVKIT_POINTWISE_DGRAD="gemm")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]
