"""The op and convkit.plan honour the library's selection (docs/tuning.md): the tune cache for "auto", tuning on
first sight for "autotune", "name[variant]", and a damaged cache file as a warning, never an error.

Isolation: every test points CONVKIT_TUNE_CACHE at a file of its own (the `cache` fixture). The library reads the
variable on every selection and keeps one cache object per path (loaded on first use, warnings once per path and
process), so setting it in-process is enough: no subprocess needed. Each test also uses a problem shape of its
own, since the CONVKIT_LOG=dispatch line and the op's "first autotune" bookkeeping are per (problem, config).
"""
import pickle

import pytest
import torch

import convkit
from conftest import rel_err

HEADER = "convkit-tune-cache v1"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "tune-v1.txt"
    monkeypatch.setenv("CONVKIT_TUNE_CACHE", str(path))
    return path


def entries(path):
    """The cache file's entries, each the list of its 12 tab-separated fields."""
    lines = path.read_text().splitlines()
    assert lines[0] == HEADER
    return [line.split("\t") for line in lines[1:] if line and not line.startswith("#")]


def case(c, h, k, device="cpu", dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, c, h, h, generator=g, dtype=torch.float64)
    w = torch.randn(k, c, 3, 3, generator=g, dtype=torch.float64) / (9 * c) ** 0.5
    b = torch.randn(k, generator=g, dtype=torch.float64)
    ref = torch.nn.functional.conv2d(x, w, b, padding=1)
    return x.to(device, dtype), w.to(device, dtype), b.to(device, dtype), ref


def test_autotune_fills_the_cache_and_auto_then_uses_it(cache):
    x, w, b, ref = case(c=8, h=12, k=8)
    before = convkit.plan(x, w, padding=1)
    assert before.source == "heuristic" and before.layout == "nchw" and before.algorithm.startswith("cpu_")
    first = convkit.plan(x, w, padding=1, algo="autotune")
    assert first == ("", "nchw") and first.source == "autotune" and first.algo == ""

    y_auto = convkit.conv2d(x, w, b, padding=1)
    assert not cache.exists(), "auto must not write the cache"
    y_tuned = convkit.conv2d(x, w, b, padding=1, algo="autotune")
    # the winner may be another algorithm than the heuristic's: both within fp32 bounds of float64
    assert rel_err(y_tuned, ref) < 1e-5 and rel_err(y_auto, ref) < 1e-5
    assert rel_err(y_tuned, y_auto) < 1e-5

    (entry,) = entries(cache)
    assert len(entry) == 12
    assert entry[0] == "n1c8h12w12k8r3s3p1u1d1g1" and entry[1:5] == ["f32", "nchw", "strict", "cpu"]
    algorithm, variant = entry[8], ("" if entry[9] == "-" else entry[9])
    assert convkit.plan(x, w, padding=1, algo="auto") == (algorithm, "nchw")
    for algo in ("auto", "autotune"):
        after = convkit.plan(x, w, padding=1, algo=algo)
        assert (after.algorithm, after.variant, after.source) == (algorithm, variant, "tune cache")

    # both now run the stored winner; the second "autotune" does not tune again (the entry is unchanged)
    text = cache.read_text()
    assert torch.equal(convkit.conv2d(x, w, b, padding=1), y_tuned)
    assert torch.equal(convkit.conv2d(x, w, b, padding=1, algo="autotune"), y_tuned)
    assert cache.read_text() == text


def write_entry_like(src_entry, path, algorithm, variant="-"):
    """A cache file holding `src_entry`'s key (this machine's device name, driver and version) for `algorithm`."""
    e = list(src_entry)
    e[8], e[9] = algorithm, variant
    path.write_text(HEADER + "\n# written by test_tune.py\n" + "\t".join(e) + "\n")


def test_auto_runs_the_cache_entry(cache, tmp_path, monkeypatch, capfd):
    x, w, b, ref = case(c=4, h=10, k=6)
    convkit.conv2d(x, w, b, padding=1, algo="autotune")  # an entry with this machine's key fields
    (tuned,) = entries(cache)
    # a cache that names the reference for this problem: the heuristic never picks it, so seeing it proves use
    pinned = tmp_path / "pinned.txt"
    write_entry_like(tuned, pinned, "cpu_ref")
    monkeypatch.setenv("CONVKIT_TUNE_CACHE", str(pinned))
    monkeypatch.setenv("CONVKIT_LOG", "dispatch")
    capfd.readouterr()
    y = convkit.conv2d(x, w, b, padding=1)
    err = capfd.readouterr().err
    assert "n1c4h10w10k6r3s3p1u1d1g1 f32/nchw/cpu -> cpu_ref" in err and "from tune cache" in err, err
    assert torch.equal(y, convkit.conv2d(x, w, b, padding=1, algo="cpu_ref"))
    assert rel_err(y, ref) < 1e-5
    p = convkit.plan(x, w, padding=1)
    assert (p.algorithm, p.variant, p.source, p.algo) == ("cpu_ref", "", "tune cache", "cpu_ref")


