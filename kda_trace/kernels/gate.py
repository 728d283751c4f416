"""The KDA gate alone, in one Triton kernel: a raw gate input to the per-channel log decay.

    unbounded (Kimi Linear):      g = -exp(A_log) * softplus(g_raw + dt_bias)     (softplus(x) = x for x > 20)
    safe / lower bound (K3, GLM): g = lower_bound * sigmoid(exp(A_log) * (g_raw + dt_bias))

g_raw is `[..., H, K]` (any leading axes, flattened to rows), A_log `[H]`, dt_bias `[H, K]` (or `[H * K]`);
g is float32 of g_raw's shape. One program handles a tile of rows x K channels of one head, so A_log is read
once per program and dt_bias once per tile. The math is float32 (float64 inputs stay float64, for checks).

softplus for x <= 20 is log1p(exp(x)), computed as log(1 + y) * y / ((1 + y) - 1) with y = exp(x): the
correction keeps its relative accuracy when y is tiny (a strongly negative x), where log(1 + y) alone would
lose it to the rounding of 1 + y. (Triton has no portable log1p; this is Goldberg's classic rewrite.)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

GATE_CODES = {"unbounded": 1, "safe": 2}


@triton.jit
def _log1p(y):
    """log(1 + y) for y >= 0, accurate also for tiny y (see the module docstring)."""
    w = 1.0 + y
    d = w - 1.0
    return tl.where(d == 0.0, y, tl.log(w) * (y / tl.where(d == 0.0, 1.0, d)))


@triton.jit
def softplus(x):
    """log(1 + exp(x)), x above 20 as itself (torch's threshold); the clamp keeps exp finite in the branch not
    taken. The unbounded gate's -A softplus(g_raw + dt_bias) in every kernel that computes it."""
    return tl.where(x > 20.0, x, _log1p(tl.exp(tl.minimum(x, 20.0))))


@triton.jit(do_not_specialize=["n_rows", "lower_bound"])
def _gate_kernel(
    g_raw, A_log, dt_bias, g, n_rows, lower_bound,
    H: tl.constexpr, K: tl.constexpr, BR: tl.constexpr, BK: tl.constexpr, GATE: tl.constexpr,
):
    i_r = tl.program_id(0).to(tl.int64)  # tile of BR rows (a row = one token's [H, K] block)
    i_h = tl.program_id(1).to(tl.int64)
    o_r = i_r * BR + tl.arange(0, BR).to(tl.int64)  # int64: rows * H * K may pass 2^31
    m_r = o_r < n_rows
    a = tl.exp(tl.load(A_log + i_h))
    for k0 in range(0, K, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        m = m_r[:, None] & m_k[None, :]
        off = (o_r[:, None] * H + i_h) * K + o_k[None, :]
        bias = tl.load(dt_bias + i_h * K + o_k, mask=m_k, other=0.0)
        x = tl.load(g_raw + off, mask=m, other=0.0).to(bias.dtype) + bias[None, :]
        if GATE == 1:
            # the clamp keeps exp finite in the branch not taken
            y = -a * softplus(x)
        else:
            y = lower_bound * tl.sigmoid(a * x)
        tl.store(g + off, y, mask=m)


def kda_gate(g_raw: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor, gate: str = "unbounded",
             lower_bound: float = -5.0) -> torch.Tensor:
    r"""The log decay from a raw gate.

    Args:
        g_raw: `[..., H, K]` raw gate input (bf16, fp16, fp32 or fp64).
        A_log: `[H]` per-head log rate.
        dt_bias: `[H, K]` or `[H * K]` per-channel bias.
        gate: "unbounded" (-exp(A_log) softplus(x)) or "safe" (lower_bound sigmoid(exp(A_log) x)).
        lower_bound: the bound of the safe gate (ignored by the unbounded one).

    Returns:
        g: `[..., H, K]` float32 (float64 when g_raw and the parameters are float64).
    """
    if gate not in GATE_CODES:
        raise ValueError(f"gate must be 'unbounded' or 'safe', got {gate!r}")
    if g_raw.dim() < 2:
        raise ValueError(f"g_raw must be [..., H, K], got shape {tuple(g_raw.shape)}")
    H, K = g_raw.shape[-2:]
    if tuple(A_log.shape) != (H,):
        raise ValueError(f"A_log must be [{H}], got {tuple(A_log.shape)}")
    if dt_bias.numel() != H * K or dt_bias.shape[-1] not in (K, H * K):
        raise ValueError(f"dt_bias must be [{H}, {K}] or [{H * K}], got {tuple(dt_bias.shape)}")
    wide = g_raw.dtype == A_log.dtype == dt_bias.dtype == torch.float64
    dtype = torch.float64 if wide else torch.float32
    g_raw = g_raw.contiguous()
    A_log = A_log.to(dtype).contiguous()
    dt_bias = dt_bias.to(dtype).contiguous()
    g = torch.empty(g_raw.shape, dtype=dtype, device=g_raw.device)
    n_rows = g_raw.numel() // (H * K)
    if n_rows == 0:
        return g
    BK = min(128, triton.next_power_of_2(K))
    BR = max(1, min(64, 4096 // BK, triton.next_power_of_2(n_rows)))
    _gate_kernel[(triton.cdiv(n_rows, BR), H)](
        g_raw, A_log, dt_bias, g, n_rows, float(lower_bound),
        H=H, K=K, BR=BR, BK=BK, GATE=GATE_CODES[gate], num_warps=4,
    )
    return g
