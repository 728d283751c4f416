"""The element-wise ends of a KDA backward with in-kernel options (kernels/autograd.py's `kda_backward_raw`), one
Triton pass each instead of PyTorch autograd over a dozen element-wise kernels and float32 copies:

- before the core backward: q and k L2-normalised (`l2_normalize`), or their norm factors alone (`l2_factors`, for
  a core that reads q and k with them); the gate's log decay is kernels/gate.py's;
- after it, the chain rule back to the raw inputs:

    L2 norm    y = x r, r = 1 / sqrt(sum_K x^2 + 1e-6):                  dx = r (dy - y <y, dy>)
    unbounded  g = -a softplus(u), u = g_raw + dt_bias, a = exp(A_log):  du = -a sigmoid(u) dg,  dA_log = sum dg g
    safe       g = lb sigmoid(a u):                                      du = lb a s (1 - s) dg,  dA_log = sum du u
    dg_raw = du, ddt_bias = sum over tokens of du (s = sigmoid(a u); sums over the tokens and, for dA_log, the
    channels of a head)

The sums are deterministic: each program adds up its tile of rows, and PyTorch adds the tiles' partial sums.
Math in float32 (float64 for float64 inputs, for gradcheck); rows are flattened leading axes, int64 offsets,
masked loads for any K <= 256 and any number of rows. beta's logits stay in PyTorch ([T, HV]: small).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kda_trace.kernels.gate import GATE_CODES, softplus


def _row_tile(K: int, n_rows: int) -> tuple[int, int]:
    """(rows per program, K-tile): the whole row of K channels, up to 4096 elements per tile."""
    BK = max(16, triton.next_power_of_2(K))
    return max(1, min(64, 4096 // BK, triton.next_power_of_2(max(n_rows, 1)))), BK


@triton.jit(do_not_specialize=["n_rows"])
def _l2_forward_kernel(x, y, n_rows, K: tl.constexpr, BR: tl.constexpr, BK: tl.constexpr, ONLY_R: tl.constexpr):
    """y = x r per row, r = 1 / sqrt(sum x^2 + 1e-6); with ONLY_R, r itself ([n_rows]) into y."""
    o_r = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR).to(tl.int64)
    o_k = tl.arange(0, BK)
    m = (o_r < n_rows)[:, None] & (o_k < K)[None, :]
    off = o_r[:, None] * K + o_k[None, :]
    b_x = tl.load(x + off, mask=m, other=0.0).to(y.dtype.element_ty)
    r = 1.0 / tl.sqrt(tl.sum(b_x * b_x, axis=1) + 1e-6)
    if ONLY_R:
        tl.store(y + o_r, r, mask=o_r < n_rows)
    else:
        tl.store(y + off, b_x * r[:, None], mask=m)


@triton.jit(do_not_specialize=["n_rows"])
def _l2_backward_kernel(x, dy, dx, n_rows, K: tl.constexpr, BR: tl.constexpr, BK: tl.constexpr):
    o_r = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR).to(tl.int64)
    o_k = tl.arange(0, BK)
    m = (o_r < n_rows)[:, None] & (o_k < K)[None, :]
    off = o_r[:, None] * K + o_k[None, :]
    b_dy = tl.load(dy + off, mask=m, other=0.0)
    b_x = tl.load(x + off, mask=m, other=0.0).to(b_dy.dtype)
    r = 1.0 / tl.sqrt(tl.sum(b_x * b_x, axis=1) + 1e-6)
    b_y = b_x * r[:, None]
    b_dx = r[:, None] * (b_dy - b_y * tl.sum(b_y * b_dy, axis=1)[:, None])
    tl.store(dx + off, b_dx.to(dx.dtype.element_ty), mask=m)


@triton.jit(do_not_specialize=["n_rows", "lower_bound"])
def _gate_backward_kernel(
    g_raw, A_log, dt_bias, dg, dg_raw, part_bias, part_alog, n_rows, lower_bound,
    H: tl.constexpr, K: tl.constexpr, BR: tl.constexpr, BK: tl.constexpr, GATE: tl.constexpr,
):
    """A tile of BR rows of one head (a row: one token's [H, K] block): dg_raw, and the tile's sums for ddt_bias
    (part_bias [tiles, H, K]) and dA_log (part_alog [tiles, H])."""
    i_r = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    o_r = i_r * BR + tl.arange(0, BR).to(tl.int64)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    m = (o_r < n_rows)[:, None] & m_k[None, :]
    off = (o_r[:, None] * H + i_h) * K + o_k[None, :]
    b_dg = tl.load(dg + off, mask=m, other=0.0)
    a = tl.exp(tl.load(A_log + i_h))
    u = tl.load(g_raw + off, mask=m, other=0.0).to(b_dg.dtype) + tl.load(dt_bias + i_h * K + o_k, mask=m_k,
                                                                          other=0.0)[None, :]
    if GATE == 1:
        # softplus(u) = u past 20, as torch's and the forward's (kernels/gate.py); its derivative sigmoid(u)
        g = -a * softplus(u)
        du = tl.where(m, -a * tl.where(u > 20.0, 1.0, tl.sigmoid(u)) * b_dg, 0.0)
        d_alog = tl.sum(tl.sum(tl.where(m, b_dg * g, 0.0), axis=1), axis=0)
    else:
        s = tl.sigmoid(a * u)
        du = tl.where(m, lower_bound * a * s * (1.0 - s) * b_dg, 0.0)
        d_alog = tl.sum(tl.sum(du * u, axis=1), axis=0)
    tl.store(dg_raw + off, du.to(dg_raw.dtype.element_ty), mask=m)
    tl.store(part_bias + (i_r * H + i_h) * K + o_k, tl.sum(du, axis=0), mask=m_k)
    tl.store(part_alog + i_r * H + i_h, d_alog)


def _l2_forward(x: torch.Tensor, dtype: torch.dtype, only_r: bool) -> torch.Tensor:
    """`_l2_forward_kernel` over x's rows: x normalised ([*x.shape]), or with only_r its factors ([*x.shape[:-1]])."""
    x = x.contiguous()
    out = torch.empty(x.shape[:-1] if only_r else x.shape, dtype=dtype, device=x.device)
    K = x.shape[-1]
    n_rows = x.numel() // K
    if n_rows:
        BR, BK = _row_tile(K, n_rows)
        _l2_forward_kernel[(triton.cdiv(n_rows, BR),)](x, out, n_rows, K=K, BR=BR, BK=BK, ONLY_R=only_r, num_warps=4)
    return out


def l2_normalize(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x / sqrt(sum_K x^2 + 1e-6) over the last axis, in `dtype` (float32, or float64)."""
    return _l2_forward(x, dtype, only_r=False)


def l2_factors(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The L2-norm factors 1 / sqrt(sum_K x^2 + 1e-6) of x's rows ([*x.shape[:-1]], `dtype`): `l2_normalize(x)` is
    x times them, to the bit (the same kernel). The chunked backward reads q and k with their factors
    (kernels/backward.py `kda_backward(qk_norms=...)`) instead of fp32 copies."""
    return _l2_forward(x, dtype, only_r=True)


def l2_normalize_backward(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The gradient for x (x's dtype) of `l2_normalize(x)` given the one for its result, dy (float32 or float64)."""
    x, dy = x.contiguous(), dy.contiguous()
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    K = x.shape[-1]
    n_rows = x.numel() // K
    if n_rows:
        BR, BK = _row_tile(K, n_rows)
        _l2_backward_kernel[(triton.cdiv(n_rows, BR),)](x, dy, dx, n_rows, K=K, BR=BR, BK=BK, num_warps=4)
    return dx


def gate_backward(g_raw: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor, dg: torch.Tensor, gate: str,
                  lower_bound: float = -5.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dg_raw, dA_log, ddt_bias) of kernels/gate.py's `kda_gate(g_raw, A_log, dt_bias, gate, lower_bound)` given
    dg (float32 or float64, g_raw's shape), each in its input's dtype and shape."""
    if gate not in GATE_CODES:
        raise ValueError(f"gate must be 'unbounded' or 'safe', got {gate!r}")
    H, K = g_raw.shape[-2:]
    acc = dg.dtype
    g_raw, dg = g_raw.contiguous(), dg.contiguous()
    a_log, bias = A_log.to(acc).contiguous(), dt_bias.to(acc).contiguous()
    n_rows = g_raw.numel() // (H * K)
    BR, BK = _row_tile(K, n_rows)
    tiles = triton.cdiv(n_rows, BR)
    dg_raw = torch.empty(g_raw.shape, dtype=g_raw.dtype, device=g_raw.device)
    part_bias = torch.zeros(tiles, H, K, dtype=acc, device=g_raw.device)
    part_alog = torch.zeros(tiles, H, dtype=acc, device=g_raw.device)
    if n_rows:
        _gate_backward_kernel[(tiles, H)](
            g_raw, a_log, bias, dg, dg_raw, part_bias, part_alog, n_rows, float(lower_bound),
            H=H, K=K, BR=BR, BK=BK, GATE=GATE_CODES[gate], num_warps=4)
    d_alog = part_alog.sum(0).reshape(A_log.shape).to(A_log.dtype)
    d_bias = part_bias.sum(0).reshape(dt_bias.shape).to(dt_bias.dtype)
    return dg_raw, d_alog, d_bias
