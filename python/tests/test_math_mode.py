"""convkit's float32 is strict fp32 unless the algo says "/tf32", including where its backward falls back to
aten.convolution_backward, and channels_last tensors reach the library without copies. CPU-runnable guards:
the fallback is spied on (the precision settings in force inside it are recorded), so CI catches a fallback
that would run with PyTorch's default (TF32 on cuDNN) even on a machine without a GPU.
"""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import convkit
import convkit._autograd as ag
from conftest import EDGE_SET, make_case

CUDNN_CONV = torch.backends.cudnn.conv
MKLDNN_CONV = torch.backends.mkldnn.conv


@pytest.fixture(autouse=True)
def restore_precision_settings():
    """Each test may change the settings; put PyTorch's state back as it was (legacy flag first: its setter
    writes the conv and rnn precisions too)."""
    legacy = torch.backends.cudnn.allow_tf32
    saved = (CUDNN_CONV.fp32_precision, torch.backends.cudnn.rnn.fp32_precision, MKLDNN_CONV.fp32_precision)
    yield
    torch.backends.cudnn.allow_tf32 = legacy
    CUDNN_CONV.fp32_precision, torch.backends.cudnn.rnn.fp32_precision, MKLDNN_CONV.fp32_precision = saved


@pytest.fixture
def spy(monkeypatch):
    """Wraps the fallback's aten.convolution_backward; records the precision settings seen at each call."""
    seen = []
    real = ag._aten_convolution_backward

    def wrapped(*args):
        if type(args[0]) is not torch.Tensor:  # tracing (fake/functional tensors): record only real calls
            wrapped.traced += 1
        else:
            seen.append((CUDNN_CONV.fp32_precision, MKLDNN_CONV.fp32_precision))
        if getattr(wrapped, "fail", False):
            raise RuntimeError("injected failure")
        return real(*args)

    monkeypatch.setattr(ag, "_aten_convolution_backward", wrapped)
    wrapped.seen = seen
    wrapped.traced = 0
    return wrapped


def _fallback_case(name="stride2_odd", memory_format=torch.contiguous_format):
    # stride 2 (and padding beyond the filter's reach) take the aten fallback for the data gradient
    x, w, b, conv = make_case(EDGE_SET[name], memory_format=memory_format, seed=11)
    return [t.clone().requires_grad_() for t in (x, w, b)], conv


@pytest.mark.parametrize("name", ["stride2_odd", "pad_gt_half_r", "7x7_stride2_batch1"])
def test_fallback_runs_strict_fp32(spy, name):
    CUDNN_CONV.fp32_precision = "tf32"   # PyTorch's default for cuDNN convolutions
    MKLDNN_CONV.fp32_precision = "bf16"  # lossy oneDNN math, as a user might have set it
    (x, w, b), conv = _fallback_case(name)
    convkit.conv2d(x, w, b, **conv).square().sum().backward()
    assert spy.seen and all(s == ("ieee", "ieee") for s in spy.seen), spy.seen
    assert (CUDNN_CONV.fp32_precision, MKLDNN_CONV.fp32_precision) == ("tf32", "bf16")  # restored
    assert x.grad is not None and w.grad is not None


def test_fallback_allows_tf32_when_the_algo_asks(spy):
    CUDNN_CONV.fp32_precision = "ieee"
    MKLDNN_CONV.fp32_precision = "bf16"
    x, w, _, conv = make_case(EDGE_SET["stride2_odd"], seed=12)
    gz = torch.randn(F.conv2d(x, w, **conv).shape)
    for tf32, want in ((True, "tf32"), (False, "ieee")):
        gx, gw = torch.ops.convkit._aten_conv_grads(gz, x, w, [2, 2], [1, 1], [1, 1], 1, False, True, True, tf32)
        assert spy.seen[-1] == (want, "ieee")
        with ag.strict_conv_math():
            ref = torch.ops.aten.convolution_backward(gz, x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1,
                                                      [True, True, False])
        torch.testing.assert_close(gx, ref[0])
        torch.testing.assert_close(gw, ref[1])
    assert (CUDNN_CONV.fp32_precision, MKLDNN_CONV.fp32_precision) == ("ieee", "bf16")


def test_fallback_restores_settings_on_error(spy):
    CUDNN_CONV.fp32_precision = "tf32"
    MKLDNN_CONV.fp32_precision = "tf32"
    spy.fail = True
    (x, w, b), conv = _fallback_case()
    out = convkit.conv2d(x, w, b, **conv).sum()
    with pytest.raises(RuntimeError, match="injected failure"):
        out.backward()
    assert spy.seen == [("ieee", "ieee")]
    assert (CUDNN_CONV.fp32_precision, MKLDNN_CONV.fp32_precision) == ("tf32", "tf32")


@pytest.mark.parametrize("legacy", [True, False])
def test_fallback_leaves_legacy_flag_readable(spy, legacy):
    # Mixing the legacy flag and the per-op precisions makes reading torch.backends.cudnn.allow_tf32 raise
    # ("a mix of the legacy and new APIs"): the fallback must leave no such mix behind.
    torch.backends.cudnn.allow_tf32 = legacy
    MKLDNN_CONV.fp32_precision = "bf16"
    (x, w, b), conv = _fallback_case()
    convkit.conv2d(x, w, b, **conv).sum().backward()
    # allow_tf32=True: "tf32" is switched to "ieee" and back; False: "none" already means no TF32, left alone
    assert spy.seen == [("ieee" if legacy else "none", "ieee")]
    assert torch.backends.cudnn.allow_tf32 is legacy


