#!/usr/bin/env python3
"""Markdown tables for docs/perf.md from `convkit bench --json` files.

    python3 scripts/perf_table.py bench_seeds.json bench_resnet50.json [--algos a,b,c] [--fp32-peak 51]

One row per problem: the peer's time and, per algorithm, time and speed-up over the peer (peer ms /
convkit ms, > 1 means convkit is faster); then the suite's geomean per algorithm. With --fp32-peak (TFLOP/s)
and --bandwidth (TB/s) a second table gives each algorithm's fraction of those ceilings on every problem.
"""
import argparse
import json
import math


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--algos", default="", help="comma-separated algorithm columns (default: every one)")
    ap.add_argument("--fp32-peak", type=float, default=0.0, help="TFLOP/s ceiling for the fraction table")
    ap.add_argument("--bandwidth", type=float, default=0.0, help="TB/s ceiling for the fraction table")
    a = ap.parse_args()
    for f in a.files:
        d = json.load(open(f))
        rows = d["rows"]
        peer = next((r["algorithm"] for r in rows if r.get("is_peer")), None)
        algos = [x for x in a.algos.split(",") if x] or list(dict.fromkeys(
            r["algorithm"] for r in rows if not r.get("is_peer")))
        probs = list(dict.fromkeys(r["problem"] for r in rows))
        by = {(r["problem"], r["algorithm"]): r for r in rows}
        unit = "TFLOP/s" if d.get("device") == "cuda" else "GFLOP/s"
        cfg = d.get("config")
        cfg = cfg.get("string", cfg) if isinstance(cfg, dict) else cfg
        print(f"\n**{d.get('suite')}** ({cfg}, {d.get('date')}, convkit {d.get('convkit_version')}"
              f"{'; ' + d['note'] if d.get('note') else ''})\n")
        print("| problem | " + (f"{peer} ms | " if peer else "") + " | ".join(f"{x} ms (vs peer)" for x in algos) + " |")
        print("|---" * (1 + (1 if peer else 0) + len(algos)) + "|")
        logs = {x: [] for x in algos}
        best = []
        for p in probs:
            pr = by.get((p, peer))
            pms = pr["median_ms"] if pr and pr.get("status") == "ok" else None
            cells = [p] + ([f"{pms:.4g}" if pms else pr.get("status", "-") if pr else "-"] if peer else [])
            fastest = None
            for x in algos:
                r = by.get((p, x))
                if not r or r.get("status") != "ok":
                    cells.append(r["status"].split(":")[0] if r else "-")
                    continue
                ms = r["median_ms"]
                fastest = ms if fastest is None else min(fastest, ms)
                if pms:
                    logs[x].append(math.log(pms / ms))
                    cells.append(f"{ms:.4g} ({pms / ms:.2f}x)")
                else:
                    cells.append(f"{ms:.4g}")
            if pms and fastest:
                best.append(math.log(pms / fastest))
            print("| " + " | ".join(cells) + " |")
        geo = [f"{math.exp(sum(v) / len(v)):.2f}x" if v else "-" for v in logs.values()]
        print("| **geomean vs peer** | " + ("| " if peer else "") + " | ".join(geo) + " |")
        if best:
            print(f"\nBest convkit algorithm per problem: geomean {math.exp(sum(best) / len(best)):.2f}x the peer "
                  f"over {len(best)} problems.")
        if a.fp32_peak or a.bandwidth:
            print(f"\nFraction of the measured ceilings (FLOP rate / {a.fp32_peak} {unit}; bytes / "
                  f"{a.bandwidth} TB/s):\n")
            print("| problem | " + " | ".join(algos) + " |")
            print("|---" * (1 + len(algos)) + "|")
            for p in probs:
                cells = [p]
                for x in algos:
                    r = by.get((p, x))
                    if not r or r.get("status") != "ok":
                        cells.append("-")
                        continue
                    rate = r["tflops"] if unit == "TFLOP/s" else r["gflops"]
                    fl = rate / a.fp32_peak if a.fp32_peak else 0
                    bw = r["gbps"] / (a.bandwidth * 1000) if a.bandwidth else 0
                    cells.append(f"{fl:.0%} / {bw:.0%}")
                print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
