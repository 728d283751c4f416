"""The matrix-form chunk backward (chunk_backward_matrix.py, float64 torch; the oracle for a tensor-core
`_local_kernel`) against torch.autograd: per chunk through its own matrix-form forward, and over whole
batches against autograd through the independent token recurrence (kernel_ground_truth.ref_kda): odd K and V,
K != V, single-token chunks, packed varlen, GVA, strong gates (to -40 per step), with and without h0 / dht.

Everything is float64 on both sides, so the bar is float64 round-off (1e-10 RMS-relative); a wrong term (a
missing decay, a sign, a transposed product) costs O(1e-2) or more."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from chunk_backward_matrix import chunk_forward, matrix_backward, matrix_chunk_backward
from kernel_ground_truth import ref_kda, rms_rel

f64 = torch.float64
BAR = 1e-10


def _inputs(T, H, HV, K, V, seed, g_low=None, B=1, N=None):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=f64)
    q, k = F.normalize(r(B, T, H, K), dim=-1), F.normalize(r(B, T, H, K), dim=-1)
    if g_low is None:
        g = F.logsigmoid(r(B, T, HV, K))
    else:  # strong gates: uniform in [g_low, 0] per step
        g = torch.rand(B, T, HV, K, generator=gen, dtype=f64) * g_low
    N = N or B
    return dict(q=q, k=k, v=r(B, T, HV, V), g=g, beta=torch.rand(B, T, HV, generator=gen, dtype=f64),
                h0=r(N, HV, K, V) * 0.3, do=r(B, T, HV, V) * 0.1, dht=r(N, HV, K, V) * 0.1)


@pytest.mark.parametrize("n,K,V,g_low", [(1, 5, 3, None), (7, 5, 3, None), (20, 16, 24, -8.0), (64, 7, 9, -40.0)])
def test_chunk_forward_is_the_token_recurrence(n, K, V, g_low):
    x = _inputs(n, 1, 1, K, V, seed=n + K, g_low=g_low)
    scale = K ** -0.5
    o, S_end = chunk_forward(x["q"][0, :, 0], x["k"][0, :, 0], x["v"][0, :, 0], x["g"][0, :, 0],
                             x["beta"][0, :, 0], x["h0"][0, 0], scale)
    o_ref, ht_ref = ref_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], scale, x["h0"])
    assert rms_rel(o, o_ref[0, :, 0]) <= BAR
    assert rms_rel(S_end, ht_ref[0, 0]) <= BAR


@pytest.mark.parametrize("n,K,V,g_low", [(1, 5, 3, None), (7, 5, 3, None), (33, 16, 24, -8.0), (64, 7, 9, -40.0)])
def test_chunk_backward_matches_autograd(n, K, V, g_low):
    """Every gradient, dS (the chunk pass's A_c^T dSe + b_c) included, against autograd through chunk_forward."""
    x = _inputs(n, 1, 1, K, V, seed=100 + n, g_low=g_low)
    scale = K ** -0.5
    args = [x[name][0, :, 0].clone().requires_grad_() for name in ("q", "k", "v", "g", "beta")]
    S = x["h0"][0, 0].clone().requires_grad_()
    dO, dSe = x["do"][0, :, 0], x["dht"][0, 0]
    o, S_end = chunk_forward(*args, S, scale)
    ((o * dO).sum() + (S_end * dSe).sum()).backward()
    got = matrix_chunk_backward(*(a.detach() for a in args), S.detach(), dO, dSe, scale)
    for name, mine, leaf in zip(("q", "k", "v", "g", "beta", "S"), got, [*args, S]):
        assert mine.shape == leaf.shape, name
        assert rms_rel(mine, leaf.grad) <= BAR, (name, rms_rel(mine, leaf.grad))


def _truth(x, scale, cu_seqlens=None, use_h0=True, use_dht=True):
    leaves = {n: x[n].clone().requires_grad_() for n in ("q", "k", "v", "g", "beta", "h0")}
    o, ht = ref_kda(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"], scale,
                    leaves["h0"] if use_h0 else None, cu_seqlens)
    loss = (o * x["do"]).sum()
    if use_dht:
        loss = loss + (ht * x["dht"]).sum()
    loss.backward()
    return {n: t.grad for n, t in leaves.items()}


@pytest.mark.parametrize("case", [
    # (B, T, H, HV, K, V, cu_seqlens, chunk, g_low, use_h0, use_dht)
    (2, 19, 1, 1, 5, 7, None, 8, None, True, True),               # dense, odd dims, 3 chunks, short last one
    (1, 30, 1, 2, 6, 3, [0, 1, 9, 10, 30], 8, None, True, False),  # packed, GVA, single-token sequences
    (1, 41, 2, 4, 9, 5, [0, 17, 41], 8, -8.0, False, True),       # strong (safe-bound) gates, no h0
    (1, 70, 1, 1, 4, 6, None, 64, -40.0, True, True),             # the kernels' 64-token chunks, gates past -8
])
def test_matrix_backward_matches_token_recurrence(case):
    B, T, H, HV, K, V, cu, chunk, g_low, use_h0, use_dht = case
    N = B if cu is None else len(cu) - 1
    x = _inputs(T, H, HV, K, V, seed=T + HV, g_low=g_low, B=B, N=N)
    cu_t = None if cu is None else torch.tensor(cu)
    scale = K ** -0.5
    ref = _truth(x, scale, cu_t, use_h0, use_dht)
    got = matrix_backward(x["q"], x["k"], x["v"], x["g"], x["beta"], x["do"], scale,
                          h0=x["h0"] if use_h0 else None, dht=x["dht"] if use_dht else None,
                          cu_seqlens=cu_t, chunk=chunk)
    for name in ("q", "k", "v", "g", "beta") + (("h0",) if use_h0 else ()):
        assert got[name].shape == ref[name].shape, name
        assert rms_rel(got[name], ref[name]) <= BAR, (name, rms_rel(got[name], ref[name]))

