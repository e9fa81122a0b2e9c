"""The benchmark scripts of scripts/ start (their --help), and bench_host.py runs on the CPU: the GPU runs of
these scripts are the perf ledger's, and a script that no longer parses would only be found there."""
import pathlib
import subprocess
import sys

import pytest

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"


@pytest.mark.parametrize("name", ["bench_host.py", "bench_models.py", "bench_backward.py"])
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
