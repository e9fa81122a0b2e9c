#!/usr/bin/env python3
"""The host cost of convkit's op and what it does to compiled models.

  python3 scripts/host_overhead.py [--device cpu|cuda] [--model resnet50] [--threads 1]

Prints the time of one tiny convolution (4->4 1x1 on 4x4, batch 1: nothing but host work) called as
torch.ops.convkit.conv2d under no_grad, below autograd and under inference_mode, next to F.conv2d; then a
torchvision model at batch 1, 32x32, eval, no_grad: PyTorch eager, convkit.fuse eager and
torch.compile(convkit.fuse(model)), median of 30 runs after 5 warm-ups (CUDA: synchronised per run).
"""
import argparse
import time

import torch
import torchvision

import convkit


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
    ts.sort()
    return ts[len(ts) // 2] * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    x = torch.randn(1, 4, 4, 4, device=dev)
    w = torch.randn(4, 4, 1, 1, device=dev)
    b = torch.randn(4, device=dev)
    op = torch.ops.convkit.conv2d.default
    args = (x, w, b, [1, 1], [0, 0], [1, 1], 1, "relu", None, "auto")
    per_call = lambda fn: median_ms(lambda: [fn() for _ in range(1000)], sync, n=7, warm=1)  # ms per 1000 = us
    with torch.no_grad():
        print(f"op, no_grad            {per_call(lambda: op(*args)):7.2f} us")
        with torch._C._AutoDispatchBelowAutograd():
            print(f"op, below autograd     {per_call(lambda: op(*args)):7.2f} us")
        print(f"convkit.conv2d         {per_call(lambda: convkit.conv2d(x, w, b, activation='relu')):7.2f} us")
        print(f"F.conv2d               {per_call(lambda: torch.nn.functional.conv2d(x, w, b)):7.2f} us")
    with torch.inference_mode():
        print(f"op, inference_mode     {per_call(lambda: op(*args)):7.2f} us")
    m = getattr(torchvision.models, a.model)(weights=None).eval().to(dev)
    f = convkit.fuse(m)
    c = torch.compile(f, fullgraph=True)
    xm = torch.randn(1, 3, 32, 32, device=dev)
    with torch.no_grad():
        print(f"{a.model} torch eager            {median_ms(lambda: m(xm), sync):8.3f} ms")
        print(f"{a.model} convkit.fuse eager     {median_ms(lambda: f(xm), sync):8.3f} ms")
        print(f"{a.model} torch.compile(fuse)    {median_ms(lambda: c(xm), sync):8.3f} ms")


if __name__ == "__main__":
    main()
