"""How much of X = (I + A_kk)^-1's error each product precision of the solve costs, emulated on the CPU (no Triton):
the solve of kernels/chunk.py (`_inverse_unit_lower`'s powers and products, then the block merges; peeled or not: the
identity kept out of the products, launch setting solve_peel) with "tf32" operands truncated as the tensor cores do
(benchmarks/tf32_rounding_probe.py), "tf32_rn" operands rounded to nearest first (as chunk._tf32_rn) and tf32x3 as
its three products, against float64, before and after X's rounding to bf16 (what the W/U kernel reads). Random
64-row chunks: k L2-normalised, K = 128, beta uniform in (0, 1), decays of bench_chunk.py's inputs (logsigmoid of a
standard normal) and weak ones (times 1e-3). A diagnostic script, not a test.

    python benchmarks/solve_rounding_estimate.py [--trials 200]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

SCHEMES = {  # name: (precision of L^2, L^4, L^8; of the inverse's three products; of the merges; peeled)
    "tf32x3 (before the 39th session)": ("tf32x3", "tf32x3", "tf32x3", False),
    "tf32 (the 39th session's default)": ("tf32", "tf32", "tf32", False),
    "powers tf32, rest tf32x3": ("tf32", "tf32x3", "tf32x3", False),
    "merges tf32, inverses tf32x3": ("tf32x3", "tf32x3", "tf32", False),
    "tf32, peeled": ("tf32", "tf32", "tf32", True),
    "tf32_rn": ("tf32_rn", "tf32_rn", "tf32_rn", False),
    "tf32_rn, peeled (the 40th session's default)": ("tf32_rn", "tf32_rn", "tf32_rn", True),
}


def tf32_rn(x):
    """fp32 -> the nearest tf32 (10 mantissa bits, ties to even), as chunk._tf32_rn (finite x)."""
    u = x.view(torch.int32)
    return ((u + 0xFFF + ((u >> 13) & 1)) & ~0x1FFF).view(torch.float32)


def tf32(x):
    """fp32 -> tf32 as the tensor cores take an fp32 operand: the low 13 mantissa bits dropped."""
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)


def dot(a, b, prec):
    if prec == "tf32":
        return tf32(a) @ tf32(b)
    if prec == "tf32_rn":
        return tf32_rn(a) @ tf32_rn(b)
    hi_a, hi_b = tf32_rn(a), tf32_rn(b)  # tf32x3: the low parts' products first, as Triton orders them
    return hi_a @ tf32_rn(b - hi_b) + tf32_rn(a - hi_a) @ hi_b + hi_a @ hi_b


def inverse(L, p_pow, p_prod, peel):
    eye = torch.eye(16)
    L2 = dot(L, L, p_pow)
    L4 = dot(L2, L2, p_pow)
    L8 = dot(L4, L4, p_pow)
    if peel:  # N = X - I: X (I + M) = I + N + M + N M
        N = L2 - L - dot(L, L2, p_prod)
        N = N + L4 + dot(N, L4, p_prod)
        return eye + N + L8 + dot(N, L8, p_prod)
    X = dot(eye - L, eye + L2, p_prod)
    X = dot(X, eye + L4, p_prod)
    return dot(X, eye + L8, p_prod)


def solve(A, p_pow, p_prod, p_merge, peel):
    blk = lambda i, j: A[16 * i:16 * i + 16, 16 * j:16 * j + 16]  # noqa: E731
    eye = torch.eye(16)
    X = {(i, i): inverse(blk(i, i), p_pow, p_prod, peel) for i in range(4)}
    for d in range(1, 4):
        for i in range(d, 4):
            j = i - d
            if peel:  # A_ij X_jj as A_ij + A_ij (X_jj - I), X_ii acc as acc + (X_ii - I) acc
                acc = blk(i, j) + dot(blk(i, j), X[(j, j)] - eye, p_merge)
                acc = acc + sum(dot(blk(i, m), X[(m, j)], p_merge) for m in range(j + 1, i))
                X[(i, j)] = -(acc + dot(X[(i, i)] - eye, acc, p_merge))
            else:
                acc = sum(dot(blk(i, m), X[(m, j)], p_merge) for m in range(j, i))
                X[(i, j)] = -dot(X[(i, i)], acc, p_merge)
    out = torch.zeros(64, 64)
    for (i, j), x in X.items():
        out[16 * i:16 * i + 16, 16 * j:16 * j + 16] = x
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    args = ap.parse_args()
    rel = lambda x, ref: ((x.double() - ref).norm() / ref.norm()).item()  # noqa: E731
    for label, decay_scale in (("bench_chunk.py's decays", 1.0), ("weak decays (x 1e-3)", 1e-3)):
        gen = torch.Generator().manual_seed(0)
        errs = {name: [] for name in SCHEMES}
        for _ in range(args.trials):
            k = F.normalize(torch.randn(64, 128, generator=gen), dim=-1)
            G = (F.logsigmoid(torch.randn(64, 128, generator=gen)) * decay_scale).cumsum(0)
            beta = torch.rand(64, generator=gen)
            A = torch.tril((k * G.exp()) @ (k * (-G).exp()).T, -1) * beta[:, None]
            X_ref = torch.linalg.inv(torch.eye(64, dtype=torch.float64) + A.double())
            for name, precs in SCHEMES.items():
                X = solve(A, *precs)
                errs[name].append((rel(X, X_ref), rel(X.bfloat16().float(), X_ref)))
        print(f"{label}: X's Frobenius-relative error against float64, mean over {args.trials} chunks")
        for name, e in errs.items():
            t = torch.tensor(e)
            print(f"  {name:46s} {t[:, 0].mean():.2e} (max {t[:, 0].max():.2e}); rounded to bf16 {t[:, 1].mean():.4e}")


if __name__ == "__main__":
    main()
