"""The chunked backward against the exact mode on one GPU, fp32 inputs, by K and GVA (call 8 of the twenty-fourth
session: test_autograd's fp32 test, K = 12 with GVA 1 -> 2, had dk 2e-2 off on the GPU, 4e-4 in the interpreter's
emulation of the same precisions). Prints the RMS-relative difference of every gradient. `python
benchmarks/probe_small_k.py [KEY=VALUE ...]` (kernels/backward.py LAUNCH keys for the chunked side). PROBE_ONLY=exact or
chunked runs that mode alone (no comparison), PROBE_SHAPES="K,H,HV,T;..." picks the shapes."""

from __future__ import annotations

import os
import sys

import torch

from kda_trace.kernels import backward
from kda_trace.kernels.options import KDAOptions


def grads(x, launch):
    saved = dict(backward.LAUNCH)
    backward.LAUNCH.update(launch)
    try:
        gr = backward.kda_backward(x["q"], x["k"], x["v"], x["g"], x["beta"], x["do"], KDAOptions(),
                                   initial_state=x["h0"], dht=x["dht"])
        torch.cuda.synchronize()
        return {"q": gr.dq, "k": gr.dk, "v": gr.dv, "g": gr.dg, "beta": gr.dbeta, "h0": gr.dh0}
    finally:
        backward.LAUNCH.clear()
        backward.LAUNCH.update(saved)


def main():
    extra = {}
    for item in sys.argv[1:]:
        key, _, val = item.partition("=")
        extra[key] = val
    shapes = ((12, 1, 2, 70), (12, 2, 2, 70), (16, 1, 2, 70), (32, 1, 2, 70), (128, 1, 2, 70), (12, 1, 2, 700))
    if os.environ.get("PROBE_SHAPES"):
        shapes = [tuple(int(v) for v in sh.split(",")) for sh in os.environ["PROBE_SHAPES"].split(";")]
    only = os.environ.get("PROBE_ONLY")
    for K, H, HV, T in shapes:
        gen = torch.Generator().manual_seed(K + H + T)
        r = lambda *s, gen=gen: torch.randn(*s, generator=gen).cuda()  # noqa: E731
        V = 10
        q, k = r(1, T, H, K), r(1, T, H, K)
        x = dict(q=q / q.norm(dim=-1, keepdim=True), k=k / k.norm(dim=-1, keepdim=True), v=r(1, T, HV, V),
                 g=-torch.rand(1, T, HV, K, generator=gen).cuda(), beta=torch.rand(1, T, HV, generator=gen).cuda(),
                 h0=r(1, HV, K, V) * 0.3, do=r(1, T, HV, V) * 0.1, dht=r(1, HV, K, V) * 0.1)
        if only:
            got = grads(x, {"mode": only, **(extra if only == "chunked" else {})})
            if os.environ.get("PROBE_TRUTH"):  # against float64 autograd through the recurrence, on the CPU
                sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "kernels"))
                from test_backward import truth

                ref = truth({n: t.cpu() for n, t in x.items()}, K ** -0.5)
                err = {n: float((got[n].cpu().double() - ref[n]).norm() / ref[n].norm()) for n in got}
                print(f"K={K} H={H} HV={HV} T={T} {only} {extra} vs float64: "
                      + " ".join(f"{n} {e:.1e}" for n, e in err.items()), flush=True)
            else:
                print(f"K={K} H={H} HV={HV} T={T} {only} {extra}: ran", flush=True)
            continue
        exact = grads(x, {"mode": "exact"})
        chunked = grads(x, {"mode": "chunked", **extra})
        err = {n: float((chunked[n] - exact[n]).norm() / exact[n].norm()) for n in exact}
        print(f"K={K} H={H} HV={HV} T={T} {extra}: " + " ".join(f"{n} {e:.1e}" for n, e in err.items()), flush=True)


if __name__ == "__main__":
    main()
