"""Whole torchvision models through PyTorch and convkit, in one process, on a GPU.

    python scripts/bench_models.py [--models resnet50,mobilenet_v2] [--dtypes bf16,f32] [--batches 32,1]
                                   [--variants eager,compile,convert,fuse,fuse_autotune,fuse_compile,graph,fuse_graph]
                                   [--max-autotune] [--profile] [--plans] [--json out.json]

Models (random init, eval): resnet50, resnext50_32x4d, mobilenet_v2, efficientnet_b0, convnext_tiny; any other
torchvision model by name, and timm's as timm:<name> (timm:efficientnet_b0: its BatchNormAct2d layers).
bf16 runs channels_last (model and input), f32 runs contiguous NCHW with strict fp32 on both sides (cuDNN's
TF32 off). Variants:
  eager         the model as PyTorch runs it (cuDNN, benchmark=True)
  compile       torch.compile(model) (mode default); with --max-autotune also
                mode="max-autotune-no-cudagraphs" (its compile time is reported)
  convert       convkit.nn.convert(model): every Conv2d swapped, BatchNorm/activations/adds still PyTorch ops
  fuse          convkit.fuse(model): BatchNorm folded, activation and residual in convkit's epilogue
  fuse_autotune convkit.fuse(model, algo="autotune"): every convolution's algorithm and variant timed on its
                first call instead of the heuristic's (the first forward, untimed; set CONVKIT_TUNE_CACHE=off
                to tune afresh)
  fuse_compile  torch.compile(convkit.fuse(model))
  fuse_nolinears convkit.fuse(model, linears=False): ConvNeXt's Linears left to torch (cuBLAS, then PyTorch's
                GELU, scale and add) instead of 1x1 convolutions with those in the epilogue (fuse's default)
  graph         CUDA-graph replays: torch.compile(mode="reduce-overhead") for PyTorch and a captured
                torch.cuda.CUDAGraph of convkit.fuse(model)
  fuse_graph    the second of those only (convkit's settings compared without compiling PyTorch's)
Each row: median ms (triton.testing.do_bench, L2 flushed), the speed-up over eager PyTorch, and the output's
rel L2 against a float64 run of the same model on the same input. Markdown on stdout; --json for machines.
--profile: each variant once more under torch.profiler: its GPU time per forward (the kernels' sum; well
under the timed ms means the forward waits on the host), by kernel family (convkit, convkit's layout
transforms, cuDNN/cuBLAS, BatchNorm, other) and its top kernels, and the host events (ops, CUDA runtime
calls) with the most self time a forward, printed after the table.
--plans: for convert, fuse and fuse_autotune, what each convolution runs (algorithm[variant] and whether the
heuristic or the tune cache chose it, from convkit.plan on the input the layer gets), and the layers where
fuse and fuse_autotune differ.
"""
import argparse
import copy
import json
import sys
import time

import torch

import convkit

MODELS = ("resnet50", "resnext50_32x4d", "mobilenet_v2", "efficientnet_b0", "convnext_tiny")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def bench(fn):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def make_model(name):
    """torchvision's model `name`, or timm's for "timm:<name>" (random init), with random BatchNorm statistics."""
    torch.manual_seed(0)
    if name.startswith("timm:"):
        import timm

        m = timm.create_model(name[len("timm:"):], pretrained=False)
    else:
        import torchvision

        m = getattr(torchvision.models, name)(weights=None)
    # Random BatchNorm statistics: a freshly built model's are (0, 1), which would hide a wrong fold.
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) * 0.5 + 0.75)
            if mod.weight is not None:
                mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) * 0.5 + 0.75)
                mod.bias.data.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
    return m.eval()


def profile_forward(fn, runs=5):
    """GPU ms per forward of fn, by kernel family, and its top kernels (torch.profiler, CUDA activity)."""
    from bench_backward import kernel_families

    with torch.no_grad():
        r = kernel_families(fn, runs, host=True)
    r["gpu_ms"] = sum(r["families"].values())
    return r


