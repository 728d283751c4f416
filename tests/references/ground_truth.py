"""Ground truth for KDA that shares no code with the dataset's references.

Three independent formulations of the same operator, all in the fla convention
(q, k [B, T, H, K]; v [B, T, HV, V]; g, the log decay, [B, T, HV, K]; beta, a probability, [B, T, HV];
states [N, HV, K, V]; a packed batch is B = 1 with `cu_seqlens`):

- `fla_recurrent`: fla's own pure-PyTorch `naive_recurrent_kda`, executed in float64. fla casts its
  inputs with `x.to(torch.float)`; we run fla's unmodified function body with a `torch` whose `float`
  is float64 (see `_float64_torch`), so nothing of fla's code is copied or edited.
- `chunked`: our own chunked form (KDA.md "The chunked algorithm"): per chunk, the WY representation
  (a unit-lower-triangular system solved by forward substitution), then one state update per chunk, in float64.
- `fla_triton`: fla's Triton kernels `chunk_kda` / `fused_recurrent_kda` (GPU only), with the gate,
  beta sigmoid, L2 norm and state layout done inside fla's kernels.

The gate and the q/k normalisation come in two versions too: `gate` (ours, float64, written from the
formulas) and `fla_gate` (fla's `naive_kda_gate` / `naive_kda_lowerbound_gate`, which compute in float32).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, replace

import torch

f64 = torch.float64


# ------------------------------------------------------------------------------------------ the problem
@dataclass
class Problem:
    """One KDA call in fla's convention, after the gate, beta and norm were applied.

    q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K] (log decay <= 0); beta [B, T, HV];
    h0 [N, HV, K, V] or None (zeros); cu_seqlens: token offsets of a packed batch (B == 1) or None."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    scale: float
    h0: torch.Tensor | None = None
    cu_seqlens: list[int] | None = None

    def sequences(self) -> list[tuple[int, int, int]]:
        """(batch row, first token, end token) of every sequence."""
        B, T = self.q.shape[:2]
        if self.cu_seqlens is None:
            return [(b, 0, T) for b in range(B)]
        assert B == 1, "a packed batch has B == 1"
        c = list(self.cu_seqlens)
        return [(0, c[i], c[i + 1]) for i in range(len(c) - 1)]

    def to(self, dtype=f64, device=None) -> Problem:
        """The same problem with every float tensor converted (values are upcast exactly)."""
        def cv(x):
            return None if x is None else x.to(device=device or x.device, dtype=dtype)
        return replace(self, q=cv(self.q), k=cv(self.k), v=cv(self.v), g=cv(self.g), beta=cv(self.beta),
                       h0=cv(self.h0))


# ------------------------------------------------------------------------------------ gate and norm
def softplus(x: torch.Tensor) -> torch.Tensor:
    """log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|)."""
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def gate(g_raw, A_log, dt_bias, lower_bound: float | None = None) -> torch.Tensor:
    """Our float64 gate: raw gate [..., HV, K], A_log [HV], dt_bias [HV, K] (or [HV * K]) -> log decay.

    unbounded: -exp(A_log) * softplus(g_raw + dt_bias); safe: lower_bound / (1 + exp(-exp(A_log) * x))."""
    HV, K = g_raw.shape[-2:]
    x = g_raw.to(f64) + dt_bias.to(f64).reshape(HV, K)
    rate = A_log.to(f64).exp().reshape(HV, 1)
    if lower_bound is None:
        return -rate * softplus(x)
    return lower_bound / (1.0 + torch.exp(-rate * x))


def fla_gate(g_raw, A_log, dt_bias, lower_bound: float | None = None) -> torch.Tensor:
    """fla's pure-PyTorch gates (float32 inside), returned as float64."""
    from fla.ops.kda.gate import naive_kda_gate, naive_kda_lowerbound_gate

    bias = dt_bias.reshape(-1)
    if lower_bound is None:
        return naive_kda_gate(g_raw, A_log, bias, output_dtype=torch.float32).to(f64)
    return naive_kda_lowerbound_gate(g_raw, A_log, bias, lower_bound=lower_bound, output_dtype=torch.float32).to(f64)


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """x * rsqrt(sum(x^2) + 1e-6) along the last axis, float64 (the KDA in-op norm)."""
    x = x.to(f64)
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """1 / (1 + e^-x) in float64."""
    return 1.0 / (1.0 + torch.exp(-x.to(f64)))


