"""Where the time of the intra-chunk kernel goes: time kda_chunk with parts of `_intra_kernel` cut out.

    python benchmarks/bench_chunk_parts.py

Each variant is the kernel module with one text substitution (results are wrong on purpose; only the time
matters), written to a temporary directory and imported there. Shape: 32 heads, one 16384-token sequence,
K = V = 128, bf16, precomputed g. Prints the median ms of the whole forward per variant.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kda_trace.kernels import chunk
from kda_trace.kernels.options import KDAOptions

VARIANTS = {
    "full": [],
    "no off-diagonal product": [("            if I > 0:\n", "            if I < 0:\n")],
    "no diagonal products": [
        ('kk_lo += tl.dot(kr_lo, tl.trans(kc_lo), input_precision="tf32")', 'kk_lo += tl.sum(kc_lo) * 0'),
        ('qk_lo += tl.dot(qr_lo, tl.trans(kc_lo), input_precision="tf32")', 'qk_lo += tl.sum(qr_lo) * 0'),
        ('kk_hi += tl.dot(b_k * e_hi, tl.trans(kc_hi), input_precision="tf32")', 'kk_hi += tl.sum(kc_hi) * 0'),
        ('qk_hi += tl.dot(b_q * e_hi, tl.trans(kc_hi), input_precision="tf32")', 'qk_hi += tl.sum(e_hi) * 0'),
    ],
    "no inverse": [('        x_i = tl.dot(_inverse_unit_lower(kk, BC), rhs, input_precision=SOLVE_PRECISION)',
                    '        x_i = rhs + tl.sum(kk) * 0')],
    "no block merge": [('        rhs -= tl.dot(off_k, x_prev, input_precision=SOLVE_PRECISION)',
                        '        rhs -= tl.sum(off_k) * 0')],
    "no range check": [("        if CHECK_RANGE:\n            # row i is exact", "        if False:\n            # row i is exact")],
}


def load_variant(name, subs, tmp):
    with open(chunk.__file__) as f:
        src = f.read()
    for old, new in subs:
        if src.count(old) != 1:
            raise SystemExit(f"variant {name!r}: substitution not found once: {old[:60]!r}")
        src = src.replace(old, new)
    path = os.path.join(tmp, f"chunk_variant_{abs(hash(name))}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    torch.manual_seed(0)
    B, T, H, K = 1, 16384, 32, 128
    bf = torch.bfloat16
    q = F.normalize(torch.randn(B, T, H, K, device="cuda"), dim=-1).to(bf)
    k = F.normalize(torch.randn(B, T, H, K, device="cuda"), dim=-1).to(bf)
    v = torch.randn(B, T, H, K, device="cuda", dtype=bf)
    g = F.logsigmoid(torch.randn(B, T, H, K, device="cuda"))
    beta = torch.rand(B, T, H, device="cuda").to(bf)
    opts = KDAOptions(output_final_state=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, subs in VARIANTS.items():
            mod = load_variant(name, subs, tmp)
            ms = triton.testing.do_bench(lambda mod=mod: mod.kda_chunk(q, k, v, g, beta, opts), warmup=25, rep=150,
                                         return_mode="median")
            print(f"{name:28s} {ms:7.3f} ms", flush=True)


if __name__ == "__main__":
    main()
