"""An independent float64 KDA recurrence for the kernel tests, written from KDA.md.

`test_recurrent.py::test_reference_agrees_with_fla_naive` checks it against fla's naive_recurrent_kda and naive
gates, so neither kernel is ever judged against itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

f64 = torch.float64


def ref_gate(g_raw, A_log, dt_bias, gate, lower_bound=-5.0):
    """Log decay from the raw gate in float64. g_raw [..., HV, K], A_log [HV], dt_bias [HV, K]."""
    if gate == "precomputed":
        return g_raw.to(f64)
    HV, K = g_raw.shape[-2:]
    x = g_raw.to(f64) + dt_bias.to(f64).view(HV, K)
    a = A_log.to(f64).exp().view(HV, 1)
    if gate == "unbounded":
        return -a * torch.where(x > 20, x, torch.log1p(torch.exp(x.clamp(max=20))))
    return lower_bound * torch.sigmoid(a * x)


def ref_beta(b, kind):
    b = b.to(f64)
    return {"prob": b, "logits": torch.sigmoid(b), "logits_x2": 2 * torch.sigmoid(b)}[kind]


def ref_kda(q, k, v, g, beta, scale, h0=None, cu_seqlens=None, l2norm=False):
    """o [B, T, HV, V] and final states [N, HV, K, V] ([K, V] layout), float64, token by token.
    g is the log decay, beta a probability, h0 [N, HV, K, V] or None."""
    q, k, v, g, beta = (x.to(f64) for x in (q, k, v, g, beta))
    B, T, H, K = q.shape
    HV, V = v.shape[2:]
    if l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q.repeat_interleave(HV // H, dim=2) * scale
    k = k.repeat_interleave(HV // H, dim=2)
    if cu_seqlens is None:
        spans = [(b, 0, T) for b in range(B)]
    else:
        c = cu_seqlens.tolist()
        spans = [(0, c[i], c[i + 1]) for i in range(len(c) - 1)]
    o = torch.zeros(B, T, HV, V, dtype=f64)
    states = []
    for n, (b, s, e) in enumerate(spans):
        S = torch.zeros(HV, K, V, dtype=f64) if h0 is None else h0[n].to(f64).clone()
        for t in range(s, e):
            S = S * g[b, t].exp()[..., None]
            u = v[b, t] - torch.einsum("hk,hkv->hv", k[b, t], S)
            S = S + torch.einsum("hk,hv->hkv", k[b, t], beta[b, t][:, None] * u)
            o[b, t] = torch.einsum("hk,hkv->hv", q[b, t], S)
        states.append(S)
    return o, torch.stack(states)


def rms_rel(x, ref):
    x, ref = x.detach().cpu().to(f64), ref.detach().cpu().to(f64)
    assert torch.isfinite(x).all(), "non-finite values in the kernel's output"
    assert torch.isfinite(ref).all(), "non-finite values in the reference"
    return ((x - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()


# --------------------------------------------------------------------------- adapter tests
REFS = Path(__file__).resolve().parents[2] / "tools" / "kda_references"


class FakeDefinition:
    """The few Definition attributes the adapters read."""

    def __init__(self, name, tags, state_name=None, state_axes=("head_dim_v", "head_dim_k")):
        self.name, self.tags, self.const_axes = name, tags, {}
        shape = ["pool_size", "num_v_heads", *state_axes]
        self.inputs = {state_name: type("Spec", (), {"shape": shape})()} if state_name else {}

    def tag(self, key, default=None):
        vals = [t.partition(":")[2] for t in self.tags if t.partition(":")[0] == key]
        return vals[0] if vals else default


def load_reference(family, **consts):
    """The family's reference module with its definition constants set to small values."""
    import importlib.util

    path = REFS / f"{family}.py"
    if not path.exists():
        pytest.skip(f"{path} not present")
    spec = importlib.util.spec_from_file_location(f"ref_{family}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, value in consts.items():
        setattr(mod, name, value)
    return mod
