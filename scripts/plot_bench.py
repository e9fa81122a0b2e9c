#!/usr/bin/env python3
"""Charts from `convkit bench --json` output (needs only json + matplotlib).

  python3 scripts/plot_bench.py bench.json [more.json ...] -o chart.png \
      --peak fp32=51 --peak tf32=364 --peak bf16=686 --bandwidth 4.26

writes chart.png with two panels (or, with `-o PREFIX` not ending in .png, two files):
  <out>_speedup.png   speed-up over the peer (peer ms / algorithm ms; > 1: convkit faster) per problem and
                      algorithm, grouped bars on a log scale;
  <out>_roofline.png  achieved TFLOP/s against arithmetic intensity (FLOPs / minimum bytes), under the roofline
                      of the measured ceilings given with --peak (TFLOP/s) and --bandwidth (TB/s).

Only rows with status "ok" are drawn. Several JSON files (e.g. f32 and tf32 runs) are drawn together; their
algorithms are labelled with the config when the configs differ.
"""
import argparse
import json
import math
import sys


def load_rows(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for r in doc.get("rows", []):
            r = dict(r)
            r["_file"] = path
            rows.append(r)
    if not rows:
        sys.exit("plot_bench.py: no rows in " + ", ".join(paths))
    configs = {r.get("config", "") for r in rows}
    for r in rows:
        r["_label"] = r["algorithm"] + (f" [{r.get('config', '')}]" if len(configs) > 1 else "")
    return rows


def ordered(values):
    seen, out = set(), []
    for v in values:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def speedup_rows(rows):
    return [r for r in rows if r["status"] == "ok" and not r.get("is_peer") and r.get("ratio_vs_peer")]


def speedup_width(rows):
    ok = speedup_rows(rows)
    return min(16, max(8, 0.35 * len(ordered(r["problem"] for r in ok)) * len(ordered(r["_label"] for r in ok)) + 3))


def plot_speedup(rows, ax):
    ok = speedup_rows(rows)
    if not ok:
        ax.text(0.5, 0.5, "no speed-up ratios: the peer did not run", ha="center", va="center")
        ax.set_axis_off()
        return
    problems = ordered(r["problem"] for r in ok)
    labels = ordered(r["_label"] for r in ok)
    ratio = {(r["problem"], r["_label"]): r["ratio_vs_peer"] for r in ok}
    peers = ordered(r.get("peer", "") for r in ok)
    width = 0.8 / max(1, len(labels))
    ax.set_axisbelow(True)
    for i, label in enumerate(labels):
        xs, ys = [], []
        for j, p in enumerate(problems):
            if (p, label) in ratio:
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(ratio[(p, label)])
        ax.bar(xs, ys, width=width, label=label, bottom=0)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_yscale("log")
    ax.set_xticks(range(len(problems)))
    ax.set_xticklabels(problems, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel(f"speed-up over {', '.join(peers)} (peer ms / algorithm ms)")
    ax.set_title("convkit vs the peer: > 1 means convkit is faster")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(axis="y", which="both", alpha=0.3)


def plot_roofline(rows, ax, peaks, bandwidth):
    ok = [r for r in rows if r["status"] == "ok" and r.get("tflops")]
    if not ok:
        ax.text(0.5, 0.5, "no timed rows", ha="center", va="center")
        ax.set_axis_off()
        return
    ax.set_axisbelow(True)
    markers = "osD^v<>pPX*h"
    for i, label in enumerate(ordered(r["_label"] for r in ok)):
        pts = [r for r in ok if r["_label"] == label]
        ax.scatter([r["arithmetic_intensity"] for r in pts], [r["tflops"] for r in pts], label=label,
                   marker=markers[i % len(markers)], s=30, alpha=0.85)
    ai = [r["arithmetic_intensity"] for r in ok]
    lo, hi = min(ai) / 2, max(ai) * 2
    xs = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    for name, peak in peaks:
        if bandwidth:
            ax.plot(xs, [min(peak, x * bandwidth) for x in xs], linewidth=1.2, label=f"roof: {name} {peak:g} TFLOP/s")
        else:
            ax.axhline(peak, linewidth=1.2, linestyle="--", label=f"peak: {name} {peak:g} TFLOP/s")
    if bandwidth and not peaks:
        ax.plot(xs, [x * bandwidth for x in xs], linewidth=1.2, label=f"memory: {bandwidth:g} TB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per minimum byte: each tensor moved once)")
    ax.set_ylabel("achieved TFLOP/s")
    title = "achieved rate under the roofline of measured ceilings"
    if bandwidth:
        title += f" ({bandwidth:g} TB/s)"
    if not peaks and not bandwidth:
        title += " (none given: --peak, --bandwidth)"
    ax.set_title(title)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


def parse_peak(text):
    name, sep, value = text.partition("=")
    try:
        return (name if sep else "peak", float(value if sep else name))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=TFLOPS, e.g. fp32=51, got '{text}'")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="files written by `convkit bench --json`")
    ap.add_argument("-o", "--out", default="bench",
                    help="a .png file (both charts in one figure) or a prefix for <prefix>_speedup.png and "
                         "<prefix>_roofline.png (default: bench)")
    ap.add_argument("--peak", action="append", type=parse_peak, default=[],
                    help="a measured compute ceiling NAME=TFLOP/s (repeatable), e.g. fp32=51")
    ap.add_argument("--bandwidth", type=float, default=0.0, help="the measured memory ceiling in TB/s, e.g. 4.26")
    args = ap.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load_rows(args.json)
    if args.out.endswith(".png"):
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(speedup_width(rows), 13),
                                          gridspec_kw={"height_ratios": [1, 1.1]})
        plot_speedup(rows, top)
        plot_roofline(rows, bottom, args.peak, args.bandwidth)
        save(fig, plt, args.out)
        return
    fig, ax = plt.subplots(figsize=(speedup_width(rows), 6))
    plot_speedup(rows, ax)
    save(fig, plt, args.out + "_speedup.png")
    fig, ax = plt.subplots(figsize=(9, 6))
    plot_roofline(rows, ax, args.peak, args.bandwidth)
    save(fig, plt, args.out + "_roofline.png")


def save(fig, plt, path):
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    print("wrote", path)


if __name__ == "__main__":
    main()
