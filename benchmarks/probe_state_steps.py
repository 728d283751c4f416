"""How the state pass and the output kernel scale with the chunk length they step by: a probe for a state pass
over 128-token steps (two 64-token chunks merged) before building one.

    python benchmarks/probe_state_steps.py [--heads 32] [--tokens 16384]

Launches chunk.py's `_state_kernel` (without the output inside) and `_output_kernel` directly on synthetic
operands (random W, U, k exp(G_last - G), q exp(G), A_qk of the right shapes and dtypes; one sequence per head)
with BT = 64 and BT = 128 and several tiles, warps and depths, and prints the median time of each. Only the
timing means something: a 128-row W here is not the merged chunk pair's (the output kernel also lacks the cross
term such a pair needs), but the memory traffic and the sequential steps are those of the real thing.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kda_trace.kernels import chunk  # noqa: E402


def tables(T, BT, device):
    nt = triton.cdiv(T, BT)
    cu = torch.tensor([0, T], dtype=torch.int64, device=device)
    offsets = torch.zeros(1, dtype=torch.int64, device=device)
    idx = torch.stack([torch.zeros(nt, dtype=torch.int32), torch.arange(nt, dtype=torch.int32)], 1).to(device)
    return cu, offsets, idx.contiguous(), nt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=16384)
    a = ap.parse_args()
    dev = "cuda"
    HV, T, K, V = a.heads, a.tokens, 128, 128
    torch.manual_seed(0)
    bf = torch.bfloat16
    W = (torch.randn(T, HV, K, device=dev) * 0.05).to(bf)
    U = torch.randn(T, HV, V, device=dev).to(bf)
    KG = (torch.randn(T, HV, K, device=dev) * 0.05).to(bf)
    G = -torch.rand(T, HV, K, device=dev)
    QG = (torch.randn(T, HV, K, device=dev) * 0.05).to(bf)
    rq = torch.ones(T, HV, device=dev)
    v_new = torch.empty(T, HV, V, device=dev, dtype=bf)
    o = torch.empty(T, HV, V, device=dev, dtype=bf)
    h0 = torch.zeros(1, HV, K, V, device=dev)
    ht = torch.empty(1, HV, K, V, device=dev)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"{HV} heads x {T} tokens, K = V = {K}")
    def state(BT, BV, warps, stages, h, Aqk, cu, offsets):
        chunk._state_kernel[(triton.cdiv(V, BV), HV)](
            W, U, KG, G, h, v_new, h0, ht, G, QG, Aqk, o, rq, 1.0, cu, offsets, offsets, G,
            HV=HV, K=K, V=V, BT=BT, BK=K, BV=BV, STATE_VK=False, USE_H0=True, STORE_HT=True,
            STORE_HS=False, OUT=False, SPLIT=False, QG_RAW=True, L2NORM=False, EXP2=True, STORE_VN=True,
            INTERPRET=False, PREFETCH=False, num_warps=warps, num_stages=stages)

    def out(BT, BV, warps, nt, h, Aqk, cu, idx):
        chunk._output_kernel[(nt * triton.cdiv(V, BV), HV)](
            QG, Aqk, h, v_new, o, rq, 1.0, cu, idx, HV=HV, K=K, V=V, BT=BT, BK=64, BV=BV,
            QG_RAW=True, L2NORM=False, INTERPRET=False, num_warps=warps)

    for BT in (64, 128):
        cu, offsets, idx, nt = tables(T, BT, dev)
        h = torch.empty(nt, HV, K, V, device=dev, dtype=bf)
        Aqk = (torch.randn(T, HV, BT, device=dev) * 0.05).to(bf)
        for BV, warps, stages in ((16, 4, 3), (16, 4, 2), (16, 4, 1), (16, 8, 2), (32, 4, 2), (32, 8, 2), (32, 4, 1)):
            label = f"state pass  BT {BT:3d} BV {BV:2d} warps {warps} stages {stages}"
            try:
                ms = triton.testing.do_bench(partial(state, BT, BV, warps, stages, h, Aqk, cu, offsets), warmup=10,
                                             rep=100, return_mode="median")
                print(f"{label}: {ms * 1e3:7.1f} us ({ms * 1e3 / nt:.2f} us per step)")
            except Exception as e:  # e.g. out of shared memory
                print(f"{label}: failed: {str(e)[:120]}")
        for BVo, warps in ((128, 4), (128, 8), (64, 4)):
            label = f"output      BT {BT:3d} BV {BVo:3d} warps {warps}"
            try:
                ms = triton.testing.do_bench(partial(out, BT, BVo, warps, nt, h, Aqk, cu, idx), warmup=10, rep=100,
                                             return_mode="median")
                print(f"{label}: {ms * 1e3:7.1f} us")
            except Exception as e:
                print(f"{label}: failed: {str(e)[:120]}")


if __name__ == "__main__":
    main()