def conv_plans(model, x):
    """What each convkit convolution of model runs on input x: (module name, problem, algorithm, variant, where
    the choice came from: heuristic or tune cache), from convkit.plan on the input and the epilogue's activation
    the layer gets in one forward (forward pre-hooks)."""
    found = []

    def hook(mod, args, name):
        inp = args[0]
        if isinstance(mod.padding, str):
            found.append((name, tuple(inp.shape), "-", "", "padding given as a string"))
            return
        pl = convkit.plan(inp, mod.weight, mod.stride, mod.padding, mod.dilation, mod.groups, algo="auto",
                          activation=getattr(mod, "_activation", "none"))
        n, c, h, w = inp.shape
        k, _, r, s_ = mod.weight.shape
        problem = f"n{n}c{c}h{h}w{w}k{k}r{r}s{s_}p{mod.padding[0]}u{mod.stride[0]}g{mod.groups}"
        # the variant it runs: the tune cache's, or the algorithm's own choice (the heuristic names none)
        found.append((name, problem, pl[0], pl.variant or pl.own_variant, pl.source))

    handles = [m.register_forward_pre_hook(lambda mod, args, n=n: hook(mod, args, n))
               for n, m in model.named_modules() if isinstance(m, convkit.nn.Conv2d)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return found


def run_one(name, dt, batch, variants, max_autotune, profiled=False, plans=False):
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[dt]
    fmt = torch.channels_last if dt == "bf16" else torch.contiguous_format
    base = make_model(name)
    x64 = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(2)).double()
    with torch.no_grad():
        ref = copy.deepcopy(base).double().cuda()(x64.cuda())
    model = copy.deepcopy(base).to(device="cuda", dtype=dtype, memory_format=fmt)
    x = x64.to(device="cuda", dtype=dtype).contiguous(memory_format=fmt)
    rows = []

    def add(variant, fn, extra="", module=None):
        try:
            with torch.no_grad():
                out = fn()
                err = rel_l2(out.float(), ref.float())
                ms = bench(fn)
            rows.append({"model": name, "dtype": dt, "batch": batch, "variant": variant, "ms": ms, "rel_l2": err,
                         "note": extra})
            log(f"  {name} {dt} n{batch} {variant}: {ms:.3f} ms, rel L2 {err:.2e} {extra}")
            if profiled:
                rows[-1]["profile"] = profile_forward(fn)
            if plans and module is not None:
                rows[-1]["plans"] = conv_plans(module, x)
        except Exception as e:  # noqa: BLE001  (report and go on: one failing variant is a row, not a crash)
            rows.append({"model": name, "dtype": dt, "batch": batch, "variant": variant, "ms": None,
                         "rel_l2": None, "note": f"error: {type(e).__name__}: {str(e).splitlines()[0][:120]}"})
            log(f"  {name} {dt} n{batch} {variant}: ERROR {e}")

    def compiled(m, **kw):
        t0 = time.time()
        c = torch.compile(m, **kw)
        with torch.no_grad():
            c(x)
            c(x)
        return c, time.time() - t0

    if "eager" in variants:
        add("eager", lambda: model(x))
    if "compile" in variants:
        c, s = compiled(model)
        add("compile", lambda: c(x), f"compile {s:.0f} s")
        if max_autotune:
            c2, s2 = compiled(model, mode="max-autotune-no-cudagraphs")
            add("compile max-autotune", lambda: c2(x), f"compile {s2:.0f} s")
    if "convert" in variants:
        conv = convkit.nn.convert(copy.deepcopy(model), memory_format=fmt)
        add("convkit convert", lambda: conv(x), module=conv)
    fused = None
    if "fuse" in variants or "fuse_compile" in variants or "graph" in variants or "fuse_graph" in variants:
        fused = convkit.fuse(model, memory_format=fmt)
        s = fused.convkit_summary
        note = f"{s.convs} convs, {s.bn_folded} bn, {s.activations} act, {s.residuals} res"
    if "fuse" in variants:
        add("convkit fuse", lambda: fused(x), note, module=fused)
    if "fuse_autotune" in variants:
        # algo="autotune": each convolution's candidates timed on its first call (the tune cache: docs/tuning.md);
        # add() runs the model once before timing it, so the tuning stays out of the timed runs.
        ft = convkit.fuse(model, memory_format=fmt, algo="autotune")
        t0 = time.time()
        with torch.no_grad():
            ft(x)
        add("convkit fuse autotune", lambda: ft(x), f"tuning {time.time() - t0:.0f} s", module=ft)
    if "fuse_nolinears" in variants:
        fl = convkit.fuse(model, memory_format=fmt, linears=False)
        add("convkit fuse, Linears to torch", lambda: fl(x), f"{fl.convkit_summary.linears} linears")
    if "fuse_compile" in variants:
        fc, s = compiled(fused)
        add("compile(convkit fuse)", lambda: fc(x), f"compile {s:.0f} s")
    if "graph" in variants:
        ro, s = compiled(model, mode="reduce-overhead")
        add("compile reduce-overhead", lambda: ro(x), f"compile {s:.0f} s")
    if "graph" in variants or "fuse_graph" in variants:
        g = torch.cuda.CUDAGraph()
        with torch.no_grad():
            st = torch.cuda.Stream()
            st.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(st):
                for _ in range(3):
                    fused(x)
            torch.cuda.current_stream().wait_stream(st)
            with torch.cuda.graph(g):
                gout = fused(x)

        def replay():
            g.replay()
            return gout

        add("convkit fuse (CUDA graph)", replay)
    return rows


