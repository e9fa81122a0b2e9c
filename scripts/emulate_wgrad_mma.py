#!/usr/bin/env python3
"""A numpy model of src/cuda/tc/wgrad_mma.cu's index arithmetic: the cp.async pieces into swizzled stages,
ldmatrix.x4.trans fragments and mma.sync m16n8k16's register layout, the slices and their reduction, written
as the kernel writes them and checked against a direct weight gradient. Runs on the CPU in seconds:

    python3 scripts/emulate_wgrad_mma.py      (exit 1 on a mismatch)

The PTX facts it encodes (PTX ISA, ldmatrix and mma.m16n8k16): ldmatrix's lanes 8i..8i+7 give the rows of
matrix i; .trans hands lane t the elements (2*(t%4), t/4) and (2*(t%4)+1, t/4) of each matrix; A's fragment
a0..a3 = rows g, g+8 x k 2c.., then k 2c+8..; B's b0, b1 = k 2c.. and 2c+8.. at column g; C's c0, c1 at
(g, 2c..), c2, c3 at (g+8, 2c..), with g = lane / 4, c = lane % 4.
"""
import itertools
import sys

import numpy as np

BM, BN, BL, THREADS = 64, 128, 32, 256


def reference(x, gz, n, c, h, w, k, r, s, ph, pw, sh, sw, dh, dw, P, Q):
    dwt = np.zeros((k, r, s, c))
    for fr, fs in itertools.product(range(r), range(s)):
        for p, q in itertools.product(range(P), range(Q)):
            hh, ww = p * sh - ph + fr * dh, q * sw - pw + fs * dw
            if 0 <= hh < h and 0 <= ww < w:
                dwt[:, fr, fs, :] += gz[:, p, q, :].T @ x[:, hh, ww, :]
    return dwt.reshape(k, r * s * c)


