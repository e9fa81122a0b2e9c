"""Gradients on a GPU: convkit's kernels against PyTorch's cuDNN, in one process, and a training step.

    python scripts/bench_backward.py [--suites mobilenet_v2,efficientnet_b0,convnext_tiny] [--configs bf16:nhwc,f32:nchw]
                                     [--dense resnet50] [--train mobilenet_v2] [--json out.json]

Layers: every depthwise problem (groups = C) of the bench/shapes suites. Each row: median ms
(triton.testing.do_bench: CUDA events, warm-up, L2 flushed) of
  cudnn dgrad / wgrad   aten.convolution_backward with one output mask (cudnn.benchmark = True)
  convkit dgrad         torch.ops.convkit.conv2d_backward_data (the gather kernel)
  convkit fwd-flip      stride 1, multiplier 1 only: convkit.conv2d of grad_out with the flipped filter (the
                        forward kernels; what the extension ran before the gradient kernels)
  convkit wgrad         torch.ops.convkit.conv2d_backward_weight
and the floor: the bytes each gradient must move (dgrad: grad_out + w + grad_in; wgrad: x + grad_out + w),
over --bw TB/s (the H200's measured copy rate, ../shared/ANCHORS.md).
--dense: the weight gradient of every dense layer (groups = 1, not a 1x1 stride-1 GEMM) of those suites, bf16
channels_last: cudnn wgrad, convkit's kernel (torch.ops.convkit.conv2d_backward_weight) and the correlation form
it replaces (x and grad_out transposed into channels_last copies, then convkit.conv2d with grad_out as the filter:
what the extension runs where the kernel does not take a layer), each with its relative error against cuDNN in fp32.
--train: one training step (forward, backward, SGD) of the torchvision model at batch 32, bf16 channels_last:
PyTorch eager, convkit.nn.convert with the gradient kernels, and the same with aten's backward
(convkit._autograd.BACKWARD = "aten"), each with its median ms; then the same steps in a child process with
CONVKIT_POINTWISE_DGRAD=gemm (the 1x1 layers' data gradient as one GEMM), compared as torch / convkit ratios (--no-ab: not). --profile: the same steps under torch.profiler,
the GPU time of each step by kernel family (convkit's kernels, cuDNN/cuBLAS, BatchNorm, the rest), the kernels
launched most often, and the host events with the most self time (ops and CUDA runtime calls), per step.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

import convkit
import convkit._autograd
from torch_anchor import parse_spec, read_suite  # the suite files' reader, next to this script


def bench(fn, warmup=25, rep=100):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def layers(suite):
    """The suite's depthwise problems (groups = C > 1) as (name, sizes, stride, padding, dilation)."""
    out = []
    for name, spec in read_suite(suite):
        v = parse_spec(spec)
        if v["g"] == v["c"] and v["g"] > 1:
            out.append((name, v, (v["uh"], v["uw"]), (v["ph"], v["pw"]), (v["dh"], v["dw"])))
    return out


def layer_rows(suite, dtype, mf, bw):
    rows = []
    for name, v, st, pd, dl in layers(suite):
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(v["n"], v["c"], v["h"], v["w"], device="cuda", generator=g).to(dtype).contiguous(memory_format=mf)
        w = torch.randn(v["k"], 1, v["r"], v["s"], device="cuda", generator=g).to(dtype).contiguous(memory_format=mf)
        y = F.conv2d(x, w, stride=st, padding=pd, dilation=dl, groups=v["g"])
        gz = torch.randn(y.shape, device="cuda", generator=g).to(dtype).contiguous(memory_format=mf)
        args = (list(st), list(pd), list(dl), v["g"])
        aten = torch.ops.aten.convolution_backward
        t = {}
        t["cudnn_dgrad"] = bench(lambda: aten(gz, x, w, None, st, pd, dl, False, [0, 0], v["g"], [True, False, False]))
        t["cudnn_wgrad"] = bench(lambda: aten(gz, x, w, None, st, pd, dl, False, [0, 0], v["g"], [False, True, False]))
        t["convkit_dgrad"] = bench(lambda: torch.ops.convkit.conv2d_backward_data(gz, w, list(x.shape), *args))
        t["convkit_wgrad"] = bench(lambda: torch.ops.convkit.conv2d_backward_weight(x, gz, list(w.shape), *args))
        if st == (1, 1) and v["k"] == v["c"] and dl == (1, 1):
            wf = w.flip([2, 3]).contiguous(memory_format=mf)
            pad_t = (v["r"] - 1 - pd[0], v["s"] - 1 - pd[1])
            t["convkit_fwdflip"] = bench(lambda: convkit.conv2d(gz, wf, None, 1, pad_t, 1, v["g"]))
        # correctness of what was timed, against cuDNN in fp32 of the same inputs
        gx_ref, gw_ref, _ = aten(gz.float(), x.float(), w.float(), None, st, pd, dl, False, [0, 0], v["g"],
                                 [True, True, False])
        gx = torch.ops.convkit.conv2d_backward_data(gz, w, list(x.shape), *args)
        gw = torch.ops.convkit.conv2d_backward_weight(x, gz, list(w.shape), *args)
        err = max(float((gx.float() - gx_ref).norm() / gx_ref.norm()), float((gw.float() - gw_ref).norm() / gw_ref.norm()))
        es = x.element_size()
        floor_d = (gz.numel() + w.numel() + x.numel()) * es / (bw * 1e12) * 1e3
        rows.append(dict(layer=name, **t, floor_ms=floor_d, rel_err=err))
        print(f"  {name}: " + " ".join(f"{k} {val:.4f}" for k, val in t.items()), file=sys.stderr, flush=True)
    return rows


