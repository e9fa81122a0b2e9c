#!/usr/bin/env python3
"""PyTorch's own cuDNN figures on this GPU, to check convkit's `cudnn` peer against (shared/ANCHORS.md).

Prints one line per problem: the median time of F.conv2d with torch.backends.cudnn.benchmark = True
(triton.testing.do_bench, L2 flushed between runs), fp32 with TF32 OFF, NCHW by default, for the seed
shapes and the 3x3 layers of ResNet-50 (bench/shapes/*.txt). Optionally also the ceilings (copy
bandwidth, SGEMM rate) and, given convkit bench JSON files, the ratio of convkit's cudnn peer to PyTorch
(the peer should be within ~10%).

  python3 scripts/torch_anchor.py [--suites "seeds resnet50"] [--all-layers] [--dtype f32|tf32|f16|bf16]
                                  [--layout nchw|nhwc] [--ceilings] [--compare bench_seeds.json ...]
"""
import argparse
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_spec(spec):
    """The Conv2dProblem::parse() string form, e.g. n16c64h56w56k64r3s3p0 (s defaults to r)."""
    keys = dict(n=1, c=1, h=1, w=1, k=1, r=1, p=0, u=1, d=1, g=1)
    seen = {}
    for key, val in re.findall(r"([a-z]+)(\d+)", spec):
        seen[key] = int(val)
    keys.update({k: v for k, v in seen.items() if k in keys})
    keys["s"] = seen.get("s", keys["r"])
    keys["ph"] = seen.get("ph", keys["p"])
    keys["pw"] = seen.get("pw", keys["p"])
    keys["uh"] = seen.get("uh", keys["u"])
    keys["uw"] = seen.get("uw", keys["u"])
    keys["dh"] = seen.get("dh", keys["d"])
    keys["dw"] = seen.get("dw", keys["d"])
    return keys


def read_suite(name):
    path = name if os.path.isfile(name) else os.path.join(ROOT, "bench", "shapes", name + ".txt")
    out = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) == 1:
                out.append((parts[0], parts[0]))
            else:
                out.append((parts[0], parts[1]))
    return out


def flops(p):
    P = (p["h"] + 2 * p["ph"] - p["dh"] * (p["r"] - 1) - 1) // p["uh"] + 1
    Q = (p["w"] + 2 * p["pw"] - p["dw"] * (p["s"] - 1) - 1) // p["uw"] + 1
    return 2.0 * p["n"] * P * Q * p["k"] * (p["c"] // p["g"]) * p["r"] * p["s"]


def make_timer(torch):
    try:
        from triton.testing import do_bench

        def bench(fn):
            return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

        return bench, "triton.testing.do_bench median"
    except Exception:  # no triton: CUDA events with our own L2 flush
        cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")

        def bench(fn):
            for _ in range(5):
                fn()
            times = []
            for _ in range(50):
                cache.zero_()
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
            times.sort()
            return times[len(times) // 2]

        return bench, "CUDA events median (triton not importable)"


def ceilings(torch, bench):
    n = 1 << 30  # 1 GiB copied: bytes read + written counted
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = bench(lambda: b.copy_(a))
    print(f"ceiling copy                 {2 * n / (ms * 1e-3) / 1e12:8.2f} TB/s  ({ms:.4f} ms for 1 GiB)")
    del a, b
    m = 8192
    x = torch.randn(m, m, device="cuda")
    y = torch.randn(m, m, device="cuda")
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        ms = bench(lambda: x @ y)
        print(f"ceiling sgemm 8192^3 {'tf32' if tf32 else 'fp32'}    {2 * m**3 / (ms * 1e-3) / 1e12:8.1f} TFLOP/s ({ms:.3f} ms)")
    torch.backends.cuda.matmul.allow_tf32 = False


def find_cudnn_times(path):
    """convkit bench JSON -> {problem name or spec: ms} for the cudnn peer; tolerant of the exact schema."""
    try:
        with open(path) as f:
            data = json.load(f)
    except Exception as e:  # noqa: BLE001
        print(f"# cannot read {path}: {e}")
        return {}
    found = {}

    def visit(o):
        if isinstance(o, dict):
            algo = o.get("algo", o.get("algorithm", o.get("name_algo")))
            if algo == "cudnn":
                ms = None
                for key in ("median_ms", "ms", "time_ms", "median"):
                    if isinstance(o.get(key), (int, float)):
                        ms = float(o[key])
                        break
                names = [o.get(k) for k in ("problem_name", "name", "problem", "spec") if isinstance(o.get(k), str)]
                if ms is not None and names:
                    for nm in names:
                        found[nm] = ms
            for v in o.values():
                visit(v)
        elif isinstance(o, list):
            for v in o:
                visit(v)

    visit(data)
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suites", default="seeds resnet50")
    ap.add_argument("--all-layers", action="store_true", help="every layer, not only seeds and 3x3 layers")
    ap.add_argument("--dtype", default="f32", choices=["f32", "tf32", "f16", "bf16"])
    ap.add_argument("--layout", default="nchw", choices=["nchw", "nhwc"])
    ap.add_argument("--ceilings", action="store_true", help="also the copy bandwidth and SGEMM rate")
    ap.add_argument("--compare", nargs="*", default=[], help="convkit bench JSON files: cudnn peer vs PyTorch")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("torch_anchor: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = args.dtype == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = False
    dt = {"f32": torch.float32, "tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    fmt = torch.channels_last if args.layout == "nhwc" else torch.contiguous_format
    bench, how = make_timer(torch)
    print(f"# PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}, "
          f"{args.dtype} {args.layout}, benchmark=True, {how}")
    if args.ceilings:
        ceilings(torch, bench)

    results = {}
    for suite in args.suites.split():
        for name, spec in read_suite(suite):
            p = parse_spec(spec)
            if suite != "seeds" and not args.all_layers and not (p["r"] == 3 and p["s"] == 3):
                continue
            x = torch.randn(p["n"], p["c"], p["h"], p["w"], device="cuda", dtype=dt).to(memory_format=fmt)
            w = torch.randn(p["k"], p["c"] // p["g"], p["r"], p["s"], device="cuda", dtype=dt).to(memory_format=fmt)
            conv = lambda: F.conv2d(x, w, None, (p["uh"], p["uw"]), (p["ph"], p["pw"]), (p["dh"], p["dw"]), p["g"])  # noqa: E731
            conv()
            torch.cuda.synchronize()
            ms = bench(conv)
            results[name] = (spec, ms)
            print(f"torch_cudnn {name:28s} {spec:30s} {ms:9.4f} ms {flops(p) / (ms * 1e-3) / 1e12:7.1f} TFLOP/s")
            del x, w
    if args.compare:
        ours = {}
        for path in args.compare:
            ours.update(find_cudnn_times(path))
        if not ours:
            print("# compare: no cudnn rows found in " + " ".join(args.compare))
        ratios = []
        for name, (spec, ms) in results.items():
            mine = ours.get(name, ours.get(spec))
            if mine is None:
                continue
            r = mine / ms
            ratios.append(r)
            flag = "" if r <= 1.10 else "   <-- convkit's cudnn peer is >10% slower than PyTorch's cuDNN"
            print(f"compare {name:28s} convkit cudnn {mine:9.4f} ms / torch {ms:9.4f} ms = {r:5.2f}{flag}")
        if ratios:
            g = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            print(f"compare geomean convkit-cudnn / torch-cudnn = {g:.3f} over {len(ratios)} problems")
    return 0


if __name__ == "__main__":
    sys.exit(main())