def emulate(x, gz, n, c, h, w, k, r, s, ph, pw, sh, sw, dh, dw, P, Q, slices_wanted):
    L, rsc = n * P * Q, r * s * c
    chunks = (L + BL - 1) // BL
    slices = max(1, min(slices_wanted, max(1, chunks // 4)))
    cps = (chunks + slices - 1) // slices
    slices = (chunks + cps - 1) // cps
    xf, gf = x.reshape(-1), gz.reshape(-1)
    partial = np.full((slices, k, rsc), np.nan)
    for by, bx, bz in itertools.product(range((k + BM - 1) // BM), range((rsc + BN - 1) // BN), range(slices)):
        k0, j0 = by * BM, bx * BN
        acc = np.zeros((8, 32, 2, 4, 4))  # warp, lane, mt, nt, e
        c_begin = bz * cps
        nch = min(chunks, c_begin + cps) - c_begin
        for it in range(nch):
            sa = np.full(BL * BM, np.nan)  # the stage as elements: 32 rows x 64 (gz), 32 x 128 (x)
            sb = np.full(BL * BN, np.nan)
            l0 = (c_begin + it) * BL
            for tid in range(THREADS):
                a_row, a_piece = tid >> 3, tid & 7
                a_k = k0 + a_piece * 8
                dst = a_row * 64 + ((a_piece ^ (a_row & 7)) << 3)
                l = l0 + a_row
                sa[dst:dst + 8] = gf[l * k + a_k:l * k + a_k + 8] if (a_k < k and l < L) else 0
                b_row, b_piece = tid >> 4, tid & 15
                j = j0 + b_piece * 8
                b_in = j < rsc
                tap = j // c if b_in else 0
                bc = j - tap * c if b_in else 0
                fr, fs = tap // s, tap % s
                oh, ow = fr * dh - ph, fs * dw - pw
                bdst = b_row * 128 + (((b_piece & 8) | ((b_piece ^ b_row) & 7)) << 3)
                for i in range(2):
                    l = l0 + b_row + 16 * i
                    vals = np.zeros(8)
                    if b_in and l < L:
                        img, pq = divmod(l, P * Q)
                        p, q = divmod(pq, Q)
                        hh, ww = p * sh + oh, q * sw + ow
                        if 0 <= hh < h and 0 <= ww < w:
                            o = ((img * h + hh) * w + ww) * c + bc
                            vals = xf[o:o + 8]
                    sb[bdst + i * 16 * 128:bdst + i * 16 * 128 + 8] = vals
            for warp in range(8):
                wm, wn = warp >> 2, warp & 3
                for kk in range(2):
                    af = np.zeros((2, 32, 4, 2))
                    bf = np.zeros((2, 32, 4, 2))
                    for mt in range(2):
                        addr = []
                        for lane in range(32):
                            row = kk * 16 + (lane & 7) + ((lane >> 4) << 3)
                            piece = (wm * 32 + mt * 16 + ((lane >> 3) & 1) * 8) >> 3
                            addr.append(row * 64 + ((piece ^ (row & 7)) << 3))
                        af[mt] = ldmatrix_trans(sa, addr)
                    for np_ in range(2):
                        addr = []
                        for lane in range(32):
                            row = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8
                            piece = (wn * 32 + np_ * 16 + (lane >> 4) * 8) >> 3
                            addr.append(row * 128 + (((piece & 8) | ((piece ^ row) & 7)) << 3))
                        bf[np_] = ldmatrix_trans(sb, addr)
                    for mt, nt in itertools.product(range(2), range(4)):
                        b = bf[nt >> 1][:, (nt & 1) * 2:(nt & 1) * 2 + 2]
                        acc[warp, :, mt, nt] += mma(af[mt], b)
        for warp, lane in itertools.product(range(8), range(32)):
            wm, wn = warp >> 2, warp & 3
            g, t4 = lane >> 2, lane & 3
            for mt, half, nt in itertools.product(range(2), range(2), range(4)):
                kq = k0 + wm * 32 + mt * 16 + g + half * 8
                col = j0 + wn * 32 + nt * 8 + 2 * t4
                if kq < k and col < rsc:
                    partial[bz, kq, col:col + 2] = acc[warp, lane, mt, nt, half * 2:half * 2 + 2]
    return partial.sum(axis=0)


def ldmatrix_trans(smem, addr):
    """[lane][reg][2]: lane t gets (row 2*(t%4) + e, column t/4) of matrix reg, whose rows lanes 8reg.. give."""
    out = np.zeros((32, 4, 2))
    for t, reg, e in itertools.product(range(32), range(4), range(2)):
        row_lane = reg * 8 + 2 * (t % 4) + e
        out[t, reg, e] = smem[addr[row_lane] + t // 4]
    return out


def mma(a, b):
    """a: [lane][4][2] (a0..a3), b: [lane][2][2] (b0, b1) -> d [lane][4] of the 16x8 product."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        for e in range(2):
            A[g, 2 * c + e], A[g + 8, 2 * c + e] = a[lane, 0, e], a[lane, 1, e]
            A[g, 2 * c + 8 + e], A[g + 8, 2 * c + 8 + e] = a[lane, 2, e], a[lane, 3, e]
            B[2 * c + e, g], B[2 * c + 8 + e, g] = b[lane, 0, e], b[lane, 1, e]
    C = A @ B
    d = np.zeros((32, 4))
    for lane in range(32):
        g, c = lane >> 2, lane & 3
        d[lane] = [C[g, 2 * c], C[g, 2 * c + 1], C[g + 8, 2 * c], C[g + 8, 2 * c + 1]]
    return d


CASES = [  # n, c, h, w, k, r, s, ph, pw, sh, sw, dh, dw, slices
    (1, 8, 5, 5, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    (2, 16, 7, 9, 24, 3, 3, 1, 1, 1, 1, 1, 1, 3),
    (3, 24, 11, 13, 72, 3, 3, 1, 1, 2, 2, 1, 1, 2),
    (2, 8, 14, 14, 40, 7, 7, 3, 3, 2, 2, 1, 1, 4),
    (1, 16, 10, 12, 8, 5, 3, 2, 2, 1, 1, 2, 2, 1),
    (2, 8, 6, 6, 16, 3, 3, 3, 3, 1, 1, 1, 1, 2),
    (1, 32, 9, 9, 16, 1, 1, 0, 0, 2, 2, 1, 1, 1),
]


def main():
    rng = np.random.default_rng(0)
    bad = 0
    for case in CASES:
        n, c, h, w, k, r, s, ph, pw, sh, sw, dh, dw, sl = case
        P = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
        Q = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
        x = rng.integers(-3, 4, (n, h, w, c)).astype(float)
        gz = rng.integers(-3, 4, (n, P, Q, k)).astype(float)
        want = reference(x, gz, n, c, h, w, k, r, s, ph, pw, sh, sw, dh, dw, P, Q)
        got = emulate(x, gz, n, c, h, w, k, r, s, ph, pw, sh, sw, dh, dw, P, Q, sl)
        ok = np.array_equal(got, want)
        bad += not ok
        print(f"{case}: {'exact' if ok else 'MISMATCH, max diff %g' % np.nanmax(np.abs(got - want))}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
