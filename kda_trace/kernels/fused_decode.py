"""KDA fused decode in one Triton kernel: causal convolution + SiLU, one KDA step against a state pool, gated
RMSNorm (the fused_decode family, docs/KDA_FAMILIES.md; FlashInfer's `fused_kda_decode`).

One launch per call; one program per (request row, head) steps that head's [V, K] state (K-last), whole or in
blocks of rows (launch_for; docs/KERNELS.md). Per live row (slot s = state_indices[n] > 0), in float32:

    prologue  for q, k and v of the head: y = w0 h0 + w1 h1 + w2 h2 + w3 x over the slot's convolution window
              (oldest first), mixed = y sigmoid(y), rounded to bf16; the window moves by one, [h1, h2, x];
              q, k L2-normalised (x / sqrt(sum(x^2) + 1e-6)), q times scale; the in-op gate from g_raw, A_log
              and dt_bias (unbounded or safe); beta = sigmoid(b)
    step      P = P diag(exp(g));  P = P + beta (v - P k) k^T;  o = P q     (P = S^T, the pool's [V, K])
    epilogue  o rounded to bf16; out = o / sqrt(mean(o^2) + norm_eps) * norm_weight * sigmoid(output_gate),
              rounded to bf16

Each bf16 rounding is to nearest even through the bits (`_to_bf16_rne`), so compiled and interpreted Triton give
the same bits. A bf16 pool is read into fp32 and rounded once at the store. A row whose slot is not positive (-1,
or the null slot 0) is padding: its o is zero and nothing is read from or written to either pool. Both pools are
updated in place; a program writes only its own head's channels and state of its own slot, so live slots must be
distinct (not checked: that would synchronise with the device).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kda_trace.kernels.common import GATE_CODES, register_cap
from kda_trace.kernels.gate import softplus
from kda_trace.kernels.recurrent import _to_bf16_rne

LAUNCH = {"num_warps": 0, "block_v": 0, "prefetch": 0, "maxnreg": 0, "split": 0}
"""num_warps per program; block_v: rows of the [V, K] state a program steps at a time; prefetch (1 or 2), with row
blocks, loads the next block's (or next two blocks') state before stepping this one's (the loop's loads otherwise
wait one after the other); maxnreg: a register cap per thread (more programs resident per SM); split (a power of 2): programs per (row, head), each
stepping D / split rows of the state, the last of them to finish normalising the row (they meet at a counter in
`_scratch`); 0: by the number of programs (`launch_for`; a maxnreg of 0 there: ptxas's choice). At block_v >= D a
program holds the whole state (a 128 x 128 fp32 state over 256 threads: 64 values a thread; ptxas for sm_90: 255
registers and about 290 bytes of spills a thread). Below D it loops over row blocks
(each block's v convolution, step and o in turn; o is stored unnormalised and read back for the RMSNorm): fewer
registers a thread, the same bytes moved. `benchmarks/bench_recurrent.py --fused-decode --fused-launch
block_v=32,num_warps=4` times a setting, `benchmarks/compile_sm90.py --fused-decode` reports its registers."""

FEW_PROGRAMS_LAUNCH = {"num_warps": 8, "block_v": 128, "prefetch": 0, "maxnreg": 0, "split": 1}
MANY_PROGRAMS_LAUNCH = {"num_warps": 4, "block_v": 16, "prefetch": 1, "maxnreg": 80, "split": 1}
MANY_PROGRAMS = 512
"""From this many programs (rows x heads) on, MANY_PROGRAMS_LAUNCH. On an H200 (bench_recurrent.py --fused-decode,
2026-11-30) the whole state in a program is fastest while the programs are few and a program's latency is the step's
(12 heads x 1 row, fp32 pool: 7.7 against 20.3 us; 12 x 32 = 384 programs: 26.0 against 28.4 us), row blocks of 16
under 4 warps once they are many (12 x 64 = 768, fp32: 38.7 against 49.1 us; 32 x 256: 0.317 against 0.571 ms).
Loading the next block ahead took 12 heads x 64 with a bf16 pool from 29.1 to 26.4 us, and the register cap of 80
(six programs per SM instead of five: 768 programs in one wave) to 23.0 us (0.98 of a same-bytes copy); the cap costs
up to 3% with fp32 pools at 256 rows (benchmarks/RESULTS.md, "The fused decode step", with the records). Split 4 or
8 ways, the row blocks were slower from 768 programs on (up to 1.5x), faster at 1 row (12 heads, bf16: 6.6 against
7.8 us), not taken: the split's counters would be shared by calls on other streams."""


def launch_for(programs: int) -> dict:
    """The LAUNCH keys' values for a launch of `programs` (rows x heads) programs: LAUNCH's where set, else by
    MANY_PROGRAMS."""
    chosen = MANY_PROGRAMS_LAUNCH if programs >= MANY_PROGRAMS else FEW_PROGRAMS_LAUNCH
    return {key: LAUNCH[key] or chosen[key] for key in chosen}


@triton.jit
def _conv_silu(p_x, p_w, p_win, o_d, mask, HD: tl.constexpr, W: tl.constexpr, BW: tl.constexpr):
    """One projection's channels of one head: (the SiLU of the causal convolution rounded to bf16, as fp32; the
    slot's window [BD, BW] as stored; x). p_w points at tap 0 of the head's first channel, p_win at the slot's
    window of that channel ([channel, W - 1], oldest first)."""
    y = tl.zeros(o_d.shape, dtype=tl.float32)
    for j in tl.static_range(W - 1):  # oldest tap first, summed in the reference's order
        h = tl.load(p_win + o_d * (W - 1) + j, mask=mask, other=0.0).to(tl.float32)
        y = y + h * tl.load(p_w + j * HD + o_d, mask=mask, other=0.0).to(tl.float32)
    xv = tl.load(p_x + o_d, mask=mask, other=0.0)
    y = y + xv.to(tl.float32) * tl.load(p_w + (W - 1) * HD + o_d, mask=mask, other=0.0).to(tl.float32)
    mixed = _to_bf16_rne(y * tl.sigmoid(y)).to(tl.float32)
    o_j = tl.arange(0, BW)
    window = tl.load(p_win + o_d[:, None] * (W - 1) + o_j[None, :], mask=mask[:, None] & (o_j[None, :] < W - 1))
    return mixed, window, xv


@triton.jit
def _move_window(p_win, o_d, mask, window, xv, W: tl.constexpr, BW: tl.constexpr):
    """The window after the step: the previous inputs but the oldest, then x (bit copies)."""
    o_j = tl.arange(0, BW)
    tl.store(p_win + o_d[:, None] * (W - 1) + (o_j[None, :] - 1), window,
             mask=mask[:, None] & (o_j[None, :] >= 1) & (o_j[None, :] < W - 1))
    tl.store(p_win + o_d * (W - 1) + (W - 2), xv.to(p_win.dtype.element_ty), mask=mask)


@triton.jit
def _step_rows(p_h, m_h, b_v, b_k, b_q, b_decay, b_beta, STATE_BF16: tl.constexpr):
    """The step on some rows of the slot's [V, K] state (p_h: their elements, m_h: their mask; b_v: their v),
    stored in place; returns their o (fp32)."""
    return _step_loaded(p_h, m_h, tl.load(p_h, mask=m_h, other=0.0), b_v, b_k, b_q, b_decay, b_beta, STATE_BF16)


@triton.jit
def _step_loaded(p_h, m_h, b_h, b_v, b_k, b_q, b_decay, b_beta, STATE_BF16: tl.constexpr):
    """_step_rows on rows already loaded (b_h, as stored)."""
    b_h = b_h.to(tl.float32) * b_decay[None, :]
    b_u = (b_v - tl.sum(b_h * b_k[None, :], axis=1)) * b_beta
    b_h = b_h + b_u[:, None] * b_k[None, :]
    b_o = tl.sum(b_h * b_q[None, :], axis=1)
    if STATE_BF16:
        tl.store(p_h, _to_bf16_rne(b_h), mask=m_h)
    else:
        tl.store(p_h, b_h, mask=m_h)
    return b_o


@triton.jit(do_not_specialize=["scale", "lower_bound", "norm_eps"])
def _fused_decode_kernel(
    x, conv_weight, conv_state, g_raw, A_log, dt_bias, b, state_pool, state_indices, output_gate, norm_weight, o,
    counters, partials, scale, lower_bound, norm_eps, stride_x, stride_cs, stride_sp,
    H: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, W: tl.constexpr, BW: tl.constexpr,
    GATE: tl.constexpr,  # 1 unbounded, 2 safe
    STATE_BF16: tl.constexpr,
    BV: tl.constexpr,  # state rows a step at a time (launch_for); >= BD: all at once
    PREFETCH: tl.constexpr,  # BV < BD: load the next 1 or 2 row blocks' state before stepping this one's
    SPLIT: tl.constexpr,  # programs per (row, head), each with BD // SPLIT rows of the state
):
    pid = tl.program_id(0).to(tl.int64)
    i_nh = pid // SPLIT
    i_s = pid % SPLIT
    i_n = i_nh // H
    i_h = i_nh % H
    o_d = tl.arange(0, BD)
    m_d = o_d < D
    VS: tl.constexpr = BD // SPLIT
    p_o = o + i_nh * D
    slot = tl.load(state_indices + i_n).to(tl.int64)
    if slot <= 0:  # padding (PAD_SLOT_ID -1, or the null slot 0): o zero (each program its rows), no pool touched
        o_vs = i_s * VS + tl.arange(0, VS)
        tl.store(p_o + o_vs, tl.zeros([VS], dtype=tl.float32).to(p_o.dtype.element_ty), mask=o_vs < D)
        return

    # prologue: the convolution of the head's q, k and v channels (projection p's channel c is p * H * D + c)
    HD: tl.constexpr = H * D
    p_x = x + i_n * stride_x + i_h * D
    p_w = conv_weight + i_h * D
    p_win = conv_state + slot * stride_cs + i_h * D * (W - 1)
    p_xv, p_wv, p_winv = p_x + 2 * HD, p_w + 2 * W * HD, p_win + 2 * HD * (W - 1)
    b_q, q_win, q_x = _conv_silu(p_x, p_w, p_win, o_d, m_d, HD, W, BW)
    b_k, k_win, k_x = _conv_silu(p_x + HD, p_w + W * HD, p_win + HD * (W - 1), o_d, m_d, HD, W, BW)
    if BV >= BD:
        b_v, v_win, v_x = _conv_silu(p_xv, p_wv, p_winv, o_d, m_d, HD, W, BW)
    # every thread has read the old windows before any is overwritten (threads may hold copies of one element);
    # moving them here, not at the end, frees their registers before the state is loaded
    tl.debug_barrier()
    if SPLIT == 1:  # split: every program reads the old q and k windows, the last one to finish moves them
        _move_window(p_win, o_d, m_d, q_win, q_x, W, BW)
        _move_window(p_win + HD * (W - 1), o_d, m_d, k_win, k_x, W, BW)
    if BV >= BD:
        _move_window(p_winv, o_d, m_d, v_win, v_x, W, BW)

    b_q = b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6) * scale
    b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)
    g_x = (tl.load(g_raw + (i_n * H + i_h) * D + o_d, mask=m_d, other=0.0).to(tl.float32)
           + tl.load(dt_bias + i_h * D + o_d, mask=m_d, other=0.0).to(tl.float32))
    a = tl.exp(tl.load(A_log + i_h).to(tl.float32))
    if GATE == 1:
        b_g = -a * softplus(g_x)
    else:
        b_g = lower_bound * tl.sigmoid(a * g_x)
    b_decay = tl.exp(b_g)
    b_beta = tl.sigmoid(tl.load(b + i_n * H + i_h).to(tl.float32))

    # the step on the slot's [V, K] state, then o rounded to bf16 and its sum of squares for the RMSNorm
    p_s = state_pool + slot * stride_sp + i_h * D * D
    if BV >= BD:
        b_o = _step_rows(p_s + (o_d[:, None] * D + o_d[None, :]), m_d[:, None] & m_d[None, :], b_v, b_k, b_q,
                         b_decay, b_beta, STATE_BF16)
        b_o = _to_bf16_rne(b_o).to(tl.float32)
        sum_sq = tl.sum(b_o * b_o)
    else:
        sum_sq = 0.0
        o_r = tl.arange(0, BV)
        if PREFETCH:
            r_next = i_s * VS + o_r
            b_next = tl.load(p_s + (r_next[:, None] * D + o_d[None, :]), mask=(r_next < D)[:, None] & m_d[None, :],
                             other=0.0)
            if PREFETCH >= 2:
                r_next = r_next + BV
                m_n = (r_next < D) & (r_next < i_s * VS + VS)
                b_next2 = tl.load(p_s + (r_next[:, None] * D + o_d[None, :]), mask=m_n[:, None] & m_d[None, :],
                                  other=0.0)
        for r0 in range(i_s * VS, i_s * VS + VS, BV):
            r = r0 + o_r
            m_r = r < D
            b_v, v_win, v_x = _conv_silu(p_xv, p_wv, p_winv, r, m_r, HD, W, BW)
            tl.debug_barrier()
            _move_window(p_winv, r, m_r, v_win, v_x, W, BW)
            p_h = p_s + (r[:, None] * D + o_d[None, :])
            m_h = m_r[:, None] & m_d[None, :]
            if PREFETCH:  # the next blocks' rows are other elements than this block's, which are stored below
                b_h = b_next
                AHEAD: tl.constexpr = BV * PREFETCH
                m_n = ((r + AHEAD) < D) & ((r + AHEAD) < i_s * VS + VS)  # the block ahead is this program's
                if PREFETCH >= 2:
                    b_next = b_next2
                    b_next2 = tl.load(p_h + AHEAD * D, mask=m_n[:, None] & m_d[None, :], other=0.0)
                else:
                    b_next = tl.load(p_h + AHEAD * D, mask=m_n[:, None] & m_d[None, :], other=0.0)
                b_o = _step_loaded(p_h, m_h, b_h, b_v, b_k, b_q, b_decay, b_beta, STATE_BF16)
            else:
                b_o = _step_rows(p_h, m_h, b_v, b_k, b_q, b_decay, b_beta, STATE_BF16)
            b_o = _to_bf16_rne(b_o)
            tl.store(p_o + r, b_o.to(p_o.dtype.element_ty), mask=m_r)  # exact: o is bf16
            b_o = b_o.to(tl.float32)
            sum_sq += tl.sum(b_o * b_o)
        if SPLIT == 1:
            tl.debug_barrier()  # the blocks' o, stored by other threads, read back whole
            b_o = tl.load(p_o + o_d, mask=m_d, other=0.0).to(tl.float32)
            tl.debug_barrier()  # read by every thread before the normalised row overwrites it
        else:
            # the (row, head)'s programs meet at its counter: each leaves its o rows and its sum of squares, and
            # the last to arrive (acquire: it sees the others' stores, read past L1) moves the q and k windows,
            # normalises the whole row and sets the counter back to 0 for the next call
            tl.store(partials + pid, sum_sq)
            tl.debug_barrier()  # every thread's stores before the release
            arrived = tl.atomic_add(counters + i_nh, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT - 1:
                tl.debug_barrier()
                _, q_win, q_x = _conv_silu(p_x, p_w, p_win, o_d, m_d, HD, W, BW)
                _, k_win, k_x = _conv_silu(p_x + HD, p_w + W * HD, p_win + HD * (W - 1), o_d, m_d, HD, W, BW)
                tl.debug_barrier()
                _move_window(p_win, o_d, m_d, q_win, q_x, W, BW)
                _move_window(p_win + HD * (W - 1), o_d, m_d, k_win, k_x, W, BW)
                sum_all = tl.sum(tl.load(partials + i_nh * SPLIT + tl.arange(0, SPLIT), cache_modifier=".cg"))
                b_all = tl.load(p_o + o_d, mask=m_d, other=0.0, cache_modifier=".cg").to(tl.float32)
                tl.debug_barrier()
                _gated_rmsnorm_store(p_o, o_d, m_d, b_all, sum_all, D, norm_eps, norm_weight,
                                     output_gate + i_nh * D)
                tl.store(counters + i_nh, 0)
    if SPLIT == 1:
        _gated_rmsnorm_store(p_o, o_d, m_d, b_o, sum_sq, D, norm_eps, norm_weight, output_gate + i_nh * D)


@triton.jit
def _gated_rmsnorm_store(p_o, o_d, m_d, b_o, sum_sq, D: tl.constexpr, norm_eps, norm_weight, p_z):
    """The epilogue: the gated RMSNorm of the bf16-rounded output row b_o (sum_sq: its sum of squares), stored."""
    inv_rms = 1.0 / tl.sqrt(sum_sq / D + norm_eps)
    b_w = tl.load(norm_weight + o_d, mask=m_d, other=0.0).to(tl.float32)
    b_z = tl.load(p_z + o_d, mask=m_d, other=0.0).to(tl.float32)
    tl.store(p_o + o_d, _to_bf16_rne(b_o * inv_rms * b_w * tl.sigmoid(b_z)), mask=m_d)


_SCRATCH: dict = {}


def _scratch(device: torch.device, rows: int, split: int):
    """(counters, partials) for a launch of `rows` (row, head) pairs split `split` ways: int32 counters at 0, which
    the kernel leaves at 0, and float32 room for the partial sums of squares; kept per device and grown as needed (a
    launch then makes none). Calls on one device must not overlap (one stream)."""
    key = str(device)
    counters, partials = _SCRATCH.get(key, (None, None))
    if counters is None or counters.numel() < rows:
        counters = torch.zeros(triton.next_power_of_2(max(rows, 1)), dtype=torch.int32, device=device)
    if partials is None or partials.numel() < rows * split:
        partials = torch.empty(triton.next_power_of_2(max(rows * split, 1)), dtype=torch.float32, device=device)
    _SCRATCH[key] = (counters, partials)
    return counters, partials


def fused_decode(x, conv_weight, conv_state, g_raw, A_log, dt_bias, b, state_pool, state_indices, output_gate,
                 norm_weight, *, scale: float, gate: str = "unbounded", lower_bound: float = -5.0,
                 norm_eps: float = 1e-5, out: torch.Tensor | None = None) -> torch.Tensor:
    r"""One fused decode step; `conv_state` and `state_pool` are updated in place.

    Args:
        x: `[B, 3 * H * D]` the packed q | k | v row before the convolution.
        conv_weight: `[3, W, H * D]` taps (tap j of channel c of projection p at `[p, j, c]`), W >= 2.
        conv_state: `[P, 3 * H * D, W - 1]` the convolution pool (oldest input first), contiguous.
        g_raw: `[B, H, D]`; A_log `[H]`; dt_bias `[H, D]` or `[H * D]`; b `[B, H]` beta logits.
        state_pool: `[P, H, D, D]` fp32 or bf16, K-last (`[V, K]` per head), contiguous.
        state_indices: `[B]` int32/int64; a slot <= 0 pads the batch. Live slots distinct and < P (not checked).
        output_gate: `[B, H, D]`; norm_weight `[D]`.
        scale: multiplier on the normalised q.
        gate: "unbounded" or "safe" (lower_bound * sigmoid(exp(A_log) * (g_raw + dt_bias))).
        norm_eps: the RMSNorm epsilon.
        out: optional preallocated `[B, H, D]` bf16 output.

    Returns:
        o: `[B, H, D]` bf16 (zero in padding rows).
    """
    B, H, D = g_raw.shape
    W = conv_weight.shape[1]
    C = 3 * H * D
    if gate not in ("unbounded", "safe"):
        raise ValueError(f"gate must be 'unbounded' or 'safe', got {gate!r}")
    if W < 2 or tuple(conv_weight.shape) != (3, W, H * D):
        raise ValueError(f"conv_weight must be [3, W >= 2, {H * D}], got {tuple(conv_weight.shape)}")
    checks = {"x": (x, (B, C)), "conv_state": (conv_state, (conv_state.shape[0], C, W - 1)),
              "b": (b, (B, H)), "A_log": (A_log, (H,)), "state_pool": (state_pool, (state_pool.shape[0], H, D, D)),
              "state_indices": (state_indices, (B,)), "output_gate": (output_gate, (B, H, D)),
              "norm_weight": (norm_weight, (D,))}
    for name, (t, shape) in checks.items():
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)}, got {list(t.shape)}")
    if dt_bias.numel() != H * D:
        raise ValueError(f"dt_bias must be [{H}, {D}] or [{H * D}], got {list(dt_bias.shape)}")
    if conv_state.shape[0] != state_pool.shape[0]:
        raise ValueError(f"conv_state has {conv_state.shape[0]} slots, state_pool {state_pool.shape[0]}")
    if state_pool.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"state_pool must be float32 or bfloat16, got {state_pool.dtype}")
    # the pools are written in place, so they cannot be made contiguous here
    if conv_state.stride()[1:] != (W - 1, 1) or state_pool.stride()[1:] != (D * D, D, 1):
        raise ValueError("conv_state and state_pool need contiguous slots")
    if x.stride(1) != 1:
        x = x.contiguous()
    conv_weight, g_raw, dt_bias, b, state_indices, output_gate, norm_weight, A_log = (
        t.contiguous() for t in (conv_weight, g_raw, dt_bias, b, state_indices, output_gate, norm_weight, A_log))
    if out is None:
        out = torch.empty((B, H, D), dtype=torch.bfloat16, device=x.device)
    if B == 0:
        return out
    launch = launch_for(B * H)
    BD = triton.next_power_of_2(D)
    split, BV = launch["split"], triton.next_power_of_2(launch["block_v"])
    if split > 1 and (split & (split - 1) or BV > BD // split):
        raise ValueError(f"split {split} must be a power of 2 with block_v ({BV}) at most {BD} // split")
    # without a split the kernel reads neither: any tensors will do, and the default launch stays one launch
    counters, partials = _scratch(x.device, B * H, split) if split > 1 else (state_indices, out)
    _fused_decode_kernel[(B * H * split,)](
        x, conv_weight, conv_state, g_raw, A_log, dt_bias, b, state_pool, state_indices, output_gate, norm_weight,
        out, counters, partials, float(scale), float(lower_bound), float(norm_eps), x.stride(0), conv_state.stride(0),
        state_pool.stride(0),
        H=H, D=D, BD=BD, W=W, BW=triton.next_power_of_2(W - 1), GATE=GATE_CODES[gate],
        STATE_BF16=state_pool.dtype == torch.bfloat16, BV=BV, PREFETCH=launch["prefetch"], SPLIT=split,
        num_warps=launch["num_warps"], **register_cap(launch["maxnreg"]))
    return out
