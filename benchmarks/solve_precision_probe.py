"""Accuracy of the chunked forward against float64 on a GPU, for launch variants that change a dot's precision
(e.g. the solve's products in tf32 instead of tf32x3): o and final-state RMS-relative error and the worst token's,
on bench_chunk.py's inputs and on weak decays (where X = (I + A_kk)^-1 and the state carry the most). A diagnostic
script, not a test; the reference is tests/kernels' float64 token-by-token recurrence.

    python benchmarks/solve_precision_probe.py [--heads 8] [--tokens 4096] [VARIANT ...]

VARIANT: KEY=VALUE,... of chunk.LAUNCH (as bench_chunk.py --ab takes them); the defaults are always measured.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "kernels"))

from bench_chunk import make_inputs, ours, parse_launch, run_ours, weak_decay  # noqa: E402
from kernel_ground_truth import ref_gate, ref_kda  # noqa: E402

f64 = torch.float64


def reference(x, mode):
    """(o, final state) of tests/kernels' float64 token-by-token recurrence (`ref_kda`, checked there against fla's
    naive_recurrent_kda), on the CPU; "safe_l2" as bench_chunk.run_ours: the safe gate at lower_bound -5, q and k
    L2-normalised in the op."""
    cpu = {n: t.cpu() for n, t in x.items() if t is not None}
    pre = mode == "pre"
    g = ref_gate(cpu["g"], cpu["A_log"], cpu["dt_bias"], "precomputed" if pre else "safe", -5.0)
    o, h = ref_kda(cpu["q"], cpu["k"], cpu["v"], g, cpu["beta"], cpu["q"].shape[-1] ** -0.5, cpu["h0"],
                   l2norm=not pre)
    return o[0], h[0]


def errors(o, h, o_ref, h_ref):
    o, h = o[0].cpu().to(f64), h[0].cpu().to(f64)
    rms = lambda a, b: ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt()).item()  # noqa: E731
    per_token = ((o - o_ref).pow(2).mean(dim=(1, 2)).sqrt() / o_ref.pow(2).mean(dim=(1, 2)).sqrt())
    return rms(o, o_ref), rms(h, h_ref), per_token.max().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("variants", nargs="*")
    args = ap.parse_args()
    variants = [("defaults", {})] + [(v, parse_launch(v)) for v in args.variants]
    print(f"device {torch.cuda.get_device_name()}, {args.heads} heads x {args.tokens} tokens, K = V = 128, bf16 inputs; "
          "RMS-relative error against float64: o, final state, worst token's o")
    for mode in ("pre", "safe_l2"):
        base = make_inputs(args.heads, [args.tokens], mode, seed=3)
        for label, x in ((mode, base), (mode + " weak decays", weak_decay(base, mode))):
            o_ref, h_ref = reference(x, mode)
            for name, launch in variants:
                saved = dict(ours.LAUNCH)
                ours.LAUNCH.update(launch)
                try:
                    o, h = run_ours(x, mode)
                finally:
                    ours.LAUNCH.clear()
                    ours.LAUNCH.update(saved)
                e_o, e_h, e_w = errors(o, h, o_ref, h_ref)
                print(f"  {label:22s} {name:60s} o {e_o:.3e}  state {e_h:.3e}  worst token {e_w:.3e}", flush=True)


if __name__ == "__main__":
    main()
