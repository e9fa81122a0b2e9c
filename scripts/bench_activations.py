"""What each fused activation costs over the plain 1x1 convolution, one layer at a time.

    python scripts/bench_activations.py [--batch 32] [--dtype bf16] [--activations none,relu,gelu,silu]

The layers: ConvNeXt-T's four widening Linears (C -> 4C, GELU in the model) and two EfficientNet-B0
expansions (SiLU in the model), as convkit.conv2d 1x1 convolutions on channels_last activations with a bias
and each activation in turn. Each cell: median ms (triton.testing.do_bench, L2 flushed between runs); the
last columns divide each activation's time by the plain one's. Markdown on stdout; exit status 0 whenever it
ran, 2 without a GPU.
"""
import argparse
import sys

import torch

import convkit

LAYERS = [("96->384@56", 96, 384, 56), ("192->768@28", 192, 768, 28), ("384->1536@14", 384, 1536, 14),
          ("768->3072@7", 768, 3072, 7), ("24->144@56", 24, 144, 56), ("40->240@28", 40, 240, 28)]
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--activations", default="none,relu,gelu,silu")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_activations: no CUDA device", file=sys.stderr)
        return 2
    import triton.testing

    acts = a.activations.split(",")
    base = acts[0]
    dt = DTYPES[a.dtype]
    torch.manual_seed(0)
    print("| layer | " + " | ".join(f"{act} ms" for act in acts) + " | " +
          " | ".join(f"{act}/{base}" for act in acts[1:]) + " |")
    print("|---|" + "---|" * (2 * len(acts) - 1))
    for name, c, k, hw in LAYERS:
        x = torch.randn(a.batch, c, hw, hw, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
        w = (torch.randn(k, c, 1, 1, device="cuda", dtype=dt) / c ** 0.5).to(memory_format=torch.channels_last)
        b = torch.randn(k, device="cuda", dtype=dt)
        t = {}
        for act in acts:
            def f(act=act):
                return convkit.conv2d(x, w, b, activation=act)
            f()
            torch.cuda.synchronize()
            t[act] = triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median")
        print(f"| {name} | " + " | ".join(f"{t[act]:.4f}" for act in acts) + " | " +
              " | ".join(f"{t[act] / t[base]:.2f}" for act in acts[1:]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
