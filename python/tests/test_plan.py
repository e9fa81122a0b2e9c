"""`convkit plan` (the CLI) and convkit.plan (Python) are one planner: they give the same plan (algorithm, variant,
layout, workspace, source and every algorithm's verdict) for every problem of bench/shapes/edge.txt, in every
dtype and layout, on every device here. The CLI is found through $CONVKIT_CLI (scripts/test.sh and
scripts/gpu_check.sh set it) or in build/tools/convkit.
"""
import os
import pathlib
import subprocess

import pytest
import torch

import convkit
from convkit import _C

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def cli_path():
    for p in (os.environ.get("CONVKIT_CLI"), ROOT / "build" / "tools" / "convkit"):
        if p and pathlib.Path(p).is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def edge_problems():
    out = []
    for line in (ROOT / "bench" / "shapes" / "edge.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, spec = line.split()[:2]
            out.append((name, spec))
    return out


def cli_plan(cli, spec, dtype, layout, device, algo="auto", activation="none"):
    r = subprocess.run([cli, "plan", "--problem", spec, "--dtype", dtype, "--layout", layout, "--device", device,
                        "--algo", algo, "--activation", activation], capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 2), r.stderr
    fields, verdicts, listing = {}, [], False
    for line in r.stdout.splitlines():
        if line.startswith("every "):
            listing = True
        elif listing and line.startswith("  "):
            name, answer = line.strip().split(None, 1)
            verdicts.append((name, answer.replace("  <- chosen", "")))
        elif not listing and line[:10].strip():
            fields[line[:10].strip()] = line[10:]
    return r.returncode, fields, verdicts


@pytest.mark.skipif(cli_path() is None, reason="the convkit CLI is not built here (set CONVKIT_CLI)")
@pytest.mark.parametrize("device", DEVICES)
def test_cli_and_python_plan_agree_on_the_edge_suite(device):
    cli = cli_path()
    dtypes = ["f32", "tf32", "f16", "bf16"] if device == "cuda" else ["f32"]
    checked = 0
    for _, spec in edge_problems():
        for dtype in dtypes:
            for layout in ("nchw", "nhwc"):
                dt = "f32" if dtype == "tf32" else dtype
                algo = "auto/tf32" if dtype == "tf32" else "auto"
                code, f, verdicts = cli_plan(cli, spec, dtype, layout, device)
                try:
                    alg, lay, variant, source, ws, py_verdicts, own = _C.plan(spec, dt, layout, device, algo)
                except NotImplementedError:
                    assert code == 2 and f["algorithm"].startswith("none"), (spec, dtype, layout, f)
                    continue
                where = f"{spec} {dtype} {layout} {device}"
                assert code == 0, where
                assert f["algorithm"] == alg, where
                cli_variant = f["variant"]
                if cli_variant.endswith("(its own choice)"):
                    assert own == cli_variant[:-len(" (its own choice)")], where
                    cli_variant = ""
                elif cli_variant == "-":
                    assert own == "", where
                    cli_variant = ""
                assert cli_variant == variant, where
                assert f["layout"].split()[0] == lay, where
                assert f["workspace"] == f"{ws} bytes", where
                assert f["source"] == source, where
                assert verdicts == [tuple(v) for v in py_verdicts], where
                checked += 1
    assert checked > 0


@pytest.mark.skipif(cli_path() is None, reason="the convkit CLI is not built here (set CONVKIT_CLI)")
@pytest.mark.parametrize("device", DEVICES)
def test_cli_and_python_plan_agree_with_an_activation(device):
    """The heuristic weighs the epilogue's activation (on CUDA, 1x1 layers of few channels with SiLU or sigmoid
    go to cuda_pointwise_mma): the CLI's --activation and Python's activation= give the same plan."""
    cli = cli_path()
    dtype, layout = ("bf16", "nhwc") if device == "cuda" else ("f32", "nchw")
    chosen = {}
    # (16 -> 192: a 1x1 layer of few input channels that no exact-width tile of cuda_igemm_wgmma holds, so the
    # pointwise kernel's SiLU rule applies; 16 -> 96 goes to the 96-wide tile with any activation)
    for spec in ("n2c16h28w28k192r1s1", "n2c384h14w14k1536r1s1"):
        for act in ("none", "relu6", "silu", "sigmoid"):
            code, f, verdicts = cli_plan(cli, spec, dtype, layout, device, activation=act)
            alg, lay, variant, source, ws, py_verdicts, own = _C.plan(spec, dtype, layout, device, "auto", act)
            assert code == 0 and f["algorithm"] == alg, (spec, act)
            assert verdicts == [tuple(v) for v in py_verdicts], (spec, act)
            chosen[spec, act] = alg
    if device == "cuda" and "cuda_pointwise_mma" in dict(py_verdicts):
        assert chosen["n2c16h28w28k192r1s1", "silu"] == "cuda_pointwise_mma"
        assert chosen["n2c16h28w28k192r1s1", "relu6"] != "cuda_pointwise_mma"
        assert chosen["n2c384h14w14k1536r1s1", "silu"] != "cuda_pointwise_mma"
    x, w = torch.randn(2, 16, 8, 8), torch.randn(32, 16, 1, 1)
    assert convkit.plan(x, w, activation="silu").algorithm == convkit.plan(x, w).algorithm  # (the CPU: no rule)
    with pytest.raises(ValueError, match="unknown activation"):
        convkit.plan(x, w, activation="swish")


def test_plan_names_the_variant_an_algorithm_picks_itself():
    x, w = torch.randn(2, 16, 8, 8), torch.randn(32, 16, 3, 3)
    p = convkit.plan(x, w, padding=1, algo="cpu_winograd")
    assert p.variant == "" and p.own_variant  # none named; the algorithm's own choice is said
    named = convkit.plan(x, w, padding=1, algo=f"cpu_winograd[{p.own_variant}]")
    assert named.variant == p.own_variant and named.own_variant == ""
    assert convkit.plan(x, w, padding=1, algo="cpu_ref").own_variant == ""  # (no variants)


def test_plan_reports_workspace_and_every_verdict():
    x = torch.randn(2, 4, 9, 9)
    w = torch.randn(6, 4, 3, 3)
    p = convkit.plan(x, w, padding=1)
    assert p.source == "heuristic"
    assert p.workspace_bytes >= 0
    names = [name for name, _ in p.verdicts]
    assert p.algorithm in names and "cpu_ref" in names
    assert dict(p.verdicts)[p.algorithm] == "chosen"
    assert "it runs per-sample weights only" in dict(p.verdicts)["cpu_per_sample"]
    for name, answer in p.verdicts:
        assert answer, name


def test_cpu_float32_gemm_names_the_library_and_the_import_warns_only_for_generic_openblas(monkeypatch):
    """convkit._C.cpu_float32_gemm() names the float32 GEMM of the CPU algorithms (OpenBLAS's or oneDNN's) and
    why; the import-time warning fires for an OpenBLAS that did not recognise the CPU, and only then."""
    import warnings

    why = _C.cpu_float32_gemm()
    assert isinstance(why, str)
    if why:  # (empty only in a build with neither library)
        assert "OpenBLAS" in why or "oneDNN" in why, why
    monkeypatch.setattr(_C, "cpu_float32_gemm", lambda: "OpenBLAS: OpenBLAS did not recognise this CPU and runs "
                        "its Prescott kernels, older than the CPU's AVX2; no oneDNN in this build")
    with pytest.warns(RuntimeWarning, match="OPENBLAS_CORETYPE"):
        convkit._warn_if_openblas_is_generic()
    for fine in ("OpenBLAS (SkylakeX kernels)", "oneDNN's dnnl_sgemm: OpenBLAS did not recognise this CPU and runs "
                 "its Prescott kernels, older than the CPU's AVX2"):
        monkeypatch.setattr(_C, "cpu_float32_gemm", lambda: fine)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            convkit._warn_if_openblas_is_generic()
