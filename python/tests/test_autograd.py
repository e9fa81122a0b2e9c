"""Gradients of conv2d and conv2d_per_sample.

convkit computes in float32 (its kernels and its oracle cpu_ref take f32/f16/bf16 only), so there is no
float64 path to gradcheck. Two checks instead, documented in docs/pytorch.md:
  1. torch.autograd.gradcheck in float32 on tiny shapes, eps=1e-2 with atol/rtol 2e-2: the ops are linear in
     x and w (smooth activations only here), so central differences are exact up to float32 rounding.
  2. Analytic gradients (float32, convkit) against PyTorch's autograd of the same function in float64, over
     the whole edge set and every activation, to 1e-4: this is the precise check of every formula.
"""
import pytest
import torch
import torch.nn.functional as F

import convkit
from conftest import DEVICES, EDGE_SET, MEMORY_FORMATS, make_case, run_or_skip_unsupported

ACTS = {"none": lambda t: t, "relu": F.relu, "silu": F.silu, "gelu": F.gelu, "sigmoid": torch.sigmoid,
        "hardsigmoid": F.hardsigmoid}


@pytest.mark.filterwarnings("ignore:Input #")
@pytest.mark.parametrize("activation", ["none", "silu", "gelu", "sigmoid"])
@pytest.mark.parametrize("conv", [dict(stride=1, padding=1, dilation=1, groups=1),
                                  dict(stride=2, padding=1, dilation=1, groups=2),
                                  dict(stride=1, padding=2, dilation=2, groups=1)])
def test_gradcheck_conv2d_float32(conv, activation):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 5, 5, generator=g, requires_grad=True)
    w = torch.randn(4, 4 // conv["groups"], 3, 3, generator=g, requires_grad=True)
    b = torch.randn(4, generator=g, requires_grad=True)
    out_shape = F.conv2d(x, w, b, **conv).shape
    res = torch.randn(out_shape, generator=g, requires_grad=True)
    fn = lambda x, w, b, r: convkit.conv2d(x, w, b, **conv, activation=activation, residual=r)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w, b, res), eps=1e-2, atol=2e-2, rtol=2e-2)


@pytest.mark.filterwarnings("ignore:Input #")
@pytest.mark.parametrize("stride", [1, 2])
def test_gradcheck_per_sample_float32(stride):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 2, 5, 5, generator=g, requires_grad=True)
    w = torch.randn(2, 3, 2, 3, 3, generator=g, requires_grad=True)
    b = torch.randn(2, 3, generator=g, requires_grad=True)
    fn = lambda x, w, b: convkit.conv2d_per_sample(x, w, b, stride=stride, padding=1, activation="silu")  # noqa
    assert torch.autograd.gradcheck(fn, (x, w, b), eps=1e-2, atol=2e-2, rtol=2e-2)


def _grads(fn, tensors, grad_out):
    out = fn(*tensors)
    gs = torch.autograd.grad(out, tensors, grad_out.to(out.dtype))
    return out, gs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation,memory_format", [
    ("none", torch.contiguous_format), ("none", torch.channels_last), ("relu", torch.channels_last),
    ("silu", torch.contiguous_format), ("gelu", torch.channels_last), ("sigmoid", torch.channels_last),
    ("hardsigmoid", torch.contiguous_format)], ids=["none-nchw", "none-nhwc", "relu-nhwc", "silu-nchw", "gelu-nhwc",
                                                   "sigmoid-nhwc", "hardsigmoid-nchw"])
