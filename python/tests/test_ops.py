"""Forward agreement with PyTorch, and torch.library.opcheck on every op."""
import pytest
import torch
import torch.nn.functional as F

import convkit
from conftest import DEVICES, EDGE_SET, MEMORY_FORMATS, cuda_only, make_case, run_or_skip_unsupported

ACTS = {"none": lambda t: t, "relu": F.relu, "silu": F.silu, "gelu": F.gelu, "sigmoid": torch.sigmoid,
        "hardsigmoid": F.hardsigmoid}


def reference(x, w, b, conv, activation="none", residual=None):
    y = F.conv2d(x.double().cpu(), w.double().cpu(), None if b is None else b.double().cpu(), **conv)
    if residual is not None:
        y = y + residual.double().cpu()
    return ACTS[activation](y)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("memory_format", MEMORY_FORMATS, ids=["nchw", "nhwc"])
@pytest.mark.parametrize("name", list(EDGE_SET))
def test_conv2d_matches_F_conv2d(name, memory_format, device):
    x, w, b, conv = make_case(EDGE_SET[name], device, memory_format=memory_format)
    y = run_or_skip_unsupported(lambda: convkit.conv2d(x, w, b, **conv))
    want = reference(x, w, b, conv)
    assert y.shape == want.shape and y.dtype == x.dtype and y.device == x.device
    assert y.is_contiguous(memory_format=memory_format)
    torch.testing.assert_close(y.double().cpu(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("memory_format", MEMORY_FORMATS, ids=["nchw", "nhwc"])
@pytest.mark.parametrize("activation", list(ACTS))
def test_conv2d_fused_epilogue(activation, memory_format, device):
    x, w, b, conv = make_case(EDGE_SET["groups4"], device, memory_format=memory_format, seed=1)
    res = torch.randn(reference(x, w, b, conv).shape).to(device)
    y = run_or_skip_unsupported(lambda: convkit.conv2d(x, w, b, **conv, activation=activation, residual=res))
    torch.testing.assert_close(y.double().cpu(), reference(x, w, b, conv, activation, res), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_conv2d_exact_on_small_integers(device):
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-3, 4, (2, 5, 9, 9), generator=g).float().to(device)
    w = torch.randint(-3, 4, (7, 5, 3, 3), generator=g).float().to(device)
    y = run_or_skip_unsupported(lambda: convkit.conv2d(x, w, padding=1))
    assert torch.equal(y.cpu(), F.conv2d(x.cpu().double(), w.cpu().double(), padding=1).float())


@pytest.mark.parametrize("memory_format", MEMORY_FORMATS, ids=["nchw", "nhwc"])
def test_conv2d_named_winograd_cpu(memory_format):
    """cpu_winograd (approximate: run by name only) through the op, forward and backward: within its bound."""
    torch.manual_seed(3)
    x = torch.randn(2, 8, 13, 11).contiguous(memory_format=memory_format).requires_grad_()
    w = torch.randn(12, 8, 3, 3).contiguous(memory_format=memory_format).requires_grad_()
    b = torch.randn(12, requires_grad=True)
    y = convkit.conv2d(x, w, b, padding=1, activation="relu", algo="cpu_winograd")
    want = reference(x.detach(), w.detach(), b.detach(), {"padding": 1}, "relu")
    assert (y.double() - want).norm() / want.norm() < 1e-5
    assert convkit.plan(x, w, padding=1, algo="cpu_winograd").algorithm == "cpu_winograd"
    y.square().sum().backward()  # (the backward's convolutions run "auto": exact algorithms)
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, b))
    F.relu(F.conv2d(xr, wr, br, padding=1)).square().sum().backward()
    for got, ref in ((x.grad, xr.grad), (w.grad, wr.grad), (b.grad, br.grad)):
        assert (got.double() - ref).norm() / ref.norm() < 1e-4


def test_conv2d_noncontiguous_input_and_weight():
    x = torch.randn(2, 6, 10, 12)[:, ::2, :, 1:-1]  # neither contiguous nor channels_last
    w = torch.randn(3, 4, 3, 3).transpose(0, 1)     # [4, 3, 3, 3], non-contiguous
    y = convkit.conv2d(x, w, padding=1)
    torch.testing.assert_close(y, F.conv2d(x, w, padding=1), rtol=1e-5, atol=1e-5)
    assert y.is_contiguous()


def test_conv2d_empty_batch():
    y = convkit.conv2d(torch.randn(0, 3, 8, 8), torch.randn(4, 3, 3, 3))
    assert y.shape == (0, 4, 6, 6)


