import pytest
import torch
import torch._functorch.config
import torch._inductor.config

import convkit  # noqa: F401  (registers torch.ops.convkit)

@pytest.fixture(autouse=True, scope="session")
def _no_user_tune_cache():
    """No test reads or writes the user's tune cache (~/.cache/convkit/tune-v1.txt): "auto" would otherwise run
    whatever `convkit tune` stored there. CONVKIT_TUNE_CACHE=off keeps entries in memory only; test_tune.py
    points it at a file of its own per test. (The library reads the variable on every selection, so changing
    it inside the process takes effect at once.)
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONVKIT_TUNE_CACHE", "off")
        yield


# torch.compile compiles afresh in the tests: Inductor's FX graph cache and AOTAutograd's cache key a graph by its
# ops, not by what convkit's C++ kernels behind them do, so an entry written by another build of the extension (an
# earlier checkout on the same machine) can replay its behaviour (seen with the CPU autocast rule: a bfloat16 graph
# cached by the build before it).
torch._inductor.config.fx_graph_cache = False
torch._functorch.config.enable_autograd_cache = False


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
MEMORY_FORMATS = [torch.contiguous_format, torch.channels_last]

# The edge set of the project (DESIGN.md): N, C, H, W, K, R, S, stride, padding, dilation, groups.
EDGE_SET = {
    "c3_odd": (2, 3, 11, 13, 8, 3, 3, 1, 1, 1, 1),
    "stride2_odd": (2, 5, 9, 7, 6, 3, 3, 2, 1, 1, 1),
    "dilation2": (1, 4, 10, 10, 6, 3, 3, 1, 2, 2, 1),
    "groups4": (2, 8, 8, 8, 12, 3, 3, 1, 1, 1, 4),
    "depthwise": (2, 6, 9, 9, 6, 3, 3, 1, 1, 1, 6),
    "1x1": (2, 16, 7, 7, 8, 1, 1, 1, 0, 1, 1),
    "7x7_stride2_batch1": (1, 3, 16, 16, 8, 7, 7, 2, 3, 1, 1),
    "pad_gt_half_r": (2, 4, 6, 6, 5, 3, 3, 1, 3, 1, 1),
    "asymmetric": (2, 3, 9, 10, 4, 3, 2, (1, 2), (0, 1), (2, 1), 1),
}


@pytest.fixture
def torch_strict_fp32():
    """PyTorch's own float32 convolutions and matmuls in strict IEEE fp32 while the test runs.

    A float32 torch computation on CUDA is NOT a strict reference by default: cuDNN convolutions may use TF32
    (torch.backends.cudnn.conv.fp32_precision defaults to "tf32"), about 1e-3 relative error. Tests that
    compare against torch in float32 on CUDA use this fixture; the others compare against float64 on the CPU.
    """
    knobs = (torch.backends.cudnn.conv, torch.backends.cuda.matmul)
    saved = [k.fp32_precision for k in knobs]
    for k in knobs:
        k.fp32_precision = "ieee"
    yield
    for k, v in zip(knobs, saved):
        k.fp32_precision = v


def rel_err(got, want):
    """||got - want|| / ||want|| in float64 on the CPU (DESIGN.md's norm-wise error)."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return ((got - want).norm() / want.norm().clamp_min(1e-300)).item()


def cuda_only(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")


def make_case(case, device="cpu", dtype=torch.float32, memory_format=torch.contiguous_format, seed=0):
    n, c, h, w, k, r, s, stride, padding, dilation, groups = case
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g, dtype=torch.float64)
    wt = torch.randn(k, c // groups, r, s, generator=g, dtype=torch.float64) / (c // groups * r * s) ** 0.5
    b = torch.randn(k, generator=g, dtype=torch.float64)
    x = x.to(device=device, dtype=dtype).contiguous(memory_format=memory_format)
    wt = wt.to(device=device, dtype=dtype)
    b = b.to(device=device, dtype=dtype)
    return x, wt, b, dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


def run_or_skip_unsupported(fn):
    """Runs fn; a NotImplementedError (convkit has no kernel for this dtype/device yet) skips the test."""
    try:
        return fn()
    except NotImplementedError as e:
        pytest.skip(f"unsupported in this build: {str(e).splitlines()[0]}")
