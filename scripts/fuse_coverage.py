"""What convkit.fuse folds in whole models, and whether the fused model computes the same function (CPU, fp32).

    python scripts/fuse_coverage.py [--models resnet50,timm:mixnet_s,...] [--hw 96] [--batch 2]

Each model (torchvision by name, timm as timm:<name>; random init, random BatchNorm statistics, eval) is fused
and run on one random input beside the unfused model and a float64 copy of it. A row gives the counts of
fuse's summary (BatchNorms folded against BatchNorm2d modules in the model, activations and residual adds in
the epilogues), what was left and why (the summary's reasons, counted), and two errors against the float64
run: the fused model's and the unfused fp32 model's own, which says how much rounding the model amplifies (a
deep network with random BatchNorm statistics can amplify fp32's rounding to 1e-3 whatever computes it).
A model that fails to build, fuse or run gets a row with the error. Markdown on stdout.
"""
import argparse
import collections
import copy
import sys
import warnings

import torch

import convkit
from bench_cpu_models import randomize_bn, rel_l2  # (scripts/ is the script's own folder)

MODELS = ("resnet50", "resnext50_32x4d", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_v2_s",
          "convnext_tiny", "regnet_y_400mf", "googlenet", "inception_v3", "shufflenet_v2_x1_0", "densenet121",
          "timm:efficientnet_b0", "timm:mixnet_s", "timm:resnet50d", "timm:regnety_008", "timm:convnext_nano",
          "timm:cspdarknet53", "timm:tf_efficientnet_b0", "timm:repvgg_a2")


def build(name):
    if name.startswith("timm:"):
        import timm
        return timm.create_model(name[5:], pretrained=False)
    import torchvision
    kw = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
    return getattr(torchvision.models, name)(weights=None, **kw)


def row(name, hw, batch):
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = build(name).eval()
    n_bn = sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    randomize_bn(model, gen)
    size = max(hw, 75) if name.endswith("inception_v3") else hw
    x = torch.randn(batch, 3, size, size, generator=gen)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(x.double())
        eager = model(x)
        fused = convkit.fuse(model)
        got = fused(x)
    s = fused.convkit_summary
    left = collections.Counter(e.note for e in s.left)
    why = "; ".join(f"{n} x {note}" for note, n in left.most_common()) or "-"
    return (f"| {name} | {s.convs} | {s.bn_folded} / {n_bn} | {s.activations} | {s.residuals} | {why} | "
            f"{rel_l2(got, want):.1e} | {rel_l2(eager, want):.1e} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated; timm models as timm:<name>")
    ap.add_argument("--hw", type=int, default=96, help="input height and width (default 96)")
    ap.add_argument("--batch", type=int, default=2)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    print(f"convkit.fuse on the CPU, fp32, input {args.batch}x3x{args.hw}x{args.hw}, torch {torch.__version__}")
    print()
    print("| model | convolutions | BatchNorms folded / in the model | activations | residual adds | left, and why "
          "| fused vs f64 | eager fp32 vs f64 |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    for name in args.models.split(","):
        try:
            print(row(name.strip(), args.hw, args.batch), flush=True)
        except Exception as e:  # noqa: BLE001  (one model's failure is its row, not the end of the table)
            failed += 1
            print(f"| {name} | error: {type(e).__name__}: {str(e).splitlines()[0][:150]} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
