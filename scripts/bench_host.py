"""Host time of one convolution call: convkit's op against F.conv2d, on the layers of a torchvision model.

    python scripts/bench_host.py [--model mobilenet_v2] [--dtype bf16] [--calls 300] [--profile] [--whole]
                                 [--device cuda|cpu] [--layers N]

A model whose forward waits on the host (GPU time per forward well under its wall time, which
bench_models.py --profile shows) is as fast as its ops are issued. This script times the issue alone: each
distinct Conv2d of the model (batch 1, so that its kernel is short) is called --calls times in a row with no
synchronisation inside, the wall time over those calls divided by their number, median of 5 such loops, for
  torch        F.conv2d (cuDNN, benchmark=True)
  op           torch.ops.convkit.conv2d (the library's plan remembered, the kernel's launch)
  module       convkit.nn.Conv2d.forward (what convkit.nn.convert and convkit.fuse call: the Python wrapper
               and the op)
in microseconds a call, with the GPU microseconds a call of the same loop (CUDA events) next to them: a row
where GPU >= host measured the GPU, not the host. --profile: one loop of each under torch.profiler (CPU and
CUDA activity), the host events with the most self time a call (the ops and the CUDA runtime calls).
--whole: then the model itself at batch 1 on 32x32 inputs (nothing but host work), eval, no_grad: PyTorch
eager, convkit.fuse(model) and torch.compile(convkit.fuse(model), fullgraph=True), median ms of 30 runs
after 5 warm-ups, each run synchronised.
--device cpu times the same on the CPU (there is no GPU column then); --hw 4 there makes the layers small enough
for the host path to dominate.
--grad: a training call instead: forward and backward of each layer (x and the weight requiring gradients, the
gradients by torch.autograd.grad), torch's against convkit's module (the op's C++ autograd Function); "op" is
then the forward alone with gradients recorded.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import convkit


def issue_us(fn, calls, cuda):
    """(host us a call, GPU us a call) of `calls` calls of fn issued back to back, median of 5 loops."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(20):
        fn()
    sync()
    host, gpu = [], []
    for _ in range(5):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        if cuda:
            b.record()
        sync()
        host.append((t1 - t0) / calls * 1e6)
        gpu.append(a.elapsed_time(b) * 1e3 / calls if cuda else 0.0)
    return statistics.median(host), statistics.median(gpu)


def host_events(fn, calls, cuda, top=12):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(calls):
            fn()
        if cuda:
            torch.cuda.synchronize()
    ev = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    ev.sort(key=lambda e: -e.self_cpu_time_total)
    return [(e.key, e.self_cpu_time_total / calls, e.count / calls) for e in ev[:top]]


def median_ms(fn, sync, n=30, warm=5):
    for _ in range(warm):
        fn()
    sync()
    ts = []
    for _ in range(n):
        s = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - s)
    return statistics.median(ts) * 1e3


def whole_model(name, device, dtype, mf):
    import torchvision

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    m = getattr(torchvision.models, name)(weights=None).eval().to(device=device, dtype=dtype, memory_format=mf)
    f = convkit.fuse(m)
    c = torch.compile(f, fullgraph=True)
    x = torch.randn(1, 3, 32, 32, device=device).to(dtype).contiguous(memory_format=mf)
    print(f"\n### {name} at batch 1, 32x32 ({device}, {str(dtype).replace('torch.', '')}), ms a forward")
    print("| torch eager | convkit.fuse | torch.compile(convkit.fuse) |\n|---|---|---|")
    with torch.no_grad():
        t = [median_ms(lambda: mod(x), sync) for mod in (m, f, c)]
    print("| " + " | ".join(f"{v:.3f}" for v in t) + " |")