@pytest.mark.parametrize("name", list(EDGE_SET))
def test_conv2d_grads_match_float64_torch(name, activation, memory_format, device):
    x, w, b, conv = make_case(EDGE_SET[name], device, memory_format=memory_format, seed=2)
    res = torch.randn(F.conv2d(x, w, b, **conv).shape, device=device)
    grad_out = torch.randn(res.shape, device=device)
    ours = [t.clone().requires_grad_() for t in (x, w, b, res)]
    ref = [t.detach().double().cpu().requires_grad_() for t in (x, w, b, res)]
    out, g_ours = run_or_skip_unsupported(lambda: _grads(
        lambda x, w, b, r: convkit.conv2d(x, w, b, **conv, activation=activation, residual=r), ours, grad_out))
    _, g_ref = _grads(lambda x, w, b, r: ACTS[activation](F.conv2d(x, w, b, **conv) + r), ref, grad_out.cpu())
    for got, want, what in zip(g_ours, g_ref, ("x", "w", "bias", "residual")):
        assert got.shape == want.shape, what
        torch.testing.assert_close(got.double().cpu(), want, rtol=1e-4, atol=1e-4, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("memory_format", MEMORY_FORMATS, ids=["nchw", "nhwc"])
@pytest.mark.parametrize("cin,cout,groups,k", [(40, 70, 1, 3), (72, 132, 2, 3), (3, 16, 1, 7)])
def test_cpu_data_gradient_filters_past_one_block(cin, cout, groups, k, memory_format):
    """The CPU data gradient's flipped, transposed filters are copied in blocks of 32 input x 64 output channels
    a tap: channel counts past one block and off its sizes, groups, a stem's 7x7 (its input's gradient too)."""
    g = torch.Generator().manual_seed(cin + cout)
    x = torch.randn(2, cin, 9, 7, generator=g).contiguous(memory_format=memory_format)
    w = (torch.randn(cout, cin // groups, k, k, generator=g) / (cin * k) ** 0.5).contiguous(memory_format=memory_format)
    grad_out = torch.randn(2, cout, 9, 7, generator=g)
    ours = [t.clone().requires_grad_() for t in (x, w)]
    ref = [t.detach().double().requires_grad_() for t in (x, w)]
    _, g_ours = _grads(lambda x, w: convkit.conv2d(x, w, None, padding=k // 2, groups=groups), ours, grad_out)
    _, g_ref = _grads(lambda x, w: F.conv2d(x, w, None, padding=k // 2, groups=groups), ref, grad_out.double())
    for got, want, what in zip(g_ours, g_ref, ("x", "w")):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("memory_format", MEMORY_FORMATS, ids=["nchw", "nhwc"])
@pytest.mark.parametrize("name", ["c3_odd", "stride2_odd", "dilation2", "groups4", "depthwise", "pad_gt_half_r",
                                  "asymmetric"])
def test_per_sample_grads_match_float64_torch(name, memory_format, device):
    x, w1, _, conv = make_case(EDGE_SET[name], device, memory_format=memory_format, seed=4)
    n = x.shape[0]
    g = torch.Generator().manual_seed(6)
    w = torch.randn(n, *w1.shape, generator=g).to(device)
    b = torch.randn(n, w1.shape[0], generator=g).to(device)
    ours = [t.clone().requires_grad_() for t in (x, w, b)]
    ref = [t.detach().double().cpu().requires_grad_() for t in (x, w, b)]

    def ref_fn(x, w, b):
        return F.gelu(torch.cat([F.conv2d(x[i:i + 1], w[i], b[i], **conv) for i in range(x.shape[0])]))

    grad_out = torch.randn(ref_fn(*[t.detach() for t in ref]).shape, dtype=torch.float64)
    out, g_ours = run_or_skip_unsupported(lambda: _grads(
        lambda x, w, b: convkit.conv2d_per_sample(x, w, b, **conv, activation="gelu"), ours, grad_out.to(device)))
    _, g_ref = _grads(ref_fn, ref, grad_out)
    for got, want, what in zip(g_ours, g_ref, ("x", "w", "bias")):
        torch.testing.assert_close(got.double().cpu(), want, rtol=1e-4, atol=1e-4, msg=lambda m: f"{what}: {m}")


def test_aten_backward_mode_agrees(monkeypatch):
    x, w, b, conv = make_case(EDGE_SET["groups4"], seed=8)
    grads = {}
    for mode in ("convkit", "aten"):
        monkeypatch.setattr(convkit._autograd, "BACKWARD", mode)
        ts = [t.clone().requires_grad_() for t in (x, w, b)]
        convkit.conv2d(*ts, **conv, activation="silu").square().sum().backward()
        grads[mode] = [t.grad for t in ts]
    for a, c in zip(grads["convkit"], grads["aten"]):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-4)


def test_example_op_grads():
    a = torch.randn(7, dtype=torch.float64, requires_grad=True)
    b = torch.randn(7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(convkit.vector_add, (a, b))
    assert torch.autograd.gradcheck(convkit.silu, (a,))
    values = torch.randn(5, dtype=torch.float64, requires_grad=True)
    dense = torch.randn(4, dtype=torch.float64, requires_grad=True)
    row_ptr = torch.tensor([0, 2, 2, 5])
    col_idx = torch.tensor([0, 3, 1, 2, 3])
    assert torch.autograd.gradcheck(lambda v, d: convkit.csr_matvec(v, row_ptr, col_idx, d), (values, dense))


@pytest.mark.parametrize("device", DEVICES)
def test_calls_without_a_gradient_skip_autograd_and_match(device):
    # convkit.conv2d and conv2d_per_sample dispatch below autograd when nothing can record a gradient (no_grad,
    # or no input requiring grad): the same values, no graph; with a weight requiring grad, the autograd path.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 6, 6, generator=g).to(device)
    w = torch.randn(4, 4, 3, 3, generator=g).to(device)
    ref = F.conv2d(x, w, padding=1)
    with torch.no_grad():
        y0 = convkit.conv2d(x, w, padding=1)
    y1 = convkit.conv2d(x, w, padding=1)
    for y in (y0, y1):
        assert not y.requires_grad and y.grad_fn is None
        torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
    wg = w.clone().requires_grad_(True)
    y2 = convkit.conv2d(x, wg, padding=1)
    assert y2.requires_grad and y2.grad_fn is not None
    y2.sum().backward()
    torch.testing.assert_close(wg.grad, torch.autograd.grad(F.conv2d(x, wg, padding=1).sum(), wg)[0],
                               rtol=1e-3, atol=1e-3)
    # A result computed without autograd can still feed a graph later.
    (y0 * wg.sum()).sum().backward()
    ws = torch.randn(2, 4, 4, 3, 3, generator=g).to(device)
    with torch.no_grad():
        p = convkit.conv2d_per_sample(x, ws, padding=1)
    assert p.grad_fn is None
    torch.testing.assert_close(p[1], F.conv2d(x[1:2], ws[1], padding=1)[0], rtol=1e-4, atol=1e-4)


def _leaf_grads(fn, inputs, grad_out):
    leaves = [t.detach().clone().requires_grad_(t.requires_grad) if t is not None else None for t in inputs]
    fn(*leaves).backward(grad_out)
    return [t.grad if t is not None else None for t in leaves]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["none", "relu", "silu", "gelu"])
def test_eager_function_path_matches_the_registered_autograd(device, activation):
    # In grad mode convkit.conv2d / conv2d_per_sample run the op's backward formula as a C++ autograd Function
    # (no torch.library Python autograd kernel in front: ~70 us a call less on the CPU);
    # torch.ops.convkit.* called directly goes through the registered autograd. Both give the
    # same values and bit-identical gradients (they run the same convolutions), through bias, residual and the
    # activation.
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 4, 7, 6, generator=g).to(device).requires_grad_(True)
    w = torch.randn(6, 2, 3, 3, generator=g).to(device).requires_grad_(True)
    b = torch.randn(6, generator=g).to(device).requires_grad_(True)
    r = torch.randn(2, 6, 4, 3, generator=g).to(device).requires_grad_(True)
    conv = dict(stride=2, padding=1, dilation=1, groups=2)
    y = convkit.conv2d(x, w, b, **conv, activation=activation, residual=r)
    assert "Conv2dGrad" in y.grad_fn.name()  # (convkit::_conv2d_autograd's C++ Function)
    gout = torch.randn(y.shape, generator=g).to(device)
    fast = _leaf_grads(lambda *t: convkit.conv2d(t[0], t[1], t[2], **conv, activation=activation, residual=t[3]),
                  (x, w, b, r), gout)
    reg = _leaf_grads(lambda *t: torch.ops.convkit.conv2d(t[0], t[1], t[2], [2, 2], [1, 1], [1, 1], 2, activation,
                                                     t[3], "auto"), (x, w, b, r), gout)
    for a, e in zip(fast, reg):
        assert torch.equal(a, e)
    # A residual without a bias (the C++ Function's inputs shift by one), stride 1 (the data gradient by convkit).
    conv1 = dict(stride=1, padding=1, dilation=1, groups=2)
    r1 = torch.randn(2, 6, 7, 6, generator=g).to(device).requires_grad_(True)
    gout1 = torch.randn(r1.shape, generator=g).to(device)
    fast = _leaf_grads(lambda *t: convkit.conv2d(t[0], t[1], None, **conv1, activation=activation, residual=t[2]),
                       (x, w, r1), gout1)
    reg = _leaf_grads(lambda *t: torch.ops.convkit.conv2d(t[0], t[1], None, [1, 1], [1, 1], [1, 1], 2, activation,
                                                          t[2], "auto"), (x, w, r1), gout1)
    for a, e in zip(fast, reg):
        assert torch.equal(a, e)
    # Only some inputs requiring grad: the others get none.
    xd = x.detach()
    convkit.conv2d(xd, w, None, **conv, activation=activation).sum().backward()
    assert xd.grad is None and w.grad is not None
    ws = torch.randn(2, 6, 2, 3, 3, generator=g).to(device).requires_grad_(True)
    bs = torch.randn(2, 6, generator=g).to(device).requires_grad_(True)
    p = convkit.conv2d_per_sample(x, ws, bs, stride=2, padding=1, groups=2, activation=activation)
    assert "PerSampleGrad" in p.grad_fn.name()
    pout = torch.randn(p.shape, generator=g).to(device)
    fast = _leaf_grads(lambda *t: convkit.conv2d_per_sample(t[0], t[1], t[2], stride=2, padding=1, groups=2,
                                                       activation=activation), (x, ws, bs), pout)
    reg = _leaf_grads(lambda *t: torch.ops.convkit.conv2d_per_sample(t[0], t[1], t[2], [2, 2], [1, 1], [1, 1], 2,
                                                                activation), (x, ws, bs), pout)
    for a, e in zip(fast, reg):
        assert torch.equal(a, e)


@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_through_the_cpp_function(device):
    # Under create_graph=True the backward's own convolutions record a graph (through the op's autograd), so
    # a gradient of a gradient matches PyTorch's.
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 4, 6, 6, generator=g).to(device).requires_grad_(True)
    w = torch.randn(4, 4, 3, 3, generator=g).to(device).requires_grad_(True)

    def second(f):
        gx, = torch.autograd.grad(f(x, w).square().sum(), x, create_graph=True)
        return torch.autograd.grad(gx.square().sum(), w)[0]

    got = second(lambda a, b: convkit.conv2d(a, b, padding=1))
    want = second(lambda a, b: F.conv2d(a, b, padding=1))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


@pytest.mark.parametrize("device", DEVICES)
def test_one_backward_under_torch_compile(device):
    # torch.compile traces the registered autograd, which calls the same C++ backward (convkit::_conv2d_backward)
    # as the eager C++ Function: Inductor's gradients equal eager's within fp32 rounding, through bias, residual,
    # a recomputed activation, stride 2 (the aten data gradient) and stride 1 (convkit's).
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 4, 9, 8, generator=g).to(device)
    w1 = torch.randn(6, 4, 3, 3, generator=g).to(device)
    b1 = torch.randn(6, generator=g).to(device)
    w2 = torch.randn(6, 6, 3, 3, generator=g).to(device)

    def step(x, w1, b1, w2):
        y = convkit.conv2d(x, w1, b1, stride=2, padding=1, activation="gelu")
        return convkit.conv2d(y, w2, None, padding=1, activation="silu", residual=y).square().mean()

    eager = _leaf_grads(step, [t.requires_grad_(True) for t in (x, w1, b1, w2)], torch.tensor(1.0, device=device))
    compiled = _leaf_grads(torch.compile(step, fullgraph=True), (x, w1, b1, w2), torch.tensor(1.0, device=device))
    for e, c in zip(eager, compiled):
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-5)


def test_functorch_vmap_runs_and_grad_says_it_cannot():
    # docs/pytorch.md, "functorch": vmap works over the op; torch.func.grad raises a clear RuntimeError (a C++
    # autograd Function; torch.library's Python registration could not either), never a wrong gradient.
    x = torch.randn(3, 2, 5, 5)
    w = torch.randn(4, 2, 3, 3)
    y = torch.func.vmap(lambda s: convkit.conv2d(s[None], w, padding=1)[0])(x)
    torch.testing.assert_close(y, F.conv2d(x, w, padding=1), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="functorch"):
        torch.func.grad(lambda s: convkit.conv2d(s, w, padding=1).sum())(x[:1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["none", "silu", "gelu", "hardswish"])
def test_output_changed_in_place_after_the_forward(activation, device, torch_strict_fp32):
    # torch's convolution keeps no output for its backward, so `F.relu(conv(x), inplace=True)` (VGG's nn.ReLU(
    # inplace=True) after a convolution, timm's squeeze-excitation) trains; convkit's Functions keep the output only
    # for the activations whose derivative reads it (relu, relu6, sigmoid, hardsigmoid), so this works too.
    # (torch_strict_fp32: torch in IEEE fp32 on CUDA, not TF32.)
    torch.manual_seed(3)
    x = torch.randn(2, 4, 6, 5, device=device)
    w, b = torch.randn(6, 4, 3, 3, device=device), torch.randn(6, device=device)
    act = {"none": lambda t: t, "silu": F.silu, "gelu": F.gelu, "hardswish": F.hardswish}[activation]
    grads = []
    for run in ("convkit", "torch", "per_sample"):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        if run == "convkit":
            y = convkit.conv2d(xs, ws, bs, padding=1, activation=activation)
        elif run == "torch":
            y = act(F.conv2d(xs, ws, bs, padding=1))
        else:  # the same filter for every sample
            y = convkit.conv2d_per_sample(xs, ws.expand(2, -1, -1, -1, -1), bs.expand(2, -1), padding=1,
                                          activation=activation)
        F.relu(y, inplace=True).sum().backward()
        grads.append([t.grad for t in (xs, ws, bs)])
    for got in (grads[0], grads[2]):
        for g, want in zip(got, grads[1]):
            torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-4)
    # relu keeps its output for the backward, as torch's relu does: an in-place change after it is refused
    xs = x.clone().requires_grad_()
    y = convkit.conv2d(xs, w, b, padding=1, activation="relu")
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["none", "relu", "sigmoid", "silu"])
def test_residual_changed_in_place_after_the_forward(activation, device, torch_strict_fp32):
    # The residual is kept for the backward only where z is recomputed (silu, gelu, hardswish), as torch's add
    # keeps nothing: changing it in place after the forward is fine otherwise, and refused there.
    torch.manual_seed(4)
    x, r = torch.randn(2, 4, 6, 5, device=device), torch.randn(2, 6, 6, 5, device=device)
    w, b = torch.randn(6, 4, 3, 3, device=device), torch.randn(6, device=device)
    act = {"none": lambda t: t, "relu": F.relu, "sigmoid": torch.sigmoid, "silu": F.silu}[activation]
    grads = []
    for run in ("convkit", "torch"):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        rs = r.clone()
        y = (convkit.conv2d(xs, ws, bs, padding=1, activation=activation, residual=rs) if run == "convkit" else
             act(F.conv2d(xs, ws, bs, padding=1) + rs))
        rs.mul_(3)
        if run == "convkit" and activation == "silu":
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                y.sum().backward()
            return
        y.sum().backward()
        grads.append([t.grad for t in (xs, ws, bs)])
    for g, want in zip(*grads):
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-4)
