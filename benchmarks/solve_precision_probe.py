"""Accuracy of the chunked forward against float64 on a GPU, for launch variants that change a dot's precision
(e.g. the solve's products in tf32 instead of tf32x3): o and final-state RMS-relative error and the worst token's,
on bench_chunk.py's inputs and on weak decays (where X = (I + A_kk)^-1 and the state carry the most). A diagnostic
script, not a test; the reference is a float64 token-by-token recurrence written here from KDA.md.

    python benchmarks/solve_precision_probe.py [--heads 8] [--tokens 4096] [VARIANT ...]

VARIANT: KEY=VALUE,... of chunk.LAUNCH (as bench_chunk.py --ab takes them); the defaults are always measured.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))

from bench_chunk import make_inputs, ours, parse_launch, run_ours, weak_decay  # noqa: E402

f64 = torch.float64


def reference(x, mode):
    """(o, final state) in float64, token by token: S = diag(exp(g_t)) S; S += k_t (beta_t (v_t - k_t^T S)); o_t = q_t^T S."""
    q, k, v, beta = (x[n].to(f64)[0] for n in ("q", "k", "v", "beta"))
    K = q.shape[-1]
    if mode == "pre":
        g = x["g"].to(f64)[0]
    else:  # the safe gate with lower_bound -5, q and k L2-normalised in the op (bench_chunk.run_ours)
        a = x["A_log"].to(f64).exp()[None, :, None]
        g = -5.0 * torch.sigmoid(a * (x["g"].to(f64)[0] + x["dt_bias"].to(f64)[None]))
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q * K ** -0.5
    S = x["h0"][0].to(f64).clone()
    o = torch.empty_like(v)
    decay = g.exp()
    for t in range(q.shape[0]):
        S *= decay[t][..., None]
        u = beta[t][:, None] * (v[t] - torch.einsum("hk,hkv->hv", k[t], S))
        S += k[t][..., None] * u[:, None, :]
        o[t] = torch.einsum("hk,hkv->hv", q[t], S)
    return o, S


def errors(o, h, o_ref, h_ref):
    o, h = o[0].to(f64), h[0].to(f64)
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
