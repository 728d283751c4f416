"""KDA backward (dq, dk, dv, dg, dbeta, dh0 from do and dht) in one Triton kernel: a recompute-based reverse
sweep, token by token, with the state checkpointed every CT = 64 tokens.

Design (the chunked backward of fla is not what this is): one program owns one (sequence, value head,
V-tile). The forward recurrence never mixes V columns of the state (S^T k reads column v only from column
v), and neither does its backward, so V-tiles are independent; their contributions to dq, dk, dg and dbeta
(sums over V) are added into fp32 buffers with atomic adds (one tile per program under the interpreter, so
there the sums are deterministic).

Per token t, with a_t = exp(g_t) (g_t <= 0), the forward (KDA.md) is
    S' = diag(a_t) S_{t-1};  r = v_t - S'^T k_t;  S_t = S' + beta_t k_t r^T;  o_t = S_t^T (scale q_t)
and, with dS the gradient of the loss with respect to S_t (dht at the end), its reverse step is
    dS     += scale q_t do_t^T                 dq_t = scale S_t do_t
    dk_t    = dS (beta r) + S' du              with dd = dS^T k_t (gradient of beta r), du = -beta dd
    dv_t    = beta dd                          dbeta_t = dd . r
    dS'     = dS + k_t du^T                    dg_t = rowsum(dS' * S')   (d/dg of a_t S_{t-1})
    dS      = diag(a_t) dS'                    (the gradient for S_{t-1}; after the first token: dh0)
Every exp has the argument g <= 0: nothing is divided by a decay, so strong gates are safe.

The reverse sweep needs S_{t-1} at every token, last to first. Phase 1 runs the forward over the sequence
and stores the state at each 64-token chunk start (`checkpoints`, fp32 [chunks, HV, K, V]). Phase 2 walks
the chunks last to first and each chunk's SEG-token segments last to first (SEG = LAUNCH["seg"], 16 on a
GPU): it re-runs the forward from the chunk's checkpoint to the segment, stores the segment's SEG states
S_{t-1} in the program's own scratch (fp32 [programs, SEG, K, BV]), then steps back through the segment.
Cost with SEG 16: about 4.5 forward passes of work (1 to checkpoint, 1.5 to reach segments, 1 storing, then
the reverse step, about 2 forwards); with SEG 64 the 1.5 re-run passes go. Everything is sequential over a
sequence's tokens, so long sequences with few heads leave most of a GPU idle.
Memory beyond inputs and gradients: checkpoints 4 * K * V bytes per value head per 64 tokens (K = V = 128:
1 KiB per token per head, e.g. 512 MiB for 16384 tokens x 32 heads), scratch 4 * SEG * K * BV bytes per
program, and fp32 buffers for dq, dk (per value head), dg: 12 * K bytes per token per value head.

`kda_forward_exact` runs phase 1 alone (FORWARD) and writes o and the final state: an exact token-by-token
forward (in float64 for float64 inputs) used for gradient checks.

Precision: fp32 throughout (float64 when every float input is float64); inputs are read in their dtype and
converted. Addresses: per-program bases are int64 scalars; every load and store is masked, so any K, V
(<= 256), sequence length >= 1 and total size work.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kda_trace.kernels.options import KDAOptions

CT = 64  # checkpoint interval (tokens); equals chunk.BT so the chunk tables of chunk.py serve here
_DEFAULT_OPTIONS = KDAOptions()
# Launch settings: V-tile (None: 16 on a GPU, the most programs; under the interpreter the whole V, since it
# pays per program) and warps per program (None: 4, or 8 when the [BK, BV] tile passes 2048 elements). From
# ptxas -v for sm_90 at K = 128 (no GPU run yet): BV 16 / 4 warps and BV 32 / 8 warps do not spill, BV 32 /
# 4 warps and BV 64 do. Not timed yet; benchmarks/bench_backward.py --bv / --warps sweep them.
# seg: tokens whose states a program holds in its scratch at a time (a divisor of CT; None: 16 on a GPU, 64
# under the interpreter, which has few programs): 16 re-runs about 1.5 forward passes to reach the segments;
# CT (64) re-runs none, for 4x the scratch.
LAUNCH = {"bv": None, "warps": None, "seg": None}


@triton.jit
def _load_token(q, k, v, g, beta, r, i_h, i_hv, o_k, o_v, m_k, m_v,
                H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, ACC: tl.constexpr):
    """q, k (head i_h), v, g, beta (value head i_hv) of token row r, in the compute dtype."""
    b_q = tl.load(q + (r * H + i_h) * K + o_k, mask=m_k, other=0.0).to(ACC)
    b_k = tl.load(k + (r * H + i_h) * K + o_k, mask=m_k, other=0.0).to(ACC)
    b_g = tl.load(g + (r * HV + i_hv) * K + o_k, mask=m_k, other=0.0).to(ACC)
    b_v = tl.load(v + (r * HV + i_hv) * V + o_v, mask=m_v, other=0.0).to(ACC)
    b_b = tl.load(beta + r * HV + i_hv).to(ACC)
    return b_q, b_k, b_g, b_v, b_b


@triton.jit
def _step(b_s, b_k, b_g, b_v, b_b):
    """S_t from S_{t-1} ([BK, BV] tile): decay, then the delta-rule write with the decayed state."""
    b_s = b_s * tl.exp(b_g)[:, None]
    b_r = b_v - tl.sum(b_s * b_k[:, None], axis=0)
    return b_s + b_k[:, None] * (b_b * b_r)[None, :]


@triton.jit(do_not_specialize=["scale"])
def _kda_bwd_kernel(
    q, k, v, g, beta, do, h0, dht, o, ht,
    dq, dk, dv, dg, dbeta, dh0,
    checkpoints, scratch, cu_seqlens, chunk_offsets, scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, CT: tl.constexpr, SEG: tl.constexpr,
    USE_H0: tl.constexpr, USE_DHT: tl.constexpr, FORWARD: tl.constexpr,
):
    NV: tl.constexpr = (V + BV - 1) // BV
    pid = tl.program_id(0).to(tl.int64)
    i_v = pid % NV
    i_nh = pid // NV
    i_n = i_nh // HV
    i_hv = i_nh % HV
    i_h = i_hv // (HV // H)  # GVA: value head hv reads q/k head hv // (HV // H)
    ACC: tl.constexpr = checkpoints.dtype.element_ty  # fp32, or fp64 for float64 checks

    # dense batches come with the same tables (B sequences of T tokens)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    n_tok = tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos
    c0 = tl.load(chunk_offsets + i_n).to(tl.int64)  # the sequence's first checkpoint

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    off_s = o_k[:, None] * V + o_v[None, :]  # element (k, v) of a [K, V] state
    s_base = (i_n * HV + i_hv) * (K * V)

    # ---- phase 1: forward over the sequence; the state at each chunk start goes to the checkpoints
    if USE_H0:
        b_s = tl.load(h0 + s_base + off_s, mask=m_kv, other=0.0).to(ACC)
    else:
        b_s = tl.zeros([BK, BV], dtype=ACC)
    n_chunks = (n_tok + CT - 1) // CT
    for c in range(n_chunks):
        if not FORWARD:
            tl.store(checkpoints + ((c0 + c) * HV + i_hv) * (K * V) + off_s, b_s, mask=m_kv)
        for t in range(c * CT, tl.minimum(c * CT + CT, n_tok)):
            b_q, b_k, b_g, b_v, b_b = _load_token(q, k, v, g, beta, bos + t, i_h, i_hv, o_k, o_v, m_k, m_v,
                                                  H, HV, K, V, ACC)
            b_s = _step(b_s, b_k, b_g, b_v, b_b)
            if FORWARD:
                b_o = tl.sum(b_s * (b_q * scale)[:, None], axis=0)
                tl.store(o + ((bos + t) * HV + i_hv) * V + o_v, b_o, mask=m_v)
    if FORWARD:
        tl.store(ht + s_base + off_s, b_s, mask=m_kv)
        return
    # the checkpoints are read back below by other threads of this program
    tl.debug_barrier()

    # ---- phase 2: chunks last to first, each chunk's segments last to first
    if USE_DHT:
        b_ds = tl.load(dht + s_base + off_s, mask=m_kv, other=0.0).to(ACC)
    else:
        b_ds = tl.zeros([BK, BV], dtype=ACC)
    p_scr = scratch + pid * (SEG * BK * BV)
    off_scr = o_k[:, None] * BV + tl.arange(0, BV)[None, :]
    for cr in range(n_chunks):
        c = n_chunks - 1 - cr
        t_c = c * CT
        n_seg = (tl.minimum(CT, n_tok - t_c) + SEG - 1) // SEG
        for sr in range(n_seg):
            s = n_seg - 1 - sr
            t_s = t_c + s * SEG
            t_e = tl.minimum(t_s + SEG, n_tok)
            # re-run the forward from the checkpoint to the segment start
            b_s = tl.load(checkpoints + ((c0 + c) * HV + i_hv) * (K * V) + off_s, mask=m_kv, other=0.0)
            for t in range(t_c, t_s):
                b_q, b_k, b_g, b_v, b_b = _load_token(q, k, v, g, beta, bos + t, i_h, i_hv, o_k, o_v, m_k, m_v,
                                                      H, HV, K, V, ACC)
                b_s = _step(b_s, b_k, b_g, b_v, b_b)
            # the segment's states S_{t-1} into scratch
            for t in range(t_s, t_e):
                tl.store(p_scr + (t - t_s) * (BK * BV) + off_scr, b_s)
                b_q, b_k, b_g, b_v, b_b = _load_token(q, k, v, g, beta, bos + t, i_h, i_hv, o_k, o_v, m_k, m_v,
                                                      H, HV, K, V, ACC)
                b_s = _step(b_s, b_k, b_g, b_v, b_b)
            tl.debug_barrier()
            # reverse steps through the segment
            for tr in range(t_e - t_s):
                t = t_e - 1 - tr
                r = bos + t
                b_prev = tl.load(p_scr + (t - t_s) * (BK * BV) + off_scr)
                b_q, b_k, b_g, b_v, b_b = _load_token(q, k, v, g, beta, r, i_h, i_hv, o_k, o_v, m_k, m_v,
                                                      H, HV, K, V, ACC)
                b_do = tl.load(do + (r * HV + i_hv) * V + o_v, mask=m_v, other=0.0).to(ACC)
                b_a = tl.exp(b_g)
                b_sp = b_prev * b_a[:, None]                         # S'
                b_r = b_v - tl.sum(b_sp * b_k[:, None], axis=0)      # v - S'^T k
                b_st = b_sp + b_k[:, None] * (b_b * b_r)[None, :]    # S_t
                b_ds += (b_q * scale)[:, None] * b_do[None, :]
                b_dq = scale * tl.sum(b_st * b_do[None, :], axis=1)
                b_dd = tl.sum(b_ds * b_k[:, None], axis=0)           # gradient of beta r
                b_du = -b_b * b_dd
                b_dk = tl.sum(b_ds * (b_b * b_r)[None, :], axis=1) + tl.sum(b_sp * b_du[None, :], axis=1)
                b_dsp = b_ds + b_k[:, None] * b_du[None, :]
                b_dg = tl.sum(b_dsp * b_sp, axis=1)
                b_ds = b_dsp * b_a[:, None]
                # V-tile partial sums of the gradients that reduce over V
                tl.atomic_add(dq + (r * HV + i_hv) * K + o_k, b_dq, mask=m_k)
                tl.atomic_add(dk + (r * HV + i_hv) * K + o_k, b_dk, mask=m_k)
                tl.atomic_add(dg + (r * HV + i_hv) * K + o_k, b_dg, mask=m_k)
                tl.atomic_add(dbeta + r * HV + i_hv, tl.sum(b_dd * b_r, axis=0))
                tl.store(dv + (r * HV + i_hv) * V + o_v, b_b * b_dd, mask=m_v)
            # the scratch is overwritten by the next segment
            tl.debug_barrier()
    tl.store(dh0 + s_base + off_s, b_ds, mask=m_kv)


@dataclass
class KDAGrads:
    """Gradients of sum(o * do) + sum(final_state * dht). dq, dk like q; dv like v; dg fp32 (fp64 for fp64
    inputs) like g; dbeta like beta; dh0 fp32 like the initial state (in its layout), or None without one."""

    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    dg: torch.Tensor
    dbeta: torch.Tensor
    dh0: torch.Tensor | None


def _prepare(q, k, v, g, beta, opts, initial_state, cu_seqlens):
    """Shape checks and the packed view; returns (tensors, sizes, sequence tables, compute dtype, h0 [K, V])."""
    from kda_trace.kernels.chunk import _sequence_tables

    if opts.gate != "precomputed" or opts.beta != "prob" or opts.use_qk_l2norm:
        raise ValueError("kernels.backward takes a precomputed g, beta as a probability and q/k as given; apply "
                         "the gate, sigmoid and L2 norm around it (kernels.autograd does, with torch autograd)")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if k.shape != q.shape or v.shape[:2] != (B, T) or g.shape != (B, T, HV, K) or beta.shape != (B, T, HV):
        raise ValueError(
            f"shape mismatch: q {tuple(q.shape)} k {tuple(k.shape)} v {tuple(v.shape)} g {tuple(g.shape)} "
            f"beta {tuple(beta.shape)}; expected k like q, v [B, T, HV, V], g [B, T, HV, K], beta [B, T, HV]")
    if HV % H:
        raise ValueError(f"value heads ({HV}) must be a multiple of q/k heads ({H})")
    if K > 256 or V > 256:
        raise ValueError(f"head dims up to 256 are supported, got K={K}, V={V}")
    if cu_seqlens is not None and B != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1, got {B}")
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    vk = opts.state_layout == "vk"
    state_shape = (N, HV, V, K) if vk else (N, HV, K, V)
    if initial_state is not None and tuple(initial_state.shape) != state_shape:
        raise ValueError(f"initial_state must be {list(state_shape)} ({opts.state_layout} layout), "
                         f"got {list(initial_state.shape)}")
    wide = all(x.dtype == torch.float64 for x in (q, k, v, g, beta))
    acc = torch.float64 if wide else torch.float32
    h0 = None
    if initial_state is not None:
        h0 = (initial_state.transpose(-1, -2) if vk else initial_state).to(acc).contiguous()
    xs = tuple(x.reshape(B * T, *x.shape[2:]).contiguous() for x in (q, k, v, g, beta))
    tables = _sequence_tables(cu_seqlens, B, T, q.device)
    return xs, (B, T, H, HV, K, V, N), tables, acc, h0


def _launch(xs, sizes, tables, acc, h0, do, dht, scale, forward):
    q, k, v, g, beta = xs
    B, T, H, HV, K, V, N = sizes
    cu, _, chunk_offsets, NT = tables
    TT, dev = B * T, q.device
    BK = max(16, triton.next_power_of_2(K))
    from kda_trace.platform import triton_interpreted

    # the interpreter pays per program, not per element: one V-tile there
    if LAUNCH["bv"]:
        BV = LAUNCH["bv"]
    elif triton_interpreted():
        BV = max(16, triton.next_power_of_2(V))
    else:
        BV = 16
    warps = LAUNCH["warps"] or (4 if BK * BV <= 2048 else 8)
    n_prog = N * HV * triton.cdiv(V, BV)
    z = torch.empty(1, dtype=acc, device=dev)
    SEG = LAUNCH["seg"] or (CT if triton_interpreted() else 16)
    if CT % SEG:
        raise ValueError(f"LAUNCH['seg'] must divide {CT}, got {SEG}")
    common = dict(H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, CT=CT, SEG=SEG, USE_H0=h0 is not None,
                  num_warps=warps)
    if forward:
        o = torch.empty(TT, HV, V, dtype=acc, device=dev)
        ht = torch.empty(N, HV, K, V, dtype=acc, device=dev)
        _kda_bwd_kernel[(n_prog,)](
            q, k, v, g, beta, z, h0 if h0 is not None else z, z, o, ht,
            z, z, z, z, z, z, z, z, cu, chunk_offsets, scale, USE_DHT=False, FORWARD=True, **common)
        return o.view(B, T, HV, V).to(v.dtype), ht  # rounded by torch (nearest even)
    do = do.reshape(TT, HV, V).contiguous()
    dht_k = dht.to(acc).contiguous() if dht is not None else z
    dq = torch.zeros(TT, HV, K, dtype=acc, device=dev)
    dk = torch.zeros(TT, HV, K, dtype=acc, device=dev)
    dg = torch.zeros(TT, HV, K, dtype=acc, device=dev)
    dbeta = torch.zeros(TT, HV, dtype=acc, device=dev)
    dv = torch.empty(TT, HV, V, dtype=acc, device=dev)
    dh0 = torch.empty(N, HV, K, V, dtype=acc, device=dev)
    checkpoints = torch.empty(NT, HV, K, V, dtype=acc, device=dev)
    scratch = torch.empty(n_prog, SEG, BK, BV, dtype=acc, device=dev)
    _kda_bwd_kernel[(n_prog,)](
        q, k, v, g, beta, do, h0 if h0 is not None else z, dht_k, z, z,
        dq, dk, dv, dg, dbeta, dh0, checkpoints, scratch, cu, chunk_offsets, scale,
        USE_DHT=dht is not None, FORWARD=False, **common)
    # GVA: the value heads of a group share q/k heads; their contributions add up
    if HV != H:
        dq = dq.view(TT, H, HV // H, K).sum(2)
        dk = dk.view(TT, H, HV // H, K).sum(2)
    return dq, dk, dv, dg, dbeta, dh0


def _dht_kv(dht, opts, N, HV, K, V):
    if dht is None:
        return None
    vk = opts.state_layout == "vk"
    want = (N, HV, V, K) if vk else (N, HV, K, V)
    if tuple(dht.shape) != want:
        raise ValueError(f"dht must be {list(want)} ({opts.state_layout} layout), got {list(dht.shape)}")
    return dht.transpose(-1, -2) if vk else dht


def kda_backward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, do: torch.Tensor,
    opts: KDAOptions = _DEFAULT_OPTIONS, *, initial_state: torch.Tensor | None = None, dht: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> KDAGrads:
    r"""Gradients of L = sum(o * do) + sum(final_state * dht) for the KDA forward with these inputs.

    Args:
        q, k: `[B, T, H, K]`; v: `[B, T, HV, V]` (HV a multiple of H); g: `[B, T, HV, K]` log decay (<= 0);
            beta: `[B, T, HV]` probability; do: `[B, T, HV, V]` gradient of o.
        opts: scale and state layout (gate must be "precomputed", beta "prob", no in-kernel L2 norm).
        initial_state: `[N, HV, K, V]` ("kv") or `[N, HV, V, K]` ("vk"), or None for zeros.
        dht: gradient of the final state (same shape as initial_state), or None for zeros.
        cu_seqlens: `[N + 1]` cumulative lengths of a packed batch (B = 1), or None (N = B rows of T).

    Returns:
        KDAGrads(dq, dk, dv, dg, dbeta, dh0); dh0 is None when initial_state is None.
    """
    xs, sizes, tables, acc, h0 = _prepare(q, k, v, g, beta, opts, initial_state, cu_seqlens)
    B, T, H, HV, K, V, N = sizes
    dht = _dht_kv(dht, opts, N, HV, K, V)
    dq, dk, dv, dg, dbeta, dh0 = _launch(xs, sizes, tables, acc, h0, do, dht, opts.resolved_scale(K), False)
    if initial_state is None:
        dh0 = None
    elif opts.state_layout == "vk":
        dh0 = dh0.transpose(-1, -2).contiguous()
    return KDAGrads(
        dq=dq.view(B, T, H, K).to(q.dtype), dk=dk.view(B, T, H, K).to(k.dtype), dv=dv.view(B, T, HV, V).to(v.dtype),
        dg=dg.view(B, T, HV, K).to(torch.float64 if acc == torch.float64 else torch.float32),
        dbeta=dbeta.view(B, T, HV).to(beta.dtype), dh0=dh0)


def kda_forward_exact(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    opts: KDAOptions = _DEFAULT_OPTIONS, *, initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward token by token with the backward kernel's own steps (phase 1 alone): (o [B, T, HV, V] in
    v's dtype, final state fp32, or fp64 for float64 inputs, in the options' layout). Same arguments as
    `kda_backward` without the gradients. Exact to the compute dtype: for gradient checks, not for speed."""
    xs, sizes, tables, acc, h0 = _prepare(q, k, v, g, beta, opts, initial_state, cu_seqlens)
    K = sizes[4]
    o, ht = _launch(xs, sizes, tables, acc, h0, None, None, opts.resolved_scale(K), True)
    if opts.state_layout == "vk":
        ht = ht.transpose(-1, -2).contiguous()
    return o, ht