def dense_rows(suite):
    rows = []
    cl = torch.channels_last
    for name, spec in read_suite(suite):
        v = parse_spec(spec)
        st, pd, dl = (v["uh"], v["uw"]), (v["ph"], v["pw"]), (v["dh"], v["dw"])
        if v["g"] != 1 or v["c"] % 8 or v["k"] % 8 or (v["r"] == v["s"] == 1 and st == (1, 1)):
            continue
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(v["n"], v["c"], v["h"], v["w"], device="cuda", generator=g).bfloat16().contiguous(memory_format=cl)
        w = torch.randn(v["k"], v["c"], v["r"], v["s"], device="cuda", generator=g).bfloat16().contiguous(memory_format=cl)
        gz = torch.randn(F.conv2d(x, w, stride=st, padding=pd, dilation=dl).shape, device="cuda",
                         generator=g).bfloat16().contiguous(memory_format=cl)
        aten = torch.ops.aten.convolution_backward
        args = (list(st), list(pd), list(dl), 1)

        def corr():
            out = convkit.conv2d(x.transpose(0, 1).contiguous(memory_format=cl),
                                 gz.transpose(0, 1).contiguous(memory_format=cl), None, dl, pd, st, 1)
            return out[:, :, :v["r"], :v["s"]].transpose(0, 1).contiguous(memory_format=cl)

        def kernel():
            return torch.ops.convkit.conv2d_backward_weight(x, gz, list(w.shape), *args)

        t = dict(cudnn_wgrad=bench(lambda: aten(gz, x, w, None, st, pd, dl, False, [0, 0], 1, [False, True, False])),
                 convkit_wgrad=bench(kernel), convkit_corr=bench(corr))
        ref = aten(gz.float(), x.float(), w.float(), None, st, pd, dl, False, [0, 0], 1, [False, True, False])[1]
        errs = {k: float((f().float() - ref).norm() / ref.norm()) for k, f in (("err_kernel", kernel), ("err_corr", corr))}
        rows.append(dict(layer=name, **t, **errs))
        print(f"  {name}: " + " ".join(f"{k} {val:.4f}" for k, val in t.items()), file=sys.stderr, flush=True)
    return rows


