"""Which launch settings of the backward's state pass compile on this GPU: for K, the dtype of do and the pass's
V-tile / stages, run kda_backward once on a small packed batch and print ok or the error (out of shared memory,
registers). A probe for choosing LAUNCH defaults (kernels/backward.py), not a test.

    python benchmarks/probe_pass_launch.py
"""

from __future__ import annotations

import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kda_trace.kernels import backward  # noqa: E402
from kda_trace.kernels.options import KDAOptions  # noqa: E402


def main() -> None:
    dev = "cuda"
    backward.LAUNCH["mode"] = "chunked"
    for K, dt, bv, stages in itertools.product((128, 100, 256), (torch.float32, torch.bfloat16), (32, 16), (1, 2)):
        backward.LAUNCH.update(chunked_pass_bv=bv, chunked_pass_stages=stages)
        V = 128 if K != 256 else 64
        T, HV = 300, 2
        q = torch.nn.functional.normalize(torch.randn(1, T, 1, K, device=dev), dim=-1).to(dt)
        k = torch.nn.functional.normalize(torch.randn(1, T, 1, K, device=dev), dim=-1).to(dt)
        v = torch.randn(1, T, HV, V, device=dev).to(dt)
        g = torch.nn.functional.logsigmoid(torch.randn(1, T, HV, K, device=dev))
        beta = torch.rand(1, T, HV, device=dev).to(dt)
        do = torch.randn(1, T, HV, V, device=dev).to(dt)
        try:
            backward.kda_backward(q, k, v, g, beta, do, KDAOptions(), initial_state=torch.zeros(1, HV, K, V, device=dev),
                                  dht=torch.zeros(1, HV, K, V, device=dev))
            torch.cuda.synchronize()
            res = "ok"
        except Exception as e:  # noqa: BLE001 - the probe reports any failure
            res = f"{type(e).__name__}: {str(e)[:120]}"
        print(f"K={K} V={V} {str(dt)[6:]} pass_bv={bv} stages={stages}: {res}", flush=True)


if __name__ == "__main__":
    main()
