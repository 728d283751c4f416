"""CPU estimate of what rounding the backward pass's product operands costs dh0 (kernels/backward_chunked.py's
reverse recursion, LAUNCH["chunked_pass_precision"]), product by product, which the Triton interpreter cannot show
(it multiplies tf32 operands in fp32). Per chunk, from the last back, in float64 with chosen operands rounded:

    dVn = A_qk^T dO + Kt dS_end;   dS_start = diag(gamma) dS_end + Qt^T dO - W^T dVn

the chunk operands (Qt, Kt, W, A_qk^T dO, gamma) exact (tests/kernels/chunk_backward_matrix.py's formulas), from
bf16-rounded inputs (q, k L2-normalised, v, dO; g = logsigmoid of a normal, beta = sigmoid). Each variant names
the products whose operands are rounded to bf16; the others get tf32 (10 mantissa bits); "split": Qt as the sum
of two bf16 terms (`_xdot`'s "bf16_split_a"), dO bf16 already. dh0's RMS-relative error
against the float64 recursion, over the heads.

    python benchmarks/pass_rounding_estimate.py [--heads 4] [--tokens 2048]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "kernels"))

import chunk_backward_matrix as cbm  # noqa: E402

f64 = torch.float64


def tf32(x):
    return x.float().to(f64)  # fp32 first; tf32 below keeps 10 mantissa bits of it


def round_bits(x, keep):
    """x rounded to `keep` mantissa bits (nearest even), through fp32 bits."""
    b = x.float().view(torch.int32)
    drop = 23 - keep
    half = (1 << (drop - 1)) - 1
    b = (b + half + ((b >> drop) & 1)) & ~((1 << drop) - 1)
    return b.view(torch.float32).to(f64)


def bf16(x):
    return round_bits(x, 7)


def tf32r(x):
    return round_bits(x, 10)


def chunk_operands(q, k, v, g, beta, dO, scale):
    """Qt, Kt, W, A_qk^T dO, gamma of one chunk (float64)."""
    n = q.shape[0]
    G = g.cumsum(0)
    Gl = G[-1]
    D, lower = cbm._decay_pairs(G)
    strict = lower & ~torch.eye(n, dtype=torch.bool)
    Qt, Kt, gamma = scale * q * G.exp(), k * (Gl - G).exp(), Gl.exp()
    A_kk = torch.where(strict, beta[:, None] * torch.einsum("id,jd,ijd->ij", k, k, D), 0.0)
    A_qk = torch.where(lower, scale * torch.einsum("id,jd,ijd->ij", q, k, D), 0.0)
    X = torch.linalg.inv(torch.eye(n, dtype=f64) + A_kk)
    W = X @ (beta[:, None] * k * G.exp())
    return Qt, Kt, W, A_qk.T @ dO, gamma


def reverse(chunks, dS, rounded):
    """dh0 from the last chunk back; `rounded`: the products ("kd", "qdo", "wdv") with bf16 operands."""
    for Qt, Kt, W, dO2, gamma, dO in reversed(chunks):
        r = {p: (bf16 if p in rounded else tf32r) if rounded is not None else (lambda x: x) for p in ("kd", "qdo", "wdv")}
        dVn = dO2 + r["kd"](Kt) @ r["kd"](dS)
        qt = (bf16(Qt) + bf16(Qt - bf16(Qt))) if rounded is not None and "qdo_split" in rounded else r["qdo"](Qt)
        dS = gamma[:, None] * dS + qt.T @ r["qdo"](dO) - r["wdv"](W).T @ r["wdv"](dVn)
    return dS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=2048)
    a = ap.parse_args()
    torch.manual_seed(0)
    K = V = 128
    variants = {"tf32 (all)": (), "bf16 (all)": ("kd", "qdo", "wdv"), "bf16 but Qt^T dO": ("kd", "wdv"),
                "bf16, Qt^T dO split": ("kd", "qdo", "wdv", "qdo_split"),
                "bf16 but Kt dS": ("qdo", "wdv"), "bf16 but W^T dVn": ("kd", "qdo"), "bf16 Qt^T dO only": ("qdo",)}
    err = {n: [0.0, 0.0] for n in variants}
    for _ in range(a.heads):
        bf = lambda x: x.bfloat16().to(f64)  # noqa: E731
        q = bf(F.normalize(torch.randn(a.tokens, K), dim=-1))
        k = bf(F.normalize(torch.randn(a.tokens, K), dim=-1))
        v, dO = bf(torch.randn(a.tokens, V)), bf(torch.randn(a.tokens, V))
        g = F.logsigmoid(torch.randn(a.tokens, K)).to(f64)
        beta = bf(torch.sigmoid(torch.randn(a.tokens)))
        chunks = []
        for t0 in range(0, a.tokens, 64):
            sl = slice(t0, t0 + 64)
            chunks.append((*chunk_operands(q[sl], k[sl], v[sl], g[sl], beta[sl], dO[sl], K ** -0.5), dO[sl]))
        dht = torch.randn(K, V, dtype=f64)
        exact = reverse(chunks, dht, None)
        for name, rounded in variants.items():
            d = reverse(chunks, dht, rounded)
            err[name][0] += float(((d - exact) ** 2).sum())
            err[name][1] += float((exact ** 2).sum())
    print(f"K = V = {K}, {a.tokens} tokens, {a.heads} heads, dht random: dh0 RMS-relative error of the pass alone")
    for name, (num, den) in err.items():
        print(f"  {name:22s} {(num / den) ** 0.5:.2e}")


if __name__ == "__main__":
    main()