def pointwise_gemm_run(model_name, batch):
    """The same training rows in a child process with CONVKIT_POINTWISE_DGRAD=gemm (read once a process: the 1x1
    layers' data gradient as one GEMM): its torch and convkit ms, to compare as the ratio within each run."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "ab.json")
        env = dict(os.environ, CONVKIT_POINTWISE_DGRAD="gemm")
        subprocess.run([sys.executable, os.path.abspath(__file__), "--suites", "", "--configs", "", "--train",
                        model_name, "--batch", str(batch), "--json", js], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        with open(js) as f:
            r = json.load(f)["train"][0]
    return dict(torch_ms=r["torch_ms"], convkit_ms=r["convkit_ms"])


def train_rows(model_name, batch, profile=False, ab_pointwise=True):
    import torchvision

    out = []
    torch.manual_seed(0)
    base = getattr(torchvision.models, model_name)(weights=None)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    target = torch.randint(0, 1000, (batch,), device="cuda")

    def step_fn(m):
        opt = torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(m(x).float(), target)
            loss.backward()
            opt.step()
        return step

    import copy

    torch_m = copy.deepcopy(base).cuda().to(torch.bfloat16).to(memory_format=torch.channels_last).train()
    ck_m = convkit.nn.convert(copy.deepcopy(base)).cuda().to(torch.bfloat16).to(memory_format=torch.channels_last).train()
    # ~20-30 ms a step: 0.5 s of warm-up and 3 s of steps (>= 100) for each median
    t_torch = bench(step_fn(torch_m), 500, 3000)
    t_ck = bench(step_fn(ck_m), 500, 3000)
    saved = convkit._autograd.BACKWARD
    convkit._autograd.BACKWARD = "aten"
    try:
        t_ck_aten = bench(step_fn(ck_m), 500, 3000)
    finally:
        convkit._autograd.BACKWARD = saved
    out.append(dict(model=model_name, batch=batch, torch_ms=t_torch, convkit_ms=t_ck, convkit_aten_backward_ms=t_ck_aten))
    # (at once, on stderr: the A/B child process and the profile that follow may outlast a caller's timeout)
    print(f"  {model_name} training step: torch {t_torch:.2f} ms, convkit {t_ck:.2f} ms ({t_torch / t_ck:.2f}x), "
          f"aten's backward {t_ck_aten:.2f} ms", file=sys.stderr, flush=True)
    if ab_pointwise and os.environ.get("CONVKIT_POINTWISE_DGRAD") is None:
        out[-1]["pointwise_gemm"] = pointwise_gemm_run(model_name, batch)
    if profile:
        out[-1]["profile"] = {"torch": kernel_families(step_fn(torch_m), host=True),
                              "convkit": kernel_families(step_fn(ck_m), host=True)}
    return out


def family(name):
    n = name.lower()
    if "batched_transpose" in n:
        return "convkit transform"
    if "convkit" in n or "depthwise" in n or "igemm" in n or "wgmma" in n:
        return "convkit"
    if "cudnn" in n or "xmma" in n or "sm90" in n or "cutlass" in n or "gemm" in n or "conv" in n:
        return "cudnn/cublas"
    if "batch_norm" in n or "bn_" in n or "welford" in n:
        return "batchnorm"
    return "other"


def kernel_families(step, steps=5, host=False):
    """GPU ms per step by kernel family and the top kernels; host=True also records the CPU side: the host
    events with the most self time per step (ops and CUDA runtime calls: ms, calls per step), as "host"."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    acts = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if host else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    fam, top, launches, cpu = {}, {}, {}, []
    for e in prof.key_averages():
        if host and e.self_cpu_time_total > 0 and "Synchronize" not in e.key:
            cpu.append((e.key[:70], e.self_cpu_time_total / 1e3 / steps, e.count / steps))
        # ms per step on the GPU: the kernels' own time. With the CPU activity on, an op is an event too, and
        # its self_device_time_total is the time of the kernels it launched itself (torch's profiler_util):
        # counted, it would add those kernels a second time. Kernels are the events of a non-CPU device.
        if e.device_type == DeviceType.CPU:
            continue
        t = e.self_device_time_total / 1e3 / steps
        if t <= 0:
            continue
        fam[family(e.key)] = fam.get(family(e.key), 0.0) + t
        top[e.key[:90]] = top.get(e.key[:90], 0.0) + t  # (instances whose names agree this far: summed)
        launches[e.key[:90]] = launches.get(e.key[:90], 0.0) + e.count / steps
    r = dict(families=fam, top=sorted(top.items(), key=lambda kv: -kv[1])[:12],
             launches=sorted(launches.items(), key=lambda kv: -kv[1])[:16], launches_per_step=sum(launches.values()))
    if host:
        r["host"] = sorted(cpu, key=lambda v: -v[1])[:14]
        r["host_ms"] = sum(v[1] for v in cpu)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--suites", default="mobilenet_v2,efficientnet_b0,convnext_tiny")
    ap.add_argument("--configs", default="bf16:nhwc,f32:nchw")
    ap.add_argument("--dense", default="")
    ap.add_argument("--train", default="")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-ab", action="store_true", help="--train without the CONVKIT_POINTWISE_DGRAD=gemm child process")
    ap.add_argument("--bw", type=float, default=4.26)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    report = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, cudnn=torch.backends.cudnn.version(),
                  layers={}, dense={}, train=[])
    for cfg in [c for c in a.configs.split(",") if c]:
        dt, lay = cfg.split(":")
        dtype = dict(bf16=torch.bfloat16, f16=torch.float16, f32=torch.float32)[dt]
        mf = torch.channels_last if lay == "nhwc" else torch.contiguous_format
        for suite in [s for s in a.suites.split(",") if s]:
            print(f"{suite} {cfg}", file=sys.stderr, flush=True)
            rows = layer_rows(suite, dtype, mf, a.bw)
            report["layers"][f"{suite}:{cfg}"] = rows
            print(f"\n### {suite} {dt} {lay} (batch {a.batch}), ms\n")
            print("| layer | cuDNN dgrad | convkit dgrad | fwd-flip | x | cuDNN wgrad | convkit wgrad | x | floor | err |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            for r in rows:
                ff = r.get("convkit_fwdflip")
                print(f"| {r['layer']} | {r['cudnn_dgrad']:.4f} | {r['convkit_dgrad']:.4f} | "
                      f"{'%.4f' % ff if ff else '-'} | {r['cudnn_dgrad'] / min(r['convkit_dgrad'], ff or 9e9):.2f} | "
                      f"{r['cudnn_wgrad']:.4f} | {r['convkit_wgrad']:.4f} | {r['cudnn_wgrad'] / r['convkit_wgrad']:.2f} | "
                      f"{r['floor_ms']:.4f} | {r['rel_err']:.1e} |")
    for suite in [s for s in a.dense.split(",") if s]:
        print(f"{suite} dense wgrad", file=sys.stderr, flush=True)
        rows = dense_rows(suite)
        report["dense"][suite] = rows
        print(f"\n### {suite} dense weight gradients, bf16 channels_last, ms\n")
        print("| layer | cuDNN | convkit kernel | x cuDNN | correlation form | x cuDNN | err kernel | err corr |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['layer']} | {r['cudnn_wgrad']:.4f} | {r['convkit_wgrad']:.4f} | "
                  f"{r['cudnn_wgrad'] / r['convkit_wgrad']:.2f} | {r['convkit_corr']:.4f} | "
                  f"{r['cudnn_wgrad'] / r['convkit_corr']:.2f} | {r['err_kernel']:.1e} | {r['err_corr']:.1e} |")
        if rows:
            import math
            gm = lambda key: math.exp(sum(math.log(r["cudnn_wgrad"] / r[key]) for r in rows) / len(rows))  # noqa: E731
            print(f"| **geomean** ({len(rows)} layers) | | | **{gm('convkit_wgrad'):.2f}** | | **{gm('convkit_corr'):.2f}** | | |")
    for m in [m for m in a.train.split(",") if m]:
        rows = train_rows(m, a.batch, a.profile, ab_pointwise=not a.no_ab)
        report["train"] += rows
        for r in rows:
            print(f"\ntraining step {m} bf16 channels_last batch {a.batch}: torch {r['torch_ms']:.2f} ms, convkit "
                  f"{r['convkit_ms']:.2f} ms ({r['torch_ms'] / r['convkit_ms']:.2f}x), convkit with aten's backward "
                  f"{r['convkit_aten_backward_ms']:.2f} ms")
            if "pointwise_gemm" in r:
                ab = r["pointwise_gemm"]
                print(f"with CONVKIT_POINTWISE_DGRAD=gemm (another process): torch {ab['torch_ms']:.2f} ms, convkit "
                      f"{ab['convkit_ms']:.2f} ms ({ab['torch_ms'] / ab['convkit_ms']:.2f}x)")
            for who, prof in r.get("profile", {}).items():
                print(f"\n{who}: GPU ms per step by family: " +
                      ", ".join(f"{k} {v:.2f}" for k, v in sorted(prof["families"].items(), key=lambda kv: -kv[1])))
                for k, v in prof["top"]:
                    print(f"  {v:7.3f}  {k}")
                print(f"{who}: {prof['launches_per_step']:.0f} kernels and copies a step; the most launched:")
                for k, n in prof["launches"]:
                    print(f"  {n:6.1f}  {k}")
                print(f"{who}: host events by self time, ms and calls per step (under the profiler; "
                      f"{prof['host_ms']:.2f} ms in all):")
                for k, ms, n in prof["host"]:
                    print(f"  {ms:7.3f}  {n:6.1f}  {k}")
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump(report, f, indent=1)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
