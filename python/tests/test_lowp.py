"""float16 / bfloat16 (and fp32 with "/tf32"), on the CPU (cpu_im2col_gemm and cpu_ref serve 16-bit there: the
autograd and layout logic in 16 bits is checked in CI) and on CUDA when a GPU is present (the tensor-core kernels).

Bounds are norm-wise, ||got - ref|| / ||ref||, against F.conv2d in float64 on the CPU of the very same 16-bit
inputs (so input rounding is not counted), with their reasons:
  * forward, f16 and bf16: 1e-2 (DESIGN.md). The kernels accumulate in fp32 and round the output once; one
    rounding costs at most 2^-8 (bf16) or 2^-11 (f16) relative per element, about 2e-3 norm-wise for bf16.
  * backward, bf16: 2e-2, looser: each gradient is a convolution whose result is rounded to bf16 like a forward,
    but its inputs are themselves rounded results (gz through silu is computed in bf16 elementwise), the weight
    gradient sums N*P*Q products per element (a split reduction may round partial sums), and the bias gradient
    is a bf16 sum; 2e-2 keeps a margin of about 5x over what these roundings can add.
  * fp32 "/tf32": 1e-3 (DESIGN.md): operands rounded to TF32 (10-bit mantissa) before the product.
Shapes: the edge set (odd sizes, groups, depthwise, 1x1, 7x7 stride 2, padding > R/2: where tensor-core kernels
may decline and another kernel serves) plus tensor-core friendly ones (channels a multiple of 16).
"""
import pytest
import torch
import torch.nn.functional as F

import convkit
from conftest import DEVICES, EDGE_SET, make_case, rel_err, run_or_skip_unsupported

ACTS = {"none": lambda t: t, "relu": F.relu, "silu": F.silu, "gelu": F.gelu}
LOWP = {"f16": torch.float16, "bf16": torch.bfloat16}
FORMATS = {"nchw": torch.contiguous_format, "nhwc": torch.channels_last}
TC_SHAPES = {  # N, C, H, W, K, R, S, stride, padding, dilation, groups
    "tc_3x3": (2, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1),
    "tc_1x1_to_256": (2, 64, 7, 9, 256, 1, 1, 1, 0, 1, 1),
    "tc_3x3_s2": (2, 32, 15, 15, 64, 3, 3, 2, 1, 1, 1),
}
SHAPES = {**EDGE_SET, **TC_SHAPES}
FWD_BOUND, BWD_BOUND, TF32_BOUND = 1e-2, 2e-2, 1e-3


def _operands(name, device, dtype, memory_format, seed, requires_grad=False):
    """x, w, b, residual; the weight in the activation's memory format, as convkit.nn stores it."""
    x, w, b, conv = make_case(SHAPES[name], device, dtype, memory_format, seed=seed)
    w = w.contiguous(memory_format=memory_format)
    out_shape = F.conv2d(x.float().cpu(), w.float().cpu(), **conv).shape
    g = torch.Generator().manual_seed(seed + 100)
    res = torch.randn(out_shape, generator=g).to(device, dtype).contiguous(memory_format=memory_format)
    ts = [x, w, b, res]
    if requires_grad:
        ts = [t.detach().clone().requires_grad_() for t in ts]
    return ts, conv


def _reference(x, w, b, res, conv, activation):
    d = [t.detach().double().cpu() for t in (x, w, b, res)]
    return ACTS[activation](F.conv2d(d[0], d[1], d[2], **conv) + d[3])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("memory_format", list(FORMATS.values()), ids=list(FORMATS))
@pytest.mark.parametrize("dtype", list(LOWP.values()), ids=list(LOWP))
@pytest.mark.parametrize("name", list(SHAPES))
def test_lowp_forward(name, dtype, memory_format, device):
    (x, w, b, res), conv = _operands(name, device, dtype, memory_format, seed=20)
    y = run_or_skip_unsupported(lambda: convkit.conv2d(x, w, b, **conv, activation="relu", residual=res))
    assert y.dtype == dtype and y.device == x.device
    # NCHW input: the result comes back NCHW even when it was computed in NHWC (one transform each way)
    assert y.is_contiguous(memory_format=memory_format)
    assert torch.isfinite(y).all()
    err = rel_err(y, _reference(x, w, b, res, conv, "relu"))
    assert err <= FWD_BOUND, f"{name}: relative error {err:.3g} > {FWD_BOUND}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(LOWP.values()), ids=list(LOWP))
