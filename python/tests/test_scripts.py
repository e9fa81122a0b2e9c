"""The benchmark scripts of scripts/ start (their --help), and bench_host.py runs on the CPU: the GPU runs of
these scripts are the perf ledger's, and a script that no longer parses would only be found there."""
import pathlib
import subprocess
import sys

import pytest

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"


@pytest.mark.parametrize("name", ["bench_host.py", "bench_models.py", "bench_backward.py", "bench_pointwise.py",
                                  "model_kernels.py", "bench_cpu_models.py", "bench_copy_floor.py",
                                  "fuse_coverage.py", "bench_activations.py"])
def test_the_script_starts(name):
    r = subprocess.run([sys.executable, str(SCRIPTS / name), "--help"], capture_output=True, text=True, timeout=120,
                       cwd=SCRIPTS)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout


def test_bench_host_times_the_cpu_path():
    pytest.importorskip("torchvision")
    r = subprocess.run([sys.executable, str(SCRIPTS / "bench_host.py"), "--device", "cpu", "--dtype", "f32",
                        "--calls", "3", "--layers", "2", "--profile"],
                       capture_output=True, text=True, timeout=300, cwd=SCRIPTS)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and "->" in line]
    assert len(rows) == 2, r.stdout
    assert "geomean module / torch" in r.stdout
    assert "convkit::conv2d" in r.stdout  # the profiler saw the op


@pytest.mark.parametrize("train", [False, True])
def test_bench_cpu_models_runs(train):
    """scripts/bench_cpu_models.py on a small model: a row with both times (and, for inference, both errors)."""
    pytest.importorskip("torchvision")
    args = ["--models", "resnet18", "--dtypes", "f32", "--hw", "32", "--rounds", "1"] + (["--train", "--batch", "2"]
                                                                                          if train else [])
    r = subprocess.run([sys.executable, str(SCRIPTS / "bench_cpu_models.py"), *args], capture_output=True, text=True,
                       timeout=300, cwd=SCRIPTS)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("| resnet18 | f32 |")]
    assert len(rows) == 1, r.stdout
    assert rows[0].count("|") == (6 if train else 8), rows[0]


def test_fuse_coverage_gives_a_row_a_model_and_a_row_for_a_failure():
    pytest.importorskip("torchvision")
    r = subprocess.run([sys.executable, str(SCRIPTS / "fuse_coverage.py"), "--models", "resnet18,no_such_model",
                        "--hw", "32"], capture_output=True, text=True, timeout=300, cwd=SCRIPTS)
    assert r.returncode == 1, r.stderr[-2000:]  # the failed model
    rows = {line.split(" | ")[0]: line for line in r.stdout.splitlines() if line.startswith("| ")}
    assert rows["| resnet18"].startswith("| resnet18 | 20 | 20 / 20 | 17 | 8 | - | "), r.stdout
    assert "error: AttributeError" in rows["| no_such_model"], r.stdout


def test_model_kernels_diff_lines_up_two_runs(tmp_path):
    """scripts/model_kernels.py --diff: the positions whose kernel or time differ, and both sums."""
    import json

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps([["void ns::(anonymous namespace)::k1<int>(X)", 10.0], ["k2", 5.0], ["k3", 2.0]]))
    b.write_text(json.dumps([["void ns::(anonymous namespace)::k1<int>(X)", 10.4], ["k9", 3.0], ["k3", 4.5]]))
    r = subprocess.run([sys.executable, str(SCRIPTS / "model_kernels.py"), "--diff", str(a), str(b)],
                       capture_output=True, text=True, timeout=120, cwd=SCRIPTS)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert "0.017 ms" in lines[0] and "0.018 ms" in lines[0]
    rows = [line.split() for line in lines[2:]]
    assert [row[0] for row in rows] == ["1", "2"]  # position 0 moved by 0.4 us only
    assert rows[0][3] == "-2.0" and rows[0][4] == "k2" and rows[0][6] == "k9"
    assert rows[1][3] == "+2.5"


def test_ab_compare_reads_bench_json(tmp_path):
    """scripts/ab_compare.py (the comparison of scripts/gpu_ab.sh) on two trees' bench files: the best convkit
    algorithm per problem, the ratio to the peer in each tree, B over A, and the geomeans."""
    import json

    def bench(path, times):
        rows = []
        for prob, (peer, algos) in times.items():
            rows.append(dict(problem=prob, algorithm="cudnn", is_peer=True, status="ok", median_ms=peer))
            rows += [dict(problem=prob, algorithm=a, status="ok", median_ms=ms) for a, ms in algos.items()]
        rows.append(dict(problem="p3", algorithm="x", status="error: no", median_ms=0.0))
        path.write_text(json.dumps(dict(rows=rows)))
        return str(path)

    a = bench(tmp_path / "a.json", {"p1": (1.0, {"x": 2.0, "y": 1.25}), "p2": (2.0, {"x": 2.0})})
    b = bench(tmp_path / "b.json", {"p1": (1.0, {"x": 1.0}), "p2": (2.0, {"x": 4.0})})
    r = subprocess.run([sys.executable, str(SCRIPTS / "ab_compare.py"), "--a", a, "--b", b], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = {line.split(" | ")[0].strip("| *").split("*")[0]: line for line in r.stdout.splitlines()
             if line.startswith("| ")}
    assert "0.80x" in lines["p1"] and "1.250x" in lines["p1"]  # A's best is y (1.25 ms); B 1.0 ms
    assert "0.500x" in lines["p2"]
    assert "p3" not in lines
    # geomeans: A x peer sqrt(0.8 * 1.0), B x peer sqrt(1.0 * 0.5), B / A sqrt(1.25 * 0.5)
    assert "**0.894x**" in lines["geomean"] and "**0.707x**" in lines["geomean"] and "**0.791x**" in lines["geomean"]


def test_the_weight_gradient_kernels_index_model_is_exact():
    # scripts/emulate_wgrad_mma.py: src/cuda/tc/wgrad_mma.cu's pieces, swizzle, ldmatrix.trans and mma layout
    pytest.importorskip("numpy")
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "emulate_wgrad_mma.py"
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_stem_kernels_index_model_is_exact():
    # scripts/emulate_stem_mma.py: src/cuda/tc/stem_mma.cu's plan, staged units, unit table, ldmatrix rows and
    # store, against a direct convolution on small integers (and an infinite pixel kept in its windows)
    pytest.importorskip("numpy")
    script = SCRIPTS / "emulate_stem_mma.py"
    r = subprocess.run([sys.executable, str(script), "10"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all exact" in r.stdout
