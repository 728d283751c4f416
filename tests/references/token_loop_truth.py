"""The KDA recurrence token by token in float64: the form the chunked references compute, written as the
specification reads, to check them against (test_ref_chunked_form.py).

    S = diag(exp(g_t)) S;   S = S + beta_t k_t (v_t - S^T k_t)^T;   o_t = S^T (scale q_t)

Shares no code with tools/kda_references. Conventions: one sequence's q, k [T, H, K], v [T, HV, V], g [T, HV, K]
(log decay), beta [T, HV] (a probability), S [HV, K, V]; value head hv reads q/k head hv // (HV // H).
Everything is float64 and differentiable (the backward checks take autograd through it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

f64 = torch.float64


def recurrence(q, k, v, g, beta, S, scale, states_every: int | None = None):
    """One sequence, token by token. Returns (o [T, HV, V], final S [HV, K, V]) and, with states_every=c,
    also the states before tokens 0, c, 2c, ... (a list)."""
    q, k, v, g, beta, S = (x.to(f64) for x in (q, k, v, g, beta, S))
    group = v.shape[1] // q.shape[1]
    qs = q.repeat_interleave(group, dim=1) * scale
    ks = k.repeat_interleave(group, dim=1)
    outputs, states = [], []
    for t in range(q.shape[0]):
        if states_every and t % states_every == 0:
            states.append(S)
        k_t = ks[t]
        S = S * torch.exp(g[t])[:, :, None]                               # decay each key row
        predicted = (k_t[:, None, :] @ S)[:, 0]                           # S^T k: [HV, V]
        S = S + k_t[:, :, None] * (beta[t, :, None] * (v[t] - predicted))[:, None, :]
        outputs.append((qs[t, :, None, :] @ S)[:, 0])                     # read the updated state
    o = torch.stack(outputs)
    return (o, S, states) if states_every else (o, S)


def l2_normalize(x):
    """x / sqrt(sum(x^2) + 1e-6) along the last axis, float64."""
    x = x.to(f64)
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def gate(g_raw, A_log, dt_bias, lower_bound):
    """The KDA gate in float64: -exp(A_log) softplus(g_raw + dt_bias) (torch's softplus: x above 20), or
    lower_bound * sigmoid(exp(A_log) (g_raw + dt_bias))."""
    x = g_raw.to(f64) + dt_bias.to(f64)
    a = torch.exp(A_log.to(f64))[:, None]
    if lower_bound is None:
        return -a * F.softplus(x)
    return lower_bound * torch.sigmoid(a * x)


def sequences(cu_seqlens):
    c = [int(x) for x in cu_seqlens]
    return list(zip(c[:-1], c[1:]))


def packed(q, k, v, g, beta, h0, cu_seqlens, scale, states_every=None):
    """A packed batch (fla convention, states [N, HV, K, V]; h0 None means zeros). Returns o [T, HV, V], final
    states [N, HV, K, V] and, with states_every, the states before every states_every-th token of every
    sequence, sequence after sequence."""
    HV, K, V = v.shape[1], q.shape[2], v.shape[2]
    outs, finals, states = [], [], []
    for n, (s, e) in enumerate(sequences(cu_seqlens)):
        S = torch.zeros(HV, K, V, dtype=f64, device=q.device) if h0 is None else h0[n]
        r = recurrence(q[s:e], k[s:e], v[s:e], g[s:e], beta[s:e], S, scale, states_every)
        outs.append(r[0])
        finals.append(r[1])
        if states_every:
            states += r[2]
    out = (torch.cat(outs), torch.stack(finals))
    return out + (torch.stack(states),) if states_every else out