def table(rows):
    out = ["| model | dtype | batch | variant | ms | vs eager | rel L2 vs f64 | note |", "|---|---|---|---|---|---|---|---|"]
    eager = {(r["model"], r["dtype"], r["batch"]): r["ms"] for r in rows if r["variant"] == "eager"}
    for r in rows:
        e = eager.get((r["model"], r["dtype"], r["batch"]))
        ms = f"{r['ms']:.3f}" if r["ms"] else "-"
        sp = f"{e / r['ms']:.2f}x" if e and r["ms"] else "-"
        err = f"{r['rel_l2']:.1e}" if r["rel_l2"] is not None else "-"
        out.append(f"| {r['model']} | {r['dtype']} | {r['batch']} | {r['variant']} | {ms} | {sp} | {err} | {r['note']} |")
    return "\n".join(out)


def profile_text(rows):
    out = []
    for r in rows:
        pr = r.get("profile")
        if not pr:
            continue
        fams = ", ".join(f"{k} {v:.3f}" for k, v in sorted(pr["families"].items(), key=lambda kv: -kv[1]))
        out.append(f"\n{r['model']} {r['dtype']} n{r['batch']} {r['variant']}: GPU {pr['gpu_ms']:.3f} ms of "
                   f"{r['ms']:.3f} timed; by family: {fams}")
        out += [f"  {v:7.3f}  {k}" for k, v in pr["top"][:12]]
        if pr.get("host"):
            out.append(f"  host: {pr['host_ms']:.3f} ms of self time a forward (under the profiler); the most:")
            out += [f"    {ms:7.3f} ms  {n:6.1f} calls  {k}" for k, ms, n in pr["host"][:10]]
    return "\n".join(out)


def plans_text(rows):
    """Each model's convkit layers and what they ran; with fuse and fuse_autotune both planned, the layers
    whose choice differs between the two first."""
    out = []
    for r in rows:
        if not r.get("plans"):
            continue
        out.append(f"\n{r['model']} {r['dtype']} n{r['batch']} {r['variant']}: {len(r['plans'])} convolutions")
        out += [f"  {n:40s} {p:34s} {a}[{v}] ({src})" for n, p, a, v, src in r["plans"]]
    by = {}
    for r in rows:
        if r.get("plans"):
            by.setdefault((r["model"], r["dtype"], r["batch"]), {})[r["variant"]] = r["plans"]
    for (m, dt, b), vs in by.items():
        f, t = vs.get("convkit fuse"), vs.get("convkit fuse autotune")
        if f and t:
            diff = [(x, y) for x, y in zip(f, t) if (x[2], x[3]) != (y[2], y[3])]
            out.append(f"\n{m} {dt} n{b}: fuse and fuse autotune differ on {len(diff)} of {len(f)} convolutions")
            out += [f"  {x[0]:40s} {x[1]:34s} {x[2]}[{x[3]}] -> {y[2]}[{y[3]}]" for x, y in diff]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--batches", default="32")
    ap.add_argument("--variants", default="eager,compile,convert,fuse,fuse_compile,graph")
    ap.add_argument("--max-autotune", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--plans", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_models: no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    variants = set(a.variants.split(","))
    rows = []
    for name in a.models.split(","):
        for dt in a.dtypes.split(","):
            for b in (int(v) for v in a.batches.split(",")):
                rows += run_one(name, dt, b, variants, a.max_autotune, a.profile, a.plans)
                if a.json:
                    with open(a.json + ".tmp", "w") as f:
                        json.dump(rows, f, indent=1)
    print(table(rows))
    if a.profile:
        print(profile_text(rows))
    if a.plans:
        print(plans_text(rows))
    if a.json:
        import os

        os.replace(a.json + ".tmp", a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
