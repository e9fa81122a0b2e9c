#!/usr/bin/env python3
"""A numpy model of src/cuda/tc/stem_mma.cu's index arithmetic: its plan (plan_of), the staged units of two
taps (st_stage_input, the one-pixel units of an odd S, even columns only at an even stride), the filter units
and the unit table (st_stage_filters), the A and B row addresses each lane hands ldmatrix.x4, and the C
fragment's store, written as the kernel writes them and checked against a direct convolution. Runs on the CPU
in seconds:

    python3 scripts/emulate_stem_mma.py [RANDOM]     (exit 1 on a mismatch; RANDOM more specs, default 30)

The PTX facts it encodes (PTX ISA, ldmatrix and mma.m16n8k16): ldmatrix's lanes 8i..8i+7 give the rows of
matrix i; for A, matrices 0..3 are (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15,
k 8-15); for B (rows = output channels), (n 0-7, k 0-7), (n 0-7, k 8-15), then the same for n 8-15; C's c0, c1
at (g, 2c..), c2, c3 at (g+8, 2c..), with g = lane / 4, c = lane % 4.
"""
import itertools
import re
import sys

import numpy as np

THREADS, MAX_C, MAX_M, UNIT, SMEM_BUDGET = 256, 4, 128, 16, 96 * 1024


def parse(spec):
    d = dict(n=1, c=1, h=1, w=1, k=1, r=1, s=1, p=0, u=1, d=1)
    for key, val in re.findall(r"([a-z]+)(\d+)", spec):
        d[key] = int(val)
    n, c, h, w, k, r, s = (d[x] for x in "nchwkrs")
    ph = pw = d["p"]
    sh = sw = d["u"]
    dh = dw = d["d"]
    P = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    Q = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
    return dict(n=n, c=c, h=h, w=w, k=k, r=r, s=s, ph=ph, pw=pw, sh=sh, sw=sw, dh=dh, dw=dw, P=P, Q=Q)


