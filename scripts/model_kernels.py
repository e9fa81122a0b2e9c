"""Each GPU kernel of a fused torchvision model's forward, in launch order, with its median time; and the
kernel-by-kernel difference of two such runs (say, two heuristics or two commits).

    python scripts/model_kernels.py --model efficientnet_b0 [--batch 32] [--dtype bf16] --json A.json
    python scripts/model_kernels.py --diff A.json B.json

The model is bench_models.py's (random init, random BatchNorm statistics, eval), run as convkit.fuse(model)
(bf16 channels_last or f32 NCHW). Ten forwards run under torch.profiler (CUDA activity) after five warm-up
ones; each launch position's time is the median over the ten. Unlike a kernel benchmark, every kernel sees
the L2 its neighbours leave and the epilogue its layer has. The whole-model CUDA-graph time is
bench_models.py --variants graph. --diff prints the positions whose kernel or time (by more than 1 us)
differ, and both sums.
"""
import argparse
import json
import statistics
import sys

RUNS = 10


def kernels(model_name, batch, dt):
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    import convkit
    from bench_models import make_model

    dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[dt]
    fmt = torch.channels_last if dt == "bf16" else torch.contiguous_format
    m = make_model(model_name).to(device="cuda", dtype=dtype, memory_format=fmt)
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
    fused = convkit.fuse(m, memory_format=fmt)
    with torch.no_grad():
        for _ in range(5):
            fused(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(RUNS):
                fused(x)
            torch.cuda.synchronize()
    ev = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)
    if len(ev) % RUNS:
        raise RuntimeError(f"{len(ev)} kernels in {RUNS} forwards: not the same launches each time.")
    n = len(ev) // RUNS
    return [[ev[i].name, statistics.median(ev[r * n + i].time_range.elapsed_us() for r in range(RUNS))]
            for i in range(n)]


def short(name):
    return name.split("(anonymous namespace)::")[-1].split("::")[-1][:60]


def diff(a_path, b_path):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    print(f"{a_path}: {len(a)} kernels, {sum(t for _, t in a) / 1000:.3f} ms; "
          f"{b_path}: {len(b)} kernels, {sum(t for _, t in b) / 1000:.3f} ms")
    if len(a) != len(b):
        print("different launch counts: positions after the first difference do not correspond")
    print(f"{'#':>4} {'A us':>8} {'B us':>8} {'B-A':>7}  kernel A | kernel B")
    for i, ((na, ta), (nb, tb)) in enumerate(zip(a, b)):
        if na != nb or abs(ta - tb) > 1.0:
            print(f"{i:4d} {ta:8.1f} {tb:8.1f} {tb - ta:+7.1f}  {short(na)} | {short(nb)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--json", help="write [[kernel, median us], ...] here")
    ap.add_argument("--diff", nargs=2, metavar=("A", "B"), help="compare two --json files")
    args = ap.parse_args()
    if args.diff:
        diff(*args.diff)
        return
    rows = kernels(args.model, args.batch, args.dtype)
    for i, (name, us) in enumerate(rows):
        print(f"{i:4d} {us:8.1f}  {short(name)}")
    print(f"{args.model} {args.dtype} n{args.batch}: {len(rows)} kernels, {sum(t for _, t in rows) / 1000:.3f} ms")
    if args.json:
        json.dump(rows, open(args.json, "w"))


if __name__ == "__main__":
    sys.exit(main())
