"""The 1x1 layers of whole models, one at a time with their epilogues: convkit against what PyTorch runs.

    python scripts/bench_pointwise.py [--models convnext_tiny,mobilenet_v2,efficientnet_b0] [--batch 32]
                                      [--algos auto,autotune,...] [--no-torch] [--json out.json]

convnext_tiny: each distinct Linear of the CNBlocks on [N, H, W, C] bf16 activations, with what follows it in
the block: C -> 4C then GELU; 4C -> C then * layer_scale and + the block's input. convkit runs each as one
1x1 convolution with the epilogue (convkit.FusedLinear, what convkit.fuse makes of it); PyTorch as the
model does: eager (cuBLAS addmm, then gelu; addmm, mul, add) and torch.compile of the same function.
mobilenet_v2: each distinct 1x1 convolution of bench/shapes/mobilenet_v2.txt, bf16 channels_last, with its
epilogue: an expansion (K > C) + bias, relu6; a projection (K < C) + bias + a residual (the blocks that have
one). convkit.conv2d with the epilogue against cuDNN's convolution and the same ops, eager and compiled.
efficientnet_b0: the same for the 1x1 layers of bench/shapes/efficientnet_b0.txt (not the squeeze-excitation
ones on 1x1 images), the expansions with SiLU, the projections plain.
--algos: convkit runs each layer with every algo string given (a column each; "autotune" times the
candidates on its first call and keeps the winner, whose variant the plan column then shows; an algo that
refuses a layer is nan there, and the sum of its column is then nan too).
Each row: median ms (triton.testing.do_bench, L2 flushed between runs), convkit's plan (algorithm[variant]),
the memory floor (x, w, y and the residual once, at the 4.26 TB/s copy rate of ../shared/ANCHORS.md) and
the speed ratios (> 1: convkit faster). Markdown on stdout; exit status 0 whenever it ran, 2 without a GPU.
"""
import argparse
import json
import re
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import convkit

COPY_TBS = 4.26e12


def bench(fn):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def convnext_cases(batch):
    out = []
    for c, hw in ((96, 56), (192, 28), (384, 14), (768, 7)):
        out.append((f"cnx_linear_{c}to{4 * c}_gelu_{hw}", batch, hw, c, 4 * c, "gelu", False))
        out.append((f"cnx_linear_{4 * c}to{c}_scale_add_{hw}", batch, hw, 4 * c, c, "none", True))
    return out