def per_sample_reference(x, w, b, conv, activation="none"):
    outs = []
    for i in range(x.shape[0]):
        outs.append(reference(x[i:i + 1], w[i], None if b is None else b[i], conv, activation))
    return torch.cat(outs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("memory_format", MEMORY_FORMATS, ids=["nchw", "nhwc"])
@pytest.mark.parametrize("name", ["c3_odd", "stride2_odd", "dilation2", "groups4", "depthwise", "asymmetric"])
def test_conv2d_per_sample_matches_loop(name, memory_format, device):
    x, w1, _, conv = make_case(EDGE_SET[name], device, memory_format=memory_format)
    n = x.shape[0]
    g = torch.Generator().manual_seed(5)
    w = torch.randn(n, *w1.shape, generator=g).to(device)
    b = torch.randn(n, w1.shape[0], generator=g).to(device)
    y = run_or_skip_unsupported(lambda: convkit.conv2d_per_sample(x, w, b, **conv, activation="relu"))
    assert y.is_contiguous(memory_format=memory_format)
    torch.testing.assert_close(y.double().cpu(), per_sample_reference(x, w, b, conv, "relu"), rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("device", DEVICES)
def test_example_ops(device):
    a = torch.randn(1000, device=device)
    b = torch.randn(1000, device=device)
    torch.testing.assert_close(convkit.vector_add(a, b), a + b)
    ai = torch.arange(10, device=device, dtype=torch.int32)
    assert torch.equal(convkit.vector_add(ai, ai), ai * 2)
    torch.testing.assert_close(convkit.silu(a), F.silu(a))
    torch.testing.assert_close(convkit.silu(a.double()), F.silu(a.double()))
    dense = torch.sparse_coo_tensor(torch.tensor([[0, 0, 2, 3, 3], [1, 4, 0, 2, 4]]),
                                    torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), (4, 5)).to_dense()
    csr = dense.to_sparse_csr()
    vec = torch.randn(5)
    for idx in (torch.int32, torch.int64):
        out = convkit.csr_matvec(csr.values().to(device), csr.crow_indices().to(device, idx),
                                 csr.col_indices().to(device, idx), vec.to(device))
        torch.testing.assert_close(out.cpu(), dense @ vec)
    big = torch.rand(300, 200) * (torch.rand(300, 200) < 0.1)
    c = big.to_sparse_csr()
    v = torch.randn(200)
    out = convkit.csr_matvec(c.values().to(device), c.crow_indices().to(device), c.col_indices().to(device),
                             v.to(device))
    torch.testing.assert_close(out.cpu(), big @ v, rtol=1e-5, atol=1e-5)


# ---- opcheck: schema, fake tensor, autograd registration, AOT dispatch --------------------------------------

def _opcheck(op, args):
    torch.library.opcheck(op, args, test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                                "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("memory_format", MEMORY_FORMATS, ids=["nchw", "nhwc"])
@pytest.mark.parametrize("with_grad", [False, True])
def test_opcheck_conv2d(with_grad, memory_format, device):
    cuda_only(device)
    x, w, b, _ = make_case((2, 4, 7, 7, 6, 3, 3, 1, 1, 1, 2), device, memory_format=memory_format)
    res = torch.randn(2, 6, 4, 4, device=device).contiguous(memory_format=memory_format)
    run_or_skip_unsupported(lambda: convkit.conv2d(x, w, b, groups=2))
    for t in (x, w, b, res):
        t.requires_grad_(with_grad)
    _opcheck(torch.ops.convkit.conv2d.default, (x, w, b, [2, 2], [1, 1], [1, 1], 2, "silu", res, "auto"))
    _opcheck(torch.ops.convkit.conv2d.default, (x, w, None, [1, 1], [0, 0], [2, 2], 2, "none", None, "auto"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_grad", [False, True])
def test_opcheck_per_sample(with_grad, device):
    x = torch.randn(3, 4, 6, 6, device=device, requires_grad=with_grad)
    w = torch.randn(3, 5, 4, 3, 3, device=device, requires_grad=with_grad)
    b = torch.randn(3, 5, device=device, requires_grad=with_grad)
    _opcheck(torch.ops.convkit.conv2d_per_sample.default, (x, w, b, [1, 1], [1, 1], [1, 1], 1, "gelu"))
    _opcheck(torch.ops.convkit.conv2d_per_sample.default, (x, w, None, [2, 2], [1, 1], [1, 1], 1, "relu"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_grad", [False, True])
def test_opcheck_example_ops(with_grad, device):
    a = torch.randn(33, 3, device=device, requires_grad=with_grad)
    b = torch.randn(33, 3, device=device, requires_grad=with_grad)
    _opcheck(torch.ops.convkit.vector_add.default, (a, b))
    _opcheck(torch.ops.convkit.silu.default, (a,))
    values = torch.randn(5, device=device, requires_grad=with_grad)
    dense = torch.randn(4, device=device, requires_grad=with_grad)
    row_ptr = torch.tensor([0, 2, 2, 5], device=device)
    col_idx = torch.tensor([0, 3, 1, 2, 3], device=device)
    _opcheck(torch.ops.convkit.csr_matvec.default, (values, row_ptr, col_idx, dense))


def test_plan_says_what_conv2d_runs():
    x = torch.randn(2, 8, 10, 10)
    w = torch.randn(16, 8, 3, 3)
    algo, layout = convkit.plan(x, w, padding=1)
    assert layout == "nchw" and algo.startswith("cpu_")
    assert convkit.plan(x.contiguous(memory_format=torch.channels_last), w, stride=2)[1] == "nhwc"
    assert convkit.plan(x, w, algo="cpu_ref") == ("cpu_ref", "nchw")
    assert convkit.plan(x, w, algo="autotune") == ("", "nchw")
    with pytest.raises(ValueError, match="unknown algorithm 'nope'"):
        convkit.plan(x, w, algo="nope")
    with pytest.raises(ValueError, match="padding must be non-negative"):
        convkit.plan(x, w, padding=-1)
    with pytest.raises(TypeError, match="float64"):
        convkit.plan(x.double(), w.double())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_plan_cuda_lowp_avoids_slow_nchw_kernels(dtype):
    # An NCHW 16-bit request computes in NHWC whenever the NHWC choice ranks before the NCHW one (tensor-core
    # kernels read NHWC only); either way the choice for NHWC is what runs for channels_last.
    x = torch.randn(2, 64, 14, 14, device="cuda", dtype=dtype)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=dtype)
    nhwc_algo, nhwc_layout = convkit.plan(x.contiguous(memory_format=torch.channels_last), w, padding=1)
    nchw_algo, nchw_layout = convkit.plan(x, w, padding=1)
    assert nhwc_layout == "nhwc"
    if nchw_layout == "nhwc":
        assert nchw_algo == nhwc_algo
    slow = ("_ref", "_naive")  # the references: never the choice for NCHW when NHWC has something faster
    assert not nchw_algo.endswith(slow) or nhwc_algo.endswith(slow), (nchw_algo, nhwc_algo)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_plan_cuda_fp32_channels_last_avoids_the_naive_kernel():
    # The mirror case: strict fp32 has fast kernels in NCHW only, so a channels_last fp32 request computes in
    # NCHW (a transform each way) and its output is still channels_last.
    x = torch.randn(2, 64, 14, 14, device="cuda").contiguous(memory_format=torch.channels_last)
    w = torch.randn(32, 64, 3, 3, device="cuda")
    algo, layout = convkit.plan(x, w, padding=1)
    assert layout == "nchw" and not algo.endswith(("_ref", "_naive")), (algo, layout)
    assert convkit.plan(x, w, padding=1, algo="cuda_direct_naive") == ("cuda_direct_naive", "nhwc")
    y = convkit.conv2d(x, w, padding=1)
    assert y.is_contiguous(memory_format=torch.channels_last)
    ref = F.conv2d(x.double(), w.double(), padding=1)  # (float64: F.conv2d's fp32 may use TF32 on CUDA)
    torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-4)

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("residual", [False, True])
def test_one_pixel_images_are_computed_in_place_of_a_transform(residual):
    # A [N, C, 1, 1] tensor (a squeeze-excitation block's pooled input) is contiguous in both memory formats,
    # so x's rule calls it NCHW, and a 16-bit NCHW request computes in NHWC. Its bytes are the same in both:
    # the op writes the output in place, with no buffer and no copy kernel, and keeps x's strides.
    x = torch.randn(4, 64, 1, 1, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(32, 64, 1, 1, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(32, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(4, 32, 1, 1, device="cuda", dtype=torch.bfloat16) if residual else None
    assert convkit.plan(x, w)[1] == "nhwc"
    with torch.no_grad():
        convkit.conv2d(x, w, b, activation="silu", residual=r)  # planned
        torch.cuda.synchronize()
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            y = convkit.conv2d(x, w, b, activation="silu", residual=r)
            torch.cuda.synchronize()
    kernels = [e.key for e in prof.key_averages() if e.self_device_time_total > 0]
    assert not [k for k in kernels if "copy" in k.lower() or "transpose" in k.lower()], kernels
    assert y.stride() == torch.empty(4, 32, 1, 1).stride()
    ref = F.silu(F.conv2d(x.double(), w.double(), b.double()) + (r.double() if residual else 0))
    torch.testing.assert_close(y.double(), ref, rtol=2e-2, atol=2e-2)



@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("memory_format", MEMORY_FORMATS, ids=["nchw", "nhwc"])
@pytest.mark.parametrize("per_sample", [False, True])
def test_opcheck_aten_fallback_op(per_sample, memory_format, device):
    # the backward's aten fallback (strict math, see test_math_mode.py) is an op of its own: fake vs real
    x, w, _, _ = make_case((2, 4, 7, 7, 6, 3, 3, 2, 1, 1, 2), device, memory_format=memory_format)
    w = w.contiguous(memory_format=memory_format)
    if per_sample:
        w = torch.stack([w, 2 * w])
    gz = torch.randn(2, 6, 4, 4, device=device).contiguous(memory_format=memory_format)
    for need_x, need_w in ((True, True), (True, False), (False, True)):
        _opcheck(torch.ops.convkit._aten_conv_grads.default,
                 (gz, x, w, [2, 2], [1, 1], [1, 1], 2, per_sample, need_x, need_w, False))
