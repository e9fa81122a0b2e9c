"""convkit.layer_norm against torch's F.layer_norm (and torch.compile's fused norm) on ConvNeXt's norms:
channels-last activations [N, H, W, C] normalized over C, at batch 32.

    python scripts/bench_layer_norm.py [--dtype bf16] [--batch 32]

Each row: median ms (triton.testing.do_bench: CUDA events, warm-up, L2 flushed between runs), the largest
difference from F.layer_norm in float32, and the floor: x read and y written once at --bw TB/s (the H200's
measured copy rate, ../shared/ANCHORS.md).
"""
import argparse

import torch
import torch.nn.functional as F

import convkit

SHAPES = [(56, 96), (28, 192), (14, 384), (7, 768), (56, 384)]  # (H = W, C); the last: a 4C-wide row


def bench(fn):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--bw", type=float, default=4.26)
    a = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    print(f"| x (N, H, W, C) | torch | torch.compile | convkit | torch / convkit | max diff | floor |")
    print("|---|---|---|---|---|---|---|")
    for hw, c in SHAPES:
        x = torch.randn(a.batch, hw, hw, c, device="cuda", dtype=dt)
        w = torch.rand(c, device="cuda", dtype=dt) + 0.5
        b = torch.randn(c, device="cuda", dtype=dt)
        comp = torch.compile(lambda t: F.layer_norm(t, (c,), w, b, 1e-6))
        with torch.no_grad():
            ref = F.layer_norm(x.float(), (c,), w.float(), b.float(), 1e-6)
            diff = (convkit.layer_norm(x, w, b, 1e-6).float() - ref).abs().max().item()
            t_torch = bench(lambda: F.layer_norm(x, (c,), w, b, 1e-6))
            t_comp = bench(lambda: comp(x))
            t_ck = bench(lambda: convkit.layer_norm(x, w, b, 1e-6))
        floor = 2 * x.numel() * x.element_size() / (a.bw * 1e9)
        print(f"| {a.batch}x{hw}x{hw}x{c} | {t_torch:.4f} | {t_comp:.4f} | {t_ck:.4f} | {t_torch / t_ck:.2f}x | "
              f"{diff:.1e} | {floor:.4f} |", flush=True)


if __name__ == "__main__":
    main()