# --------------------------------------------------------------------------- fla naive, in float64
def _float64_torch() -> types.ModuleType:
    """A stand-in for the `torch` module whose `torch.float` is float64 (everything else is torch)."""
    shim = types.ModuleType("torch_float64")
    shim.__getattr__ = lambda name: getattr(torch, name)  # module-level __getattr__ (PEP 562)
    shim.float = torch.float64
    return shim


def _fla_naive_float64():
    from fla.ops.kda import naive

    fn = naive.naive_recurrent_kda
    return types.FunctionType(fn.__code__, {**vars(naive), "torch": _float64_torch()}, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def fla_recurrent(p: Problem) -> tuple[torch.Tensor, torch.Tensor]:
    """fla's naive_recurrent_kda run in float64, one call per sequence: (o [B, T, HV, V], ht [N, HV, K, V]).

    Differentiable (autograd flows through it), which the backward tests use."""
    naive = _fla_naive_float64()
    p = p.to(f64)
    outs, states = [], []
    for n, (b, s, e) in enumerate(p.sequences()):
        sl = (slice(b, b + 1), slice(s, e))
        h0 = None if p.h0 is None else p.h0[n:n + 1]
        o, ht = naive(p.q[sl], p.k[sl], p.v[sl], p.g[sl], p.beta[sl], scale=p.scale, initial_state=h0,
                      output_final_state=True)
        outs.append(o)
        states.append(ht)
    if p.cu_seqlens is None:
        return torch.cat(outs, 0), torch.cat(states, 0)
    return torch.cat(outs, 1), torch.cat(states, 0)


# ------------------------------------------------------------------------------ our chunked form
def _chunked_sequence(q, k, v, g, beta, S, chunk: int):
    """One sequence: q, k, g [T, HV, K] (q scaled, k GVA-expanded), v [T, HV, V], beta [T, HV],
    S [HV, K, V]. Returns (o [T, HV, V], S). Head-major inside: [HV, t, ...]."""
    q, k, v, g = (x.transpose(0, 1) for x in (q, k, v, g))      # [HV, T, .]
    beta = beta.transpose(0, 1)                                 # [HV, T]
    T = q.shape[1]
    out = []
    for c0 in range(0, T, chunk):
        qc, kc, vc, bc = q[:, c0:c0 + chunk], k[:, c0:c0 + chunk], v[:, c0:c0 + chunk], beta[:, c0:c0 + chunk]
        G = g[:, c0:c0 + chunk].cumsum(1)                       # inclusive cumulative log decay [HV, n, K]
        n = G.shape[1]
        # exp(G_i - G_j) only where j <= i (a non-positive exponent); -inf elsewhere gives exactly 0.
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        rel = torch.where(causal[None, :, :, None], G[:, :, None, :] - G[:, None, :, :], -torch.inf).exp()
        A_kk = ((kc[:, :, None, :] * kc[:, None, :, :]) * rel).sum(-1).tril(-1) * bc[:, :, None]
        A_qk = ((qc[:, :, None, :] * kc[:, None, :, :]) * rel).sum(-1)
        # (I + A_kk) [W U] = [beta k exp(G)  beta v]: unit lower triangular, so forward substitution.
        rhs = torch.cat([bc[..., None] * kc * G.exp(), bc[..., None] * vc], dim=-1)
        rows = []
        for i in range(n):
            rows.append(rhs[:, i] - (A_kk[:, i, None, :i] @ torch.stack(rows, 1))[:, 0] if i else rhs[:, 0])
        WU = torch.stack(rows, 1)
        W, U = WU[..., :kc.shape[-1]], WU[..., kc.shape[-1]:]
        v_new = U - W @ S                                       # [HV, n, V]
        out.append((qc * G.exp()) @ S + A_qk @ v_new)
        last = G[:, -1:, :]                                     # [HV, 1, K]
        S = last.transpose(1, 2).exp() * S + (kc * (last - G).exp()).transpose(1, 2) @ v_new
    return torch.cat(out, 1).transpose(0, 1), S


def chunked(p: Problem, chunk: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Our chunked KDA in float64: (o [B, T, HV, V], ht [N, HV, K, V])."""
    p = p.to(f64)
    H, K = p.q.shape[2:]
    HV, V = p.v.shape[2:]
    group = HV // H
    q = p.q.repeat_interleave(group, dim=2) * p.scale
    k = p.k.repeat_interleave(group, dim=2)
    o = torch.zeros_like(p.v)
    states = []
    for n, (b, s, e) in enumerate(p.sequences()):
        S = torch.zeros(HV, K, V, dtype=f64, device=p.q.device) if p.h0 is None else p.h0[n].clone()
        o[b, s:e], S = _chunked_sequence(q[b, s:e], k[b, s:e], p.v[b, s:e], p.g[b, s:e], p.beta[b, s:e], S, chunk)
        states.append(S)
    return o, torch.stack(states)


# --------------------------------------------------------------------------------- state layouts
def state_to_kv(state: torch.Tensor, layout: str) -> torch.Tensor:
    """A state [..., K, V] ('kv') or [..., V, K] ('vk') as [..., K, V]."""
    return state if layout == "kv" else state.transpose(-1, -2)


def state_from_kv(state: torch.Tensor, layout: str) -> torch.Tensor:
    """A state [..., K, V] in the given layout."""
    return state_to_kv(state, layout)


# ---------------------------------------------------------------------------- fla Triton (GPU)
@dataclass
class RawCall:
    """A KDA call as an engine makes it, for fla's kernels to do the gate / beta / norm themselves.

    q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K]: the log decay, or the raw gate when A_log is given;
    beta [B, T, HV]: a probability, or logits when beta_logits; h0 in `layout`."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    scale: float
    h0: torch.Tensor | None = None
    cu_seqlens: torch.Tensor | None = None
    A_log: torch.Tensor | None = None
    dt_bias: torch.Tensor | None = None
    lower_bound: float | None = None
    beta_logits: bool = False
    qk_l2norm: bool = False
    layout: str = "kv"


def fla_triton(call: RawCall, kernel: str = "chunk") -> tuple[torch.Tensor, torch.Tensor]:
    """fla's Triton `chunk_kda` (kernel='chunk') or `fused_recurrent_kda` ('recurrent') on a CUDA device.
    Returns (o [B, T, HV, V] in v's dtype, final state [N, HV, ...] float32 in call.layout)."""
    from fla.ops.kda import chunk_kda, fused_recurrent_kda

    in_gate = call.A_log is not None
    kwargs = {"scale": call.scale, "initial_state": call.h0, "output_final_state": True,
              "use_qk_l2norm_in_kernel": call.qk_l2norm, "use_gate_in_kernel": in_gate,
              "use_beta_sigmoid_in_kernel": call.beta_logits, "state_v_first": call.layout == "vk",
              "cu_seqlens": call.cu_seqlens}
    if in_gate:
        kwargs.update(A_log=call.A_log.float(), dt_bias=call.dt_bias.float().reshape(-1),
                      lower_bound=call.lower_bound)
    if kernel == "chunk":
        if in_gate and call.lower_bound is not None:
            kwargs["safe_gate"] = True
        if call.cu_seqlens is not None:
            kwargs["cu_seqlens_cpu"] = call.cu_seqlens.cpu()
        o, ht = chunk_kda(call.q, call.k, call.v, call.g, call.beta, **kwargs)
    else:
        o, ht = fused_recurrent_kda(call.q, call.k, call.v, call.g, call.beta, **kwargs)
    return o, ht