def distinct_convs(model_name):
    import torchvision

    m = getattr(torchvision.models, model_name)()
    seen, out = set(), []
    shapes = {}

    def hook(mod, inp, _):
        shapes[mod] = tuple(inp[0].shape[1:])

    hs = [c.register_forward_hook(hook) for c in m.modules() if isinstance(c, torch.nn.Conv2d)]
    with torch.no_grad():
        m.eval()(torch.zeros(1, 3, 224, 224))
    for h in hs:
        h.remove()
    for c, s in shapes.items():
        key = (s, c.out_channels, c.kernel_size, c.stride, c.padding, c.dilation, c.groups)
        if key not in seen:
            seen.add(key)
            out.append((c, s))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--layers", type=int, default=0, help="the first N distinct layers only (0: all)")
    ap.add_argument("--whole", action="store_true", help="then the whole model at batch 1, 32x32")
    ap.add_argument("--grad", action="store_true", help="forward and backward of each layer (a training call)")
    ap.add_argument("--hw", type=int, default=0,
                    help="every layer's input at HW x HW (0: the model's own size); small on the CPU, where the "
                         "kernels of a 224x224 model's layers outweigh the host path")
    a = ap.parse_args()
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("bench_host: no CUDA device (--device cpu times the CPU path)", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    dtype = dict(bf16=torch.bfloat16, f16=torch.float16, f32=torch.float32)[a.dtype]
    mf = torch.channels_last if a.dtype != "f32" else torch.contiguous_format
    where = torch.cuda.get_device_name() if cuda else "CPU"
    what = "forward + backward" if a.grad else "forward"
    print(f"### host us a call ({what}), {a.model} {a.dtype} batch 1 ({where}, torch {torch.__version__})")
    print(f"| layer | torch | {'convkit forward' if a.grad else 'op'} | module | module / torch | GPU us (torch, module) |")
    print("|---|---|---|---|---|---|")
    ratios, profiled = [], []
    with torch.set_grad_enabled(a.grad):
        convs = distinct_convs(a.model)
        for conv, shape in convs[: a.layers] if a.layers > 0 else convs:
            if a.hw > 0:
                shape = (shape[0], a.hw, a.hw)
            x = torch.randn(1, *shape, device=a.device).to(dtype).contiguous(memory_format=mf).requires_grad_(a.grad)
            tm = conv.to(device=a.device, dtype=dtype, memory_format=mf)
            cm = convkit.nn.convert(torch.nn.Sequential(tm)).to(device=a.device)[0]
            w, b = tm.weight, tm.bias
            args = (list(tm.stride), list(tm.padding), list(tm.dilation), tm.groups)
            if a.grad:
                g = F.conv2d(x, w, b, *args).detach().normal_()
                cw = cm.weight

                def torch_call():
                    return torch.autograd.grad(F.conv2d(x, w, b, *args), (x, w), g)

                def op_call():
                    return cm(x)

                def mod_call():
                    return torch.autograd.grad(cm(x), (x, cw), g)
            else:
                def torch_call():
                    return F.conv2d(x, w, b, *args)

                def op_call():
                    return torch.ops.convkit.conv2d(x, w, b, *args, "none", None, "auto")

                def mod_call():
                    return cm(x)
            t_torch = issue_us(torch_call, a.calls, cuda)
            t_op = issue_us(op_call, a.calls, cuda)
            t_mod = issue_us(mod_call, a.calls, cuda)
            name = (f"{shape[0]}->{tm.out_channels} {tm.kernel_size[0]}x{tm.kernel_size[1]}"
                    f"{'s' + str(tm.stride[0]) if tm.stride[0] > 1 else ''}{' g' + str(tm.groups) if tm.groups > 1 else ''}"
                    f" @{shape[1]}")
            ratios.append(t_mod[0] / t_torch[0])
            print(f"| {name} | {t_torch[0]:.1f} | {t_op[0]:.1f} | {t_mod[0]:.1f} | {ratios[-1]:.2f} | "
                  f"{t_torch[1]:.1f}, {t_mod[1]:.1f} |", flush=True)
            if a.profile and len(profiled) < 3 and (tm.groups > 1) == (len(profiled) % 2 == 1):
                profiled.append((name, host_events(torch_call, a.calls, cuda), host_events(mod_call, a.calls, cuda)))
    print(f"\ngeomean module / torch: {statistics.geometric_mean(ratios):.2f}")
    for name, pt, pc in profiled:
        for who, rows in (("torch", pt), ("convkit module", pc)):
            print(f"\n{name}, {who}: host events by self time (us a call, calls a call)")
            for k, us, n in rows:
                print(f"  {us:8.2f}  {n:5.1f}  {k[:100]}")
    if a.whole:
        whole_model(a.model, a.device, dtype, mf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