def mbv2_cases(batch, suite="mobilenet_v2", expand_act="relu6", residuals=True):
    root = Path(__file__).resolve().parent.parent
    out = []
    for line in (root / f"bench/shapes/{suite}.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, spec = line.split()[:2]
        m = re.fullmatch(r"n(\d+)c(\d+)h(\d+)w(\d+)k(\d+)r1s1", spec)
        if not m:
            continue
        _, c, h, w, k = (int(v) for v in m.groups())
        assert h == w
        if h == 1:  # (a squeeze-excitation convolution)
            continue
        out.append((name, batch, h, c, k, expand_act if k > c else "none", residuals and k < c))
    return out


def run_case(name, n, hw, c, k, act, residual, is_linear, algos, with_torch=True):
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    w = (torch.randn(k, c, device=dev, generator=g) / c ** 0.5).to(dt)
    b = (torch.randn(k, device=dev, generator=g) * 0.1).to(dt)
    scale = (torch.rand(k, device=dev, generator=g) + 0.5).to(dt)
    if is_linear:
        x = torch.randn(n, hw, hw, c, device=dev, generator=g).to(dt)                 # [N, H, W, C]
        r = torch.randn(n, k, hw, hw, device=dev, generator=g).to(dt).contiguous(memory_format=torch.channels_last)
        mod = convkit.FusedLinear(c, k, nchw_out=residual, device=dev, dtype=dt, activation=act).eval()
        with torch.no_grad():
            sw, sb = (w.float() * scale.float()[:, None], b.float() * scale.float()) if residual else (w.float(), b.float())
            mod.weight.copy_(sw.to(dt).reshape(k, c, 1, 1))
            mod.bias.copy_(sb.to(dt))

        def torch_fn(x, r):
            y = F.linear(x, w, b)
            if act == "gelu":
                return F.gelu(y)
            return scale.view(k, 1, 1) * y.permute(0, 3, 1, 2) + r

        def ck_for(algo):  # (the algo set here, outside the timed calls)
            mod.algo = algo
            return lambda: mod(x, residual=r if residual else None)

        xp = x.permute(0, 3, 1, 2)
    else:
        x = torch.randn(n, c, hw, hw, device=dev, generator=g).to(dt).contiguous(memory_format=torch.channels_last)
        r = torch.randn(n, k, hw, hw, device=dev, generator=g).to(dt).contiguous(memory_format=torch.channels_last)
        w4 = w.reshape(k, c, 1, 1).contiguous(memory_format=torch.channels_last)

        def torch_fn(x, r):
            y = F.conv2d(x, w4, b)
            if act != "none":
                return F.relu6(y) if act == "relu6" else F.silu(y)
            return y + r if residual else y

        def ck_for(algo):
            return lambda: convkit.conv2d(x, w4, b, activation=act, residual=r if residual else None, algo=algo)

        xp = x
    w4c = w.reshape(k, c, 1, 1).contiguous(memory_format=torch.channels_last)
    row = dict(layer=name, epilogue=act + (" + scale + residual" if is_linear and residual else
                                           " + residual" if residual else ""), ms={}, plan={})
    with torch.no_grad():
        want = torch_fn(x, r)
        row["rel"] = 0.0
        for al in algos:
            try:  # an algo that refuses this layer is an n/a cell, not a lost row
                row["rel"] = max(row["rel"], rel(ck_for(al)(), want))
            except (NotImplementedError, ValueError) as e:
                row["ms"][al], row["plan"][al] = float("nan"), f"n/a: {str(e).splitlines()[0][:60]}"
                continue
            row["ms"][al] = bench(ck_for(al))
            p = convkit.plan(xp, w4c, algo=al, activation=act)
            row["plan"][al] = p.algo or p.algorithm
        if all(v != v for v in row["ms"].values()):
            raise ValueError("no algo ran: " + "; ".join(row["plan"].values()))
        row["eager_ms"] = row["compile_ms"] = float("nan")
        if with_torch:
            compiled = torch.compile(torch_fn)
            compiled(x, r)
            row["eager_ms"] = bench(lambda: torch_fn(x, r))
            row["compile_ms"] = bench(lambda: compiled(x, r))
    floor_bytes = 2 * (n * hw * hw * (c + k * (2 if residual else 1)) + k * c)
    row["floor_ms"] = floor_bytes / COPY_TBS * 1e3
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="convnext_tiny,mobilenet_v2")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--algos", default="auto")
    ap.add_argument("--no-torch", action="store_true", help="convkit's columns only")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_pointwise: no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    algos = a.algos.split(";") if ";" in a.algos else a.algos.split(",")
    rows = []
    for model in a.models.split(","):
        cases = (convnext_cases(a.batch) if model == "convnext_tiny" else
                 mbv2_cases(a.batch, "efficientnet_b0", "silu", False) if model == "efficientnet_b0" else
                 mbv2_cases(a.batch))
        for case in cases:
            try:
                row = run_case(*case, is_linear=model == "convnext_tiny", algos=algos, with_torch=not a.no_torch)
            except Exception as e:  # noqa: BLE001  (one failing layer is a row, not a crash)
                row = dict(layer=case[0], error=f"{type(e).__name__}: {str(e).splitlines()[0][:120]}")
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    first = algos[0]
    print("| layer | epilogue | " + " | ".join(f"convkit {al} ms" for al in algos) + f" | plan ({first}) | eager ms | "
          f"compile ms | floor ms | x eager | x compile | % of floor | rel vs torch |")
    print("|---|---|" + "---|" * len(algos) + "---|---|---|---|---|---|---|---|")
    tot = {al: 0.0 for al in algos + ["eager", "compile"]}
    for r in rows:
        if "error" in r:
            print(f"| {r['layer']} | error: {r['error']} |")
            continue
        for al in algos:
            tot[al] += r["ms"][al]
        tot["eager"] += r["eager_ms"]
        tot["compile"] += r["compile_ms"]
        best = min(v for v in r["ms"].values() if v == v)
        cols = " | ".join(f"{r['ms'][al]:.4f} ({r['plan'][al]})" if al == "autotune" else f"{r['ms'][al]:.4f}"
                          for al in algos)
        t = r["ms"][first]
        print(f"| {r['layer']} | {r['epilogue']} | {cols} | {r['plan'][first]} | {r['eager_ms']:.4f} | "
              f"{r['compile_ms']:.4f} | {r['floor_ms']:.4f} | {r['eager_ms'] / t:.2f}x | "
              f"{r['compile_ms'] / t:.2f}x | {100 * r['floor_ms'] / t:.0f}% (best {100 * r['floor_ms'] / best:.0f}%) | "
              f"{r['rel']:.1e} |")
    print("| sum | | " + " | ".join(f"{tot[al]:.4f}" for al in algos) +
          f" | | {tot['eager']:.4f} | {tot['compile']:.4f} | | | | | |")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