def test_lowp_nchw_and_nhwc_agree(dtype, device):
    (x, w, b, res), conv = _operands("tc_3x3", device, dtype, torch.channels_last, seed=21)
    y_nhwc = run_or_skip_unsupported(lambda: convkit.conv2d(x, w, b, **conv, residual=res))
    y_nchw = convkit.conv2d(x.contiguous(), w.contiguous(), b, **conv, residual=res.contiguous())
    assert y_nchw.is_contiguous() and y_nhwc.is_contiguous(memory_format=torch.channels_last)
    assert rel_err(y_nchw, y_nhwc) <= FWD_BOUND


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["relu", "silu"])
@pytest.mark.parametrize("memory_format", list(FORMATS.values()), ids=list(FORMATS))
@pytest.mark.parametrize("name", ["c3_odd", "stride2_odd", "groups4", "depthwise", "pad_gt_half_r", "1x1",
                                  "tc_1x1_to_256", "tc_3x3", "tc_3x3_s2"])
def test_bf16_backward(name, memory_format, activation, device):
    ts, conv = _operands(name, device, torch.bfloat16, memory_format, seed=22, requires_grad=True)
    g = torch.Generator().manual_seed(23)
    ref_ts = [t.detach().double().cpu().requires_grad_() for t in ts]
    rx, rw, rb, rres = ref_ts
    ref_out = ACTS[activation](F.conv2d(rx, rw, rb, **conv) + rres)
    grad_out = torch.randn(ref_out.shape, generator=g).to(torch.bfloat16)
    ref_grads = torch.autograd.grad(ref_out, ref_ts, grad_out.double())

    def ours():
        out = convkit.conv2d(*ts[:3], **conv, activation=activation, residual=ts[3])
        return torch.autograd.grad(out, ts, grad_out.to(device).contiguous(memory_format=memory_format))

    grads = run_or_skip_unsupported(ours)
    for got, want, t, what in zip(grads, ref_grads, ts, ("x", "w", "bias", "residual")):
        assert got.dtype == torch.bfloat16 and got.shape == t.shape, what
        err = rel_err(got, want)
        assert err <= BWD_BOUND, f"{name} d{what}: relative error {err:.3g} > {BWD_BOUND}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="TF32 is a CUDA math mode (no CPU kernel takes it)")
@pytest.mark.parametrize("memory_format", list(FORMATS.values()), ids=list(FORMATS))
@pytest.mark.parametrize("name", ["c3_odd", "tc_3x3", "tc_1x1_to_256", "tc_3x3_s2"])
def test_tf32_forward(name, memory_format):
    (x, w, b, res), conv = _operands(name, "cuda", torch.float32, memory_format, seed=24)
    y = run_or_skip_unsupported(lambda: convkit.conv2d(x, w, b, **conv, residual=res, algo="auto/tf32"))
    assert y.is_contiguous(memory_format=memory_format)
    err = rel_err(y, _reference(x, w, b, res, conv, "none"))
    assert err <= TF32_BOUND, f"{name}: relative error {err:.3g} > {TF32_BOUND}"


COPY_OPS = ("aten::copy_", "aten::clone", "aten::contiguous", "aten::_to_copy", "aten::to")


@pytest.mark.filterwarnings("ignore:.*Profiler clears events")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(LOWP.values()), ids=list(LOWP))
def test_channels_last_lowp_reaches_the_library_without_copies(dtype, device):
    (x, w, b, res), conv = _operands("tc_3x3", device, dtype, torch.channels_last, seed=25)
    run_or_skip_unsupported(lambda: convkit.conv2d(x, w, b, **conv, residual=res))  # warm-up
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        convkit.conv2d(x, w, b, **conv, activation="relu", residual=res)
    if device == "cuda":
        torch.cuda.synchronize()
    assert [e.key for e in prof.key_averages() if e.key in COPY_OPS] == []