@pytest.mark.parametrize("per_sample", [False, True])
def test_aten_mode_and_not_implemented_fallback_are_strict(spy, monkeypatch, per_sample):
    # BACKWARD = "aten" (the debugging aid) and the whole-backward fallback use the same strict path.
    monkeypatch.setattr(ag, "BACKWARD", "aten")
    CUDNN_CONV.fp32_precision = "tf32"
    MKLDNN_CONV.fp32_precision = "none"  # "none" (nothing set) is strict already: left alone
    x, w1, b1, conv = make_case(EDGE_SET["groups4"], seed=13)
    if per_sample:
        w = torch.randn(x.shape[0], *w1.shape).requires_grad_()
        b = torch.randn(x.shape[0], w1.shape[0]).requires_grad_()
        x = x.clone().requires_grad_()
        convkit.conv2d_per_sample(x, w, b, **conv).square().sum().backward()
    else:
        x, w, b = (t.clone().requires_grad_() for t in (x, w1, b1))
        convkit.conv2d(x, w, b, **conv).square().sum().backward()
    assert spy.seen == [("ieee", "none")]
    assert w.grad.shape == w.shape and x.grad.shape == x.shape


def test_fallback_is_strict_under_torch_compile(spy, backend="aot_eager"):
    # AOTAutograd traces the backward; the precision must be set when the compiled graph runs, not only while
    # tracing. The fallback is the opaque op convkit::_aten_conv_grads, so the spy runs at run time.
    # (backend="inductor" passes too, checked by hand on 2026-11-29; it costs ~35 s of compiling on 2 cores.)
    torch._dynamo.reset()
    CUDNN_CONV.fp32_precision = "tf32"
    MKLDNN_CONV.fp32_precision = "bf16"
    torch.manual_seed(0)
    conv = convkit.nn.Conv2d(4, 6, 3, stride=2, padding=1)
    x = torch.randn(2, 4, 9, 9, requires_grad=True)
    conv(x).square().mean().backward()
    want = [x.grad.clone()] + [p.grad.clone() for p in conv.parameters()]
    x.grad = None
    conv.zero_grad()
    spy.seen.clear()
    step = torch.compile(lambda x: conv(x).square().mean(), fullgraph=True, backend=backend)
    for _ in range(2):
        x.grad = None
        conv.zero_grad()
        step(x).backward()
    # one call per run, at run time; a traced aten op would run outside the spy and with TF32
    assert spy.seen == [("ieee", "ieee")] * 2 and spy.traced == 0
    assert (CUDNN_CONV.fp32_precision, MKLDNN_CONV.fp32_precision) == ("tf32", "bf16")
    got = [x.grad] + [p.grad for p in conv.parameters()]
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()


# ---- channels_last reaches the library without copies ------------------------------------------------------

COPY_OPS = ("aten::copy_", "aten::clone", "aten::contiguous", "aten::_to_copy", "aten::to")


def _copies(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return [e.key for e in prof.key_averages() if e.key in COPY_OPS]


@pytest.mark.filterwarnings("ignore:.*Profiler clears events")
def test_channels_last_operands_are_not_copied():
    cl = torch.channels_last
    x, w, b, conv = make_case(EDGE_SET["groups4"], memory_format=cl, seed=14)
    res = torch.randn(F.conv2d(x, w, b, **conv).shape).contiguous(memory_format=cl)
    w_cl = w.contiguous(memory_format=cl)
    assert _copies(lambda: convkit.conv2d(x, w_cl, b, **conv, activation="relu", residual=res)) == []
    # the detector works: a contiguous (KCRS) weight is copied to KRSC for a channels_last x, every call
    assert _copies(lambda: convkit.conv2d(x, w, b, **conv)) != []
    # NCHW x with a KCRS weight: nothing to copy either
    xc = x.contiguous()
    assert _copies(lambda: convkit.conv2d(xc, w, b, **conv)) == []


@pytest.mark.filterwarnings("ignore:.*Profiler clears events")
def test_modules_store_channels_last_weights():
    cl = torch.channels_last
    model = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, bias=False))
    x = torch.randn(2, 8, 12, 12).contiguous(memory_format=cl)
    want = model(x)

    plain = convkit.nn.convert(copy.deepcopy(model))  # contiguous weights stay contiguous
    assert all(m.weight.is_contiguous() for m in plain.modules() if isinstance(m, nn.Conv2d))

    asked = convkit.nn.convert(copy.deepcopy(model), memory_format=cl)
    kept = convkit.nn.convert(copy.deepcopy(model).to(memory_format=cl))  # a channels_last model stays so
    for conv_model in (asked, kept):
        convs = [m for m in conv_model.modules() if isinstance(m, nn.Conv2d)]
        assert all(type(m) is convkit.nn.Conv2d for m in convs)
        assert all(m.weight.is_contiguous(memory_format=cl) and not m.weight.is_contiguous() for m in convs)
        torch.testing.assert_close(conv_model(x), want, rtol=1e-5, atol=1e-5)
        assert _copies(lambda: conv_model(x)) == []

    m = convkit.nn.Conv2dAct(8, 8, 3, padding=1, activation="relu", memory_format=cl)
    assert m.weight.is_contiguous(memory_format=cl) and m.activation == "relu"
    # training a channels_last module: gradients arrive, the weight keeps its format
    asked(x).square().mean().backward()
    for mod in asked.modules():
        if isinstance(mod, nn.Conv2d):
            assert mod.weight.grad is not None and mod.weight.grad.shape == mod.weight.shape
            assert mod.weight.is_contiguous(memory_format=cl)