def plan_of(g):
    t = {}
    t["bn"] = 32 if g["k"] <= 32 else 64
    t["de"] = 2 if g["sw"] % 2 == 0 else 1
    t["sp"] = (g["s"] + 1) // 2
    t["single"] = g["s"] % 2 == 1
    t["units"] = g["r"] * t["sp"]
    t["steps"] = (t["units"] + 1) // 2
    t["wstride"] = (2 * t["steps"]) | 1
    t["smem_w"] = t["bn"] * t["wstride"] * UNIT
    P, Q = g["P"], g["Q"]
    t["tq"] = min(Q, 16)
    t["tp"] = max(1, min(P, MAX_M // t["tq"]))
    while True:
        t["ih"] = (t["tp"] - 1) * g["sh"] + (g["r"] - 1) * g["dh"] + 1
        t["iw"] = (t["tq"] - 1) * g["sw"] + 2 * (t["sp"] - 1) * g["dw"] + 1
        t["iws"] = (t["iw"] + t["de"] - 1) // t["de"]
        t["smem_in"] = t["ih"] * t["iws"] * UNIT
        t["smem"] = (2 if t["single"] else 1) * t["smem_in"] + t["smem_w"] + UNIT + 2 * t["steps"] * 4
        if t["smem"] <= SMEM_BUDGET:
            break
        if t["tp"] > 1:
            t["tp"] = (t["tp"] + 1) // 2
            continue
        if t["tq"] > 8:
            t["tq"] = (t["tq"] + 1) // 2
            continue
        break
    t["mtiles"] = (t["tp"] * t["tq"] + 15) // 16
    t["tiles_p"] = (P + t["tp"] - 1) // t["tp"]
    t["tiles_q"] = (Q + t["tq"] - 1) // t["tq"]
    t["tiles"] = g["n"] * t["tiles_p"] * t["tiles_q"]
    t["tq_mul"] = (65536 + t["tq"] - 1) // t["tq"]
    return t


def emulate(g, t, x, wt, grid_x):
    """The kernel on x [N][H][W][C] and wt [K][R][S][C] (float64), every block of a grid_x x kblocks grid."""
    n_, c_, k_ = g["n"], g["c"], g["k"]
    bn = t["bn"]
    warps_n = bn // 32
    warps_m = 8 // warps_n
    kwm, kwn = 8 // warps_m, 4
    y = np.full((n_, g["P"], g["Q"], k_), np.nan)
    # shared memory as 2-byte elements: s_pair, s_single, s_w, s_zero (byte offsets as in the kernel)
    e_in = t["smem_in"] // 2
    off_single = e_in
    off_w = off_single + (e_in if t["single"] else 0)
    off_zero = off_w + t["smem_w"] // 2
    smem = np.full(off_zero + 8, np.nan)

    def pixel(n, h, w):
        v = np.zeros(4)
        if 0 <= h < g["h"] and 0 <= w < g["w"]:
            v[:c_] = x[n, h, w, :]
        return v

    for by in range((k_ + bn - 1) // bn):
        k0 = by * bn
        # st_stage_filters
        for i in range(bn * t["wstride"]):
            nl, u = divmod(i, t["wstride"])
            k = k0 + nl
            e = np.zeros(8)
            if u < t["units"] and k < k_:
                r, j = divmod(u, t["sp"])
                s0 = 2 * j
                for jj in range(8):
                    s, c = s0 + jj // 4, jj % 4
                    if s < g["s"] and c < c_:
                        e[jj] = wt[k, r, s, c]
            smem[off_w + i * 8: off_w + i * 8 + 8] = e
        smem[off_zero: off_zero + 8] = 0
        s_unit = []
        for u in range(2 * t["steps"]):
            e = -1
            if u < t["units"]:
                r, j = divmod(u, t["sp"])
                e = (r * g["dh"] * t["iws"] + (2 * j * g["dw"]) // t["de"]) * UNIT
                if t["single"] and j == t["sp"] - 1:
                    e += t["smem_in"]
            s_unit.append(e)
        for bx in range(grid_x):
            for tile in range(bx, t["tiles"], grid_x):
                tq_i = tile % t["tiles_q"]
                rest = tile // t["tiles_q"]
                tp_i = rest % t["tiles_p"]
                n = rest // t["tiles_p"]
                p0, q0 = tp_i * t["tp"], tq_i * t["tq"]
                # st_stage_input
                smem[:off_w] = np.nan
                h0, w0 = p0 * g["sh"] - g["ph"], q0 * g["sw"] - g["pw"]
                for i in range(t["ih"] * t["iws"]):
                    yy, slot = divmod(i, t["iws"])
                    h, w = h0 + yy, w0 + slot * t["de"]
                    a, b = pixel(n, h, w), pixel(n, h, w + g["dw"])
                    smem[i * 8: i * 8 + 8] = np.concatenate([a, b])
                    if t["single"]:
                        smem[off_single + i * 8: off_single + i * 8 + 8] = np.concatenate([a, np.zeros(4)])
                for warp in range(8):
                    wm, wn = divmod(warp, warps_n)
                    if wm * kwm >= t["mtiles"]:
                        continue
                    n_base = wn * kwn * 8
                    # each lane's A row base (arow) and B row address (w_addr), in bytes
                    arow = np.zeros((32, kwm), dtype=np.int64)
                    w_addr = np.zeros(32, dtype=np.int64)
                    for lane in range(32):
                        for i in range(kwm):
                            m = (wm * kwm + i) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8
                            if m >= t["tp"] * t["tq"]:
                                m = 0
                            py = (m * t["tq_mul"]) >> 16
                            px = m - py * t["tq"]
                            assert py == m // t["tq"]
                            arow[lane, i] = (py * g["sh"] * t["iws"] + (px * g["sw"]) // t["de"]) * UNIT
                        b_row = n_base + (lane & 7) + ((lane >> 4) & 1) * 8
                        b_unit = (lane >> 3) & 1
                        w_addr[lane] = off_w * 2 + (b_row * t["wstride"] + b_unit) * UNIT
                    acc = np.zeros((kwm, kwn, 16, 8))  # [i][j] the 16 x 8 tile of the warp
                    for step in range(t["steps"]):
                        # B: ldmatrix.x4 at w_addr + step*32 + j*8*wstride*16, for j = 0, 2
                        bmat = np.zeros((kwn, 8, 16))  # [j][n][k]
                        for j in range(0, kwn, 2):
                            rows = []
                            for lane in range(32):
                                ad = w_addr[lane] + step * 2 * UNIT + j * 8 * t["wstride"] * UNIT
                                assert ad % 16 == 0
                                rows.append(smem[ad // 2: ad // 2 + 8])
                            # matrices: 0 = lanes 0-7 (n 0-7 of j, k 0-7), 1 = 8-15 (k 8-15), 2, 3 = j + 1
                            bmat[j, :, 0:8] = rows[0:8]
                            bmat[j, :, 8:16] = rows[8:16]
                            bmat[j + 1, :, 0:8] = rows[16:24]
                            bmat[j + 1, :, 8:16] = rows[24:32]
                        for i in range(kwm):
                            rows = []
                            for lane in range(32):
                                ue = s_unit[2 * step + (lane >> 4)]
                                ad = off_zero * 2 if ue < 0 else ue + arow[lane, i]
                                assert ad % 16 == 0
                                rows.append(smem[ad // 2: ad // 2 + 8])
                            amat = np.zeros((16, 16))
                            amat[0:8, 0:8] = rows[0:8]
                            amat[8:16, 0:8] = rows[8:16]
                            amat[0:8, 8:16] = rows[16:24]
                            amat[8:16, 8:16] = rows[24:32]
                            for j in range(kwn):
                                acc[i, j] += amat @ bmat[j].T
                    # the store: lane's rows lane/4 (+8), columns 2*(lane%4) (+1)
                    for lane in range(32):
                        for i, hf, j, e in itertools.product(range(kwm), range(2), range(kwn), range(2)):
                            m = (wm * kwm + i) * 16 + lane // 4 + hf * 8
                            if m >= t["tp"] * t["tq"]:
                                continue
                            py = (m * t["tq_mul"]) >> 16
                            px = m - py * t["tq"]
                            p, q = p0 + py, q0 + px
                            if p >= g["P"] or q >= g["Q"]:
                                continue
                            k = k0 + n_base + j * 8 + 2 * (lane % 4) + e
                            if k >= k_:
                                continue
                            assert np.isnan(y[n, p, q, k]), "stored twice"
                            y[n, p, q, k] = acc[i, j, lane // 4 + hf * 8, 2 * (lane % 4) + e]
    return y


def reference(g, x, wt):
    y = np.zeros((g["n"], g["P"], g["Q"], g["k"]))
    for r, s in itertools.product(range(g["r"]), range(g["s"])):
        for p, q in itertools.product(range(g["P"]), range(g["Q"])):
            h, w = p * g["sh"] - g["ph"] + r * g["dh"], q * g["sw"] - g["pw"] + s * g["dw"]
            if 0 <= h < g["h"] and 0 <= w < g["w"]:
                y[:, p, q, :] += x[:, h, w, :] @ wt[:, r, s, :].T
    return y


SPECS = ["n2c3h33w35k64r7s7p3u2", "n1c3h32w32k32r3s3p1u2", "n2c3h16w16k96r4s4u4", "n1c3h9w11k24r1s1",
         "n3c1h13w17k16r3s3p1", "n1c2h15w9k40r5s5p4d2", "n1c4h12w14k64r2s5p1u3", "n1c3h11w10k13r5s2p2u2",
         "n1c3h1w1k32r1s1", "n1c3h1w41k48r1s3p1", "n2c3h23w19k130r3s3p3u1", "n1c1h7w7k8r7s7p3",
         "n1c4h40w36k72r6s6p2u2d1", "n1c3h20w24k64r3s3p1u1d3"]


def random_specs(rng, count):
    out = []
    while len(out) < count:
        c, r, s, u, d = (int(v) for v in (rng.integers(1, 5), rng.integers(1, 8), rng.integers(1, 8),
                                          rng.integers(1, 5), rng.integers(1, 4)))
        h, w, p = int(rng.integers(1, 30)), int(rng.integers(1, 40)), int(rng.integers(0, 5))
        k, n = int(rng.choice([8, 16, 24, 32, 40, 64, 72, 100])), int(rng.integers(1, 3))
        spec = f"n{n}c{c}h{h}w{w}k{k}r{r}s{s}p{p}u{u}d{d}"
        g = parse(spec)
        if g["P"] >= 1 and g["Q"] >= 1:
            out.append(spec)
    return out


def main():
    rng = np.random.default_rng(1)
    bad = 0
    for spec in SPECS + random_specs(rng, int(sys.argv[1]) if len(sys.argv) > 1 else 30):
        g = parse(spec)
        t = plan_of(g)
        x = rng.integers(-2, 3, size=(g["n"], g["h"], g["w"], g["c"])).astype(np.float64)
        wt = rng.integers(-2, 3, size=(g["k"], g["r"], g["s"], g["c"])).astype(np.float64)
        for grid_x in sorted({1, 3, t["tiles"]}):
            y = emulate(g, t, x, wt, grid_x)
            ok = np.array_equal(y, reference(g, x, wt))
            bad += not ok
            print(f"{spec:28s} grid.x {grid_x:4d}  tile {t['tp']}x{t['tq']}  units {t['units']}  "
                  f"smem {t['smem']:6d}  {'ok' if ok else 'MISMATCH'}")
        # an infinite input pixel reaches only the outputs whose window holds it
        xi = x.copy()
        hi, wi = min(5, g["h"] - 1), min(6, g["w"] - 1)
        xi[0, hi, wi, 0] = np.inf
        with np.errstate(invalid="ignore"):
            y = emulate(g, t, xi, wt, t["tiles"])
        sees = np.zeros((g["P"], g["Q"]), dtype=bool)
        for p, q, r, s_ in itertools.product(range(g["P"]), range(g["Q"]), range(g["r"]), range(g["s"])):
            if p * g["sh"] - g["ph"] + r * g["dh"] == hi and q * g["sw"] - g["pw"] + s_ * g["dw"] == wi:
                sees[p, q] = True
        leak = ~np.isfinite(y[0]) & ~sees[:, :, None]
        bad += int(leak.any()) + int(not np.isfinite(y[1:]).all())
        print(f"{spec:28s} inf pixel: {'ok' if not leak.any() else 'LEAKS'}")
    print("all exact" if not bad else f"{bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
