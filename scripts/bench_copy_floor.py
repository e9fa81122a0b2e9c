#!/usr/bin/env python3
"""What memory traffic costs at the depthwise layers' sizes on a GPU: y.copy_(x), a per-channel multiply
(torch.mul by a [1, C, 1, 1] tensor) and torch's depthwise convolution (cudnn.benchmark), on bf16
channels_last tensors of batch 32; median ms (triton.testing.do_bench: CUDA events, warm-up, the L2 flushed
before each run). Prints the markdown table of docs/perf.md (2026-12-05): the copy rate at a layer's own
size is the floor a depthwise kernel is held to."""
import argparse

LAYERS = [(144, 56, 1, 3), (32, 112, 1, 3), (96, 112, 2, 3), (960, 7, 1, 3), (96, 56, 1, 7), (240, 28, 1, 5),
          (384, 14, 1, 3)]  # (C, H = W, stride, filter size)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rep-ms", type=int, default=100, help="milliseconds of timed runs a measurement")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    import torch
    torch.backends.cudnn.benchmark = True
    import triton.testing

    def timed(fn):  # CUDA events, warm-up, the L2 flushed before each run, as the other scripts time
        return triton.testing.do_bench(fn, warmup=25, rep=args.rep_ms, return_mode="median")

    print("| layer | x + y MB | copy ms | copy TB/s | x*w[c] ms | torch conv ms | conv TB/s (x + y) |")
    print("|---|---|---|---|---|---|---|")
    for c, h, u, k in LAYERS:
        x = torch.randn(args.batch, c, h, h, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        y = torch.empty_like(x)
        w = torch.randn(c, 1, k, k, device="cuda", dtype=torch.bfloat16)
        scale = torch.randn(1, c, 1, 1, device="cuda", dtype=torch.bfloat16)
        conv = lambda: torch.nn.functional.conv2d(x, w, None, u, k // 2, 1, c)
        mb = (x.numel() + conv().numel()) * 2 / 1e6
        t_copy, t_mul, t_conv = timed(lambda: y.copy_(x)), timed(lambda: torch.mul(x, scale, out=y)), timed(conv)
        copy_mb = 2 * x.numel() * 2 / 1e6
        print(f"| {k}x{k}{' s2' if u == 2 else ''} {c}@{h} | {mb:.1f} | {t_copy:.4f} | {copy_mb / t_copy / 1e3:.2f} | "
              f"{t_mul:.4f} | {t_conv:.4f} | {mb / t_conv / 1e3:.2f} |")


if __name__ == "__main__":
    main()