def test_unusable_entry_falls_back_and_autotune_replaces_it(cache, monkeypatch, capfd):
    x, w, b, ref = case(c=5, h=9, k=7)
    convkit.conv2d(x, w, b, padding=1, algo="autotune")
    (tuned,) = entries(cache)
    stale = cache.parent / "unusable.txt"
    write_entry_like(tuned, stale, "cpu_direct", "no-such-variant")  # CPU algorithms have no variants
    monkeypatch.setenv("CONVKIT_TUNE_CACHE", str(stale))
    capfd.readouterr()
    assert convkit.plan(x, w, padding=1).source == "heuristic"
    y = convkit.conv2d(x, w, b, padding=1)
    assert rel_err(y, ref) < 1e-5
    err = capfd.readouterr().err
    assert "convkit: warning: tune cache" in err and "no-such-variant" in err, err
    y = convkit.conv2d(x, w, b, padding=1, algo="autotune")  # re-tunes and replaces the entry
    assert rel_err(y, ref) < 1e-5
    (replaced,) = entries(stale)
    assert replaced[8] != "cpu_direct" or replaced[9] == "-"
    assert convkit.plan(x, w, padding=1).source == "tune cache"


@pytest.mark.parametrize("content, h", [("this is not a tune cache\n", 7), (HEADER + "\nnot\tan\tentry\n", 8)],
                         ids=["foreign_header", "bad_line"])
def test_corrupt_cache_is_a_warning_not_an_error(content, h, cache, capfd):
    x, w, b, ref = case(c=3, h=h, k=5)
    cache.write_text(content)
    capfd.readouterr()
    assert convkit.plan(x, w, padding=1).source == "heuristic"
    assert rel_err(convkit.conv2d(x, w, b, padding=1), ref) < 1e-5
    assert rel_err(convkit.conv2d(x, w, b, padding=1, algo="autotune"), ref) < 1e-5
    err = capfd.readouterr().err
    assert f"convkit: warning: tune cache {cache}" in err, err
    assert err.count("convkit: warning:") == 1, err  # once per file and process
    if content.startswith(HEADER):  # a bad line is dropped on the next write; the new entry is stored
        (entry,) = entries(cache)
        assert entry[0].startswith("n1c3")
    else:  # a file that is not ours is never overwritten; the result stays in memory
        assert cache.read_text() == content
    assert convkit.plan(x, w, padding=1).source == "tune cache"


def test_algo_strings():
    x, w, b, ref = case(c=2, h=6, k=3)
    named = convkit.plan(x, w, padding=1, algo="cpu_direct")
    assert (named.algorithm, named.variant, named.source) == ("cpu_direct", "", "named")
    with pytest.raises(ValueError, match="has no variant 'v1'"):
        convkit.conv2d(x, w, b, padding=1, algo="cpu_direct[v1]")
    with pytest.raises(ValueError, match="has no variant 'v1'"):
        convkit.plan(x, w, padding=1, algo="cpu_direct[v1]")
    for algo in ("auto[v1]", "autotune[v1]"):
        with pytest.raises(ValueError, match="variant 'v1' needs a named algorithm"):
            convkit.conv2d(x, w, b, padding=1, algo=algo)
        with pytest.raises(ValueError, match="needs a named algorithm"):
            convkit.plan(x, w, padding=1, algo=algo)
    assert rel_err(convkit.conv2d(x, w, b, padding=1, algo="cpu_direct[]"), ref) < 1e-5  # empty: own choice
    p = convkit.plan(x, w, padding=1)
    assert "source='heuristic'" in repr(p) and p.algo == p.algorithm
    q = pickle.loads(pickle.dumps(p))
    assert q == p and (q.variant, q.source) == (p.variant, p.source)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_autotune_cuda_lowp(channels_last, cache):
    # f16 on CUDA: an NCHW x is computed in NHWC (the tensor-core kernels); autotune tunes the NHWC key and the
    # next calls run the stored algorithm and variant by name, with a workspace from PyTorch's allocator.
    x, w, b, ref = case(c=32, h=14 + channels_last, k=32, device="cuda", dtype=torch.float16)
    if channels_last:
        x, w = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
    assert convkit.plan(x, w, padding=1, algo="autotune").source == "autotune"
    y = convkit.conv2d(x, w, b, padding=1, algo="autotune")
    torch.cuda.synchronize()
    assert rel_err(y, ref) < 1e-2
    (entry,) = entries(cache)
    assert entry[1:5] == ["f16", "nhwc", "strict", "cuda"]
    p = convkit.plan(x, w, padding=1)
    assert (p.algorithm, p.layout, p.source) == (entry[8], "nhwc", "tune cache")
    assert p.variant == ("" if entry[9] == "-" else entry[9])
    for algo in ("auto", "autotune", p.algo):
        assert rel_err(convkit.conv2d(x, w, b, padding=1, algo=algo), ref) < 1e-2
    assert y.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def test_autotune_forward_tunes_the_backward_convolutions_too(cache):
    """algo="autotune" carries over to the convolutions of the backward pass (the data gradient; on the CPU the
    weight gradient is conv2d_backward_weight's GEMMs, not a convolution): each is tuned on first sight and
    lands in the cache next to the forward's entry."""
    x, w, b, _ = case(c=4, h=10, k=8, seed=3)
    x.requires_grad_(True)
    w.requires_grad_(True)
    convkit.conv2d(x, w, b, padding=1, algo="autotune").square().sum().backward()
    specs = [e[0] for e in entries(cache)]
    assert "n1c4h10w10k8r3s3p1u1d1g1" in specs  # the forward
    assert "n1c8h10w10k4r3s3p1u1d1g1" in specs  # the data gradient: gz with the flipped, transposed filters
    assert len(specs) == 2, specs  # (no convolution for the weight gradient)
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    torch.nn.functional.conv2d(x, w, b, padding=1).square().sum().backward()
    assert rel_err(gx, x.grad) < 1e-5 and rel_err(gw, w.grad) < 1e-5
