"""Whole torchvision models on the CPU through PyTorch and convkit.fuse, in one process.

    python scripts/bench_cpu_models.py [--models resnet50,mobilenet_v2] [--dtypes bf16,f32] [--hw 160]
                                       [--batch 1] [--rounds 7] [--compile] [--json out.json]
    python scripts/bench_cpu_models.py --train [--models resnet18,mobilenet_v2] [--batch 8] [--hw 64]

Models (random init, random BatchNorm statistics, eval): resnet50, mobilenet_v2, efficientnet_b0,
convnext_tiny, resnext50_32x4d by default; any torchvision model by name. bf16 runs channels_last (model and
input), f32 runs contiguous NCHW (and f32cl channels_last). Variants: eager PyTorch (oneDNN), convkit.fuse(m),
and with --compile torch.compile(m) (Inductor's C++ backend; minutes a model on a small machine). The timing
rounds alternate the variants (a round: 3 calls of each, the median call kept), so that a machine whose speed
drifts (a shared or throttled CPU) moves both alike; the row gives the median round. Each output's rel L2 is
against a float64 run of the same model on the same input. Markdown on stdout.
--train: a training step instead (forward, cross-entropy on 10 classes, backward, SGD; train mode, random
init) of the model on torch against convkit.nn.convert(model) (fuse is for inference), channels_last in both
dtypes, the same rounds.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch

import convkit

MODELS = ("resnet50", "mobilenet_v2", "efficientnet_b0", "convnext_tiny", "resnext50_32x4d")


def randomize_bn(m, gen):
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=gen) * 0.1)
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=gen) + 0.5)
                if mod.affine:
                    mod.weight.copy_(torch.rand(mod.weight.shape, generator=gen) + 0.5)
                    mod.bias.copy_(torch.randn(mod.bias.shape, generator=gen) * 0.1)
    return m


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def call_ms(fn, x, calls=3):
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(x)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def openblas_note():
    """OPENBLAS_CORETYPE as this process saw it: it decides OpenBLAS's kernels (AVX2 "Haswell" ones hold convkit's
    float32 CPU GEMMs to about half their AVX-512 speed; `convkit doctor` shows the kernels chosen)."""
    return f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}"


def train_rows(a):
    import torchvision

    print(f"### CPU training step, batch {a.batch}, {a.hw}x{a.hw}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, convkit {convkit.__version__}, {openblas_note()}\n")
    print("| model | dtype | torch ms | convkit.nn.convert ms | torch / convkit |")
    print("|---|---|---|---|---|")
    for name in a.models.split(","):
        for dts in a.dtypes.split(","):
            dtype = {"bf16": torch.bfloat16, "f32": torch.float32, "f32cl": torch.float32}[dts]
            torch.manual_seed(0)
            base = getattr(torchvision.models, name)(num_classes=10).to(dtype).to(memory_format=torch.channels_last)
            x = torch.randn(a.batch, 3, a.hw, a.hw, dtype=dtype).contiguous(memory_format=torch.channels_last)
            y = torch.randint(0, 10, (a.batch,))
            models = {"torch": copy.deepcopy(base),
                      "convkit": convkit.nn.convert(copy.deepcopy(base), memory_format=torch.channels_last)}
            opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in models.items()}

            def step(k, _x):
                opts[k].zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(models[k](_x).float(), y).backward()
                opts[k].step()

            for k in models:
                step(k, x)
                step(k, x)
            times = {k: [] for k in models}
            for _ in range(a.rounds):
                for k in models:
                    times[k].append(call_ms(lambda _x: step(k, _x), x, calls=1))
            ms = {k: statistics.median(v) for k, v in times.items()}
            print(f"| {name} | {dts} | {ms['torch']:.1f} | {ms['convkit']:.1f} | {ms['torch'] / ms['convkit']:.2f}x |",
                  flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--hw", type=int, default=160)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--train", action="store_true", help="a training step (convkit.nn.convert) instead")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.train:
        if a.models == ",".join(MODELS):
            a.models = "resnet18,mobilenet_v2"
        if a.hw == 160:
            a.hw = 64
        if a.batch == 1:
            a.batch = 8
        return train_rows(a)
    import torchvision

    print(f"### CPU, batch {a.batch}, {a.hw}x{a.hw}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"convkit {convkit.__version__}, {openblas_note()}\n")
    print("| model | dtype | torch ms | convkit.fuse ms | torch / fuse |" + (" compile ms |" if a.compile else "")
          + " rel L2 torch | rel L2 fuse |")
    print("|---|---|---|---|---|" + ("---|" if a.compile else "") + "---|---|")
    rows = []
    for name in a.models.split(","):
        gen = torch.Generator().manual_seed(0)
        base = randomize_bn(getattr(torchvision.models, name)(), gen).eval()
        x64 = torch.randn(a.batch, 3, a.hw, a.hw, generator=gen, dtype=torch.float64)
        with torch.no_grad():
            ref = copy.deepcopy(base).double()(x64)
        for dts in a.dtypes.split(","):
            dtype = {"bf16": torch.bfloat16, "f32": torch.float32, "f32cl": torch.float32}[dts]
            fmt = torch.channels_last if dts in ("bf16", "f32cl") else torch.contiguous_format
            model = copy.deepcopy(base).to(dtype=dtype, memory_format=fmt)
            x = x64.to(dtype).contiguous(memory_format=fmt)
            variants = {"torch": model, "fuse": convkit.fuse(model)}
            if a.compile:
                variants["compile"] = torch.compile(model)
            with torch.no_grad():
                outs = {k: f(x) for k, f in variants.items()}  # (compiles, warms up)
                for f in variants.values():
                    f(x)
                times = {k: [] for k in variants}
                for _ in range(a.rounds):
                    for k, f in variants.items():
                        times[k].append(call_ms(f, x))
            ms = {k: statistics.median(v) for k, v in times.items()}
            err = {k: rel_l2(o.float(), ref) for k, o in outs.items()}
            row = dict(model=name, dtype=dts, ms=ms, rel_l2=err)
            rows.append(row)
            print(f"| {name} | {dts} | {ms['torch']:.2f} | {ms['fuse']:.2f} | {ms['torch'] / ms['fuse']:.2f}x |"
                  + (f" {ms['compile']:.2f} |" if a.compile else "")
                  + f" {err['torch']:.1e} | {err['fuse']:.1e} |", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
