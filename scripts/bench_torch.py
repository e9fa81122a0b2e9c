"""Benchmarks of the PyTorch extension on a GPU (the H200), against PyTorch/cuDNN in the same process.

    python scripts/bench_torch.py [--json out.json] [--runs 100]

1. A ResNet-50 bottleneck block (256 -> 64 -> 64 -> 256 at 56x56, N=32), channels_last bf16 (and fp32),
   eval mode, forward:
     torch        : the block as written (conv + BN + ReLU, cuDNN)
     convkit      : the same model after convkit.nn.convert (convolutions swapped, BN/ReLU still separate)
     convkit-fused: BN folded into the weights and ReLU / the residual add fused into convkit's epilogue
2. conv2d_per_sample at N=32, 64->64, 56x56, 3x3, pad 1 (fp32, and bf16), against the usual workaround:
   the batch folded into groups (x as [1, N*C, H, W], weights [N*K, C, 3, 3], groups=N) through cuDNN.
Times are medians (triton.testing.do_bench with return_mode="median" when triton is present, which flushes
the L2 between runs; else CUDA events around each of --runs runs). cuDNN runs with benchmark=True and TF32
off for fp32. Where convkit has no kernel for a dtype yet the row says "unsupported" with convkit's reason.
"""
import argparse
import copy
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch import nn

import convkit


def bench(fn, runs):
    try:
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=max(100, runs), return_mode="median")
    except ImportError:
        pass
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


class Bottleneck(nn.Module):
    def __init__(self, c=256, mid=64):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + x)


def fold(conv, bn, activation):
    """conv + eval-mode BN -> one convkit Conv2dAct with the BN folded into weight and bias."""
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    m = convkit.nn.Conv2dAct(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
                             padding=conv.padding, bias=True, activation=activation,
                             device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        m.weight.copy_(conv.weight * scale.view(-1, 1, 1, 1))
        m.bias.copy_(bn.bias - bn.running_mean * scale)
    return m


class FusedBottleneck(nn.Module):
    def __init__(self, b):
        super().__init__()
        self.c1, self.c2, self.c3 = fold(b.conv1, b.bn1, "relu"), fold(b.conv2, b.bn2, "relu"), fold(b.conv3, b.bn3,
                                                                                                       "relu")

    def forward(self, x):
        return self.c3(self.c2(self.c1(x)), x)  # relu(bn3(conv3) + x) in one kernel


def row(results, what, variant, ms=None, err=None, status="ok", ref_ms=None):
    r = dict(benchmark=what, variant=variant, ms=ms, max_abs_err=err, status=status)
    if ms and ref_ms:
        r["speedup_vs_torch"] = ref_ms / ms
    results.append(r)
    ms_s = f"{ms:9.4f} ms" if ms is not None else "        -   "
    sp = f"  x{r['speedup_vs_torch']:.2f} vs torch" if "speedup_vs_torch" in r else ""
    e = f"  max|err| {err:.3g}" if err is not None else ""
    print(f"{what:<34} {variant:<16} {ms_s}{sp}{e}  {status}", flush=True)


def try_run(fn):
    try:
        return fn(), None
    except (NotImplementedError, RuntimeError, ValueError) as e:
        return None, "unsupported: " + str(e).splitlines()[0][:160]


def bench_bottleneck(results, dtype, runs):
    name = f"r50 bottleneck N32 56x56 {str(dtype).split('.')[-1]} NHWC"
    torch.manual_seed(0)
    block = Bottleneck().cuda().eval()
    for bn in (block.bn1, block.bn2, block.bn3):  # non-trivial BN statistics
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    block = block.to(dtype=dtype, memory_format=torch.channels_last)
    x = torch.randn(32, 256, 56, 56, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        ref = block(x)
        t_ref = bench(lambda: block(x), runs)
        row(results, name, "torch", t_ref)
        ck = convkit.nn.convert(copy.deepcopy(block))
        fused = FusedBottleneck(block)
        for variant, model in (("convkit", ck), ("convkit-fused", fused)):
            out, why = try_run(lambda: model(x))
            if why:
                row(results, name, variant, status=why)
                continue
            err = (out.float() - ref.float()).abs().max().item()
            row(results, name, variant, bench(lambda: model(x), runs), err, ref_ms=t_ref)


def bench_per_sample(results, dtype, runs):
    name = f"per-sample N32 64->64 56x56 3x3 {str(dtype).split('.')[-1]}"
    n, c, k, hw = 32, 64, 64, 56
    torch.manual_seed(0)
    mf = torch.channels_last if dtype != torch.float32 else torch.contiguous_format
    x = torch.randn(n, c, hw, hw, device="cuda", dtype=dtype).contiguous(memory_format=mf)
    w = torch.randn(n, k, c, 3, 3, device="cuda", dtype=dtype) / 24
    with torch.no_grad():
        xg = x.reshape(1, n * c, hw, hw).contiguous(memory_format=mf)
        wg = w.reshape(n * k, c, 3, 3).contiguous(memory_format=mf)

        def workaround():
            return F.conv2d(xg, wg, padding=1, groups=n).view(n, k, hw, hw)

        ref = workaround()
        t_ref = bench(workaround, runs)
        row(results, name, "torch groups=N", t_ref)
        out, why = try_run(lambda: convkit.conv2d_per_sample(x, w, padding=1))
        if why:
            row(results, name, "convkit", status=why)
            return
        err = (out.float() - ref.float()).abs().max().item()
        row(results, name, "convkit", bench(lambda: convkit.conv2d_per_sample(x, w, padding=1), runs), err,
            ref_ms=t_ref)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_torch.py needs a CUDA GPU.", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} cuDNN {torch.backends.cudnn.version()} "
          f"convkit {convkit.__version__}")
    results = []
    for dtype in (torch.bfloat16, torch.float32):
        bench_bottleneck(results, dtype, args.runs)
    for dtype in (torch.float32, torch.bfloat16):
        bench_per_sample(results, dtype, args.runs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
