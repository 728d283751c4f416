"""CPU estimate of what tf32 tensor-core products cost the chunked backward's gradients (kernels/backward.py
LAUNCH["mode"] = "chunked"), which the Triton interpreter cannot show (it multiplies in fp32 whatever the
input_precision): tests/kernels/chunk_backward_matrix.py's float64 formulas (equal to autograd to 1e-12), run
once exactly and once with every matrix-product operand rounded to tf32 (10 mantissa bits, nearest even) and
every decay-weighted sum (A_kk, A_qk and the dq/dk sums) rounded to tf32 after it, on bf16-rounded inputs.
That is coarser than the default (the prep's products are tf32x3 there), so it bounds the default from above.

    python benchmarks/chunked_tf32_estimate.py [--strong] [--fp32]

--strong: gates uniform in [-8, 0] per step; --fp32: round to fp32 instead (the control, about 4e-8).
2026-11-23, K = V = 128, 256 tokens, 2 heads: tf32 dq 3.8e-4, dk 3.5e-4, dv 3.4e-4, dg 4.4e-4, dbeta 2.9e-4,
dh0 3.0e-4 (strong gates: dg 8.5e-4, the others <= 3.9e-4), against fla's 2.8e-3 to 3.3e-3 on the H100. The
kernels' bf16 rounding of dq, dk, dv and dbeta (about 1.5e-3 RMS-relative, the exact mode's error) comes on top.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "kernels"))

import chunk_backward_matrix as cbm  # noqa: E402


def tf32(x):
    """x rounded to tf32 (nearest even on the fp32 bits), back in float64."""
    b = x.to(torch.float32).view(torch.int32)
    b = (b + 0xFFF + ((b >> 13) & 1)) & ~0x1FFF
    return b.view(torch.float32).to(torch.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strong", action="store_true")
    ap.add_argument("--fp32", action="store_true")
    a = ap.parse_args()
    rnd = (lambda x: x.to(torch.float32).to(torch.float64)) if a.fp32 else tf32
    gen = torch.Generator().manual_seed(0)
    B, T, H, K, V = 1, 256, 2, 128, 128
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    q = F.normalize(r(B, T, H, K), dim=-1).bfloat16().double()
    k = F.normalize(r(B, T, H, K), dim=-1).bfloat16().double()
    v = r(B, T, H, V).bfloat16().double()
    g = -8 * torch.rand(B, T, H, K, generator=gen).double() if a.strong else F.logsigmoid(r(B, T, H, K)).double()
    beta = torch.rand(B, T, H, generator=gen).bfloat16().double()
    do = r(B, T, H, V).bfloat16().double() * 0.1
    h0, dht = r(1, H, K, V).double() * 0.3, r(1, H, K, V).double() * 0.1
    ref = cbm.matrix_backward(q, k, v, g, beta, do, K ** -0.5, h0, dht)
    # the rounded run: every `@` on rounded operands, every einsum (the decay-weighted sums) rounded after
    matmul, einsum = torch.Tensor.__matmul__, torch.einsum
    torch.Tensor.__matmul__ = lambda x, y: matmul(rnd(x), rnd(y))
    cbm.torch.einsum = lambda *args: rnd(einsum(*args))
    try:
        got = cbm.matrix_backward(q, k, v, g, beta, do, K ** -0.5, h0, dht)
    finally:
        torch.Tensor.__matmul__, cbm.torch.einsum = matmul, einsum
    errs = {n: ((got[n] - ref[n]).pow(2).mean().sqrt() / ref[n].pow(2).mean().sqrt()).item() for n in ref}
    print(("fp32" if a.fp32 else "tf32") + (" strong gates" if a.strong else "") + ": "
          + "  ".join(f"d{n} {e:.2e}" for n, e in errs.items()))


if __name__ == "__main__":
    main()
