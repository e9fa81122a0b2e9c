#!/usr/bin/env python3
"""Same-machine A/B of two `convkit bench --json` series: per problem the best convkit algorithm's time in
each tree (the median over that tree's rounds), its ratio to the peer (cuDNN, timed in the same process),
and B's speed-up over A; then the geomeans.

    python3 scripts/ab_compare.py --a a_r1.json a_r2.json --b b_r1.json b_r2.json [--label-a OLD --label-b NEW]

A problem counts only where both trees have an ok row and a peer time. Markdown on stdout.
"""
import argparse
import json
import math
import statistics


def best_times(files):
    """{problem: (best convkit ms, peer ms)}, the medians over the files (the rounds) of each."""
    convkit, peer = {}, {}
    for f in files:
        rows = json.load(open(f))["rows"]
        for r in rows:
            if r.get("status") != "ok":
                continue
            d = peer if r.get("is_peer") else convkit
            d.setdefault(r["problem"], {}).setdefault(f, []).append(r["median_ms"])
    out = {}
    for p, per_file in convkit.items():
        if p not in peer:
            continue
        best = statistics.median(min(v) for v in per_file.values())
        out[p] = (best, statistics.median(min(v) for v in peer[p].values()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", nargs="+", required=True)
    ap.add_argument("--b", nargs="+", required=True)
    ap.add_argument("--label-a", default="A")
    ap.add_argument("--label-b", default="B")
    a = ap.parse_args()
    ta, tb = best_times(a.a), best_times(a.b)
    probs = [p for p in ta if p in tb]
    la, lb = a.label_a, a.label_b
    print(f"| problem | peer ms ({la} / {lb}) | {la} ms | {la} x peer | {lb} ms | {lb} x peer | {lb} / {la} |")
    print("|---|---|---|---|---|---|---|")
    ga, gb, gab = [], [], []
    for p in probs:
        (ma, pa), (mb, pb) = ta[p], tb[p]
        ga.append(math.log(pa / ma))
        gb.append(math.log(pb / mb))
        gab.append(math.log(ma / mb))
        print(f"| {p} | {pa:.4f} / {pb:.4f} | {ma:.4f} | {pa / ma:.2f}x | {mb:.4f} | {pb / mb:.2f}x | {ma / mb:.3f}x |")
    if probs:
        g = lambda v: math.exp(sum(v) / len(v))  # noqa: E731
        print(f"| **geomean** ({len(probs)} problems) | | | **{g(ga):.3f}x** | | **{g(gb):.3f}x** | **{g(gab):.3f}x** |")
    else:
        print("no problem with ok rows in both trees")
    return 0 if probs else 1


if __name__ == "__main__":
    raise SystemExit(main())
