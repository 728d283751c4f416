"""The chunked mode of the KDA backward (kernels/backward.py, LAUNCH["mode"] = "chunked"; its module docstring
says where this mode sits): the states at chunk starts and the gradients dS at chunk ends by matrix products in
the chunked forward's form, instead of the exact mode's K x K chunk maps, then the chunks' gradients.

With G the cumulative gate over a chunk (per key channel), Gl its last row, e(x) = exp(x) (kernels/chunk.py,
KDA.md "The chunked algorithm"; the derivation of the backward and a float64 oracle:
tests/kernels/chunk_backward_matrix.py):
    Qt = scale q e(G),  Kb = k e(G),  Kt = k e(Gl - G),  gamma = e(Gl)                 [n, K], [K]
    P = (k D k^T)_strict,  A_kk = diag(beta) P,  A_qk = scale (q D k^T)_lower   (D: e(G_i - G_j) per channel)
    X = (I + A_kk)^-1,  W = X diag(beta) Kb,  U = X diag(beta) v
    forward:  Vn = U - W S;  S_end = diag(gamma) S + Kt^T Vn                 (A_c = diag(gamma) - Kt^T W)
    reverse:  dVn = A_qk^T dO + Kt dSe;  dS = diag(gamma) dSe + Qt^T dO - W^T dVn
                                                     (= A_c^T dSe + b_c, b_c = Qt^T dO - W^T A_qk^T dO)
    local:    dA_qk = (dO Vn^T)_lower, dQt = dO S^T, dKt = Vn dSe^T, dW = -dVn S^T, dgamma = rowsum(S * dSe),
              Y_v = X^T dVn (dv = beta Y_v), Y_k = X^T dW, dA_kk = (-(Y_v (beta v)^T + Y_k (beta Kb)^T) X^T)_strict,
              dbeta = rowsum(v Y_v) + rowsum(Kb Y_k) + rowsum(dA_kk P), then dq, dk, dg with the decay-weighted
              sums of dA_qk and dA_kk (backward_blocks.py's `_sums_block_anchored`, exp arguments <= 0).
Kernels, in launch order (fp32 buffers, float64 for float64 inputs):
1. The prep, three kernels (`_prep`): `_prep_pairs_kernel` (one launch per 16-row block of P and A_qk,
   backward_blocks.py's `_pair_rows_anchored`: the diagonal blocks as tensor-core products at two anchors,
   LAUNCH["diag_blocks"]; `_pair_rows` with element-wise diagonal blocks), `_prep_solve_kernel` (X per chunk and
   value head, by 16x16 blocks like the forward's solve: `_solve`) and `_prep_operands_kernel` (per K-tile: W, Qt,
   Kt; per V-tile: U, dO2 = A_qk^T dO); A_qk goes through an fp32 [NT, HV, CT, CT] buffer (16 KiB per chunk and
   value head). Products in LAUNCH["chunked_precision"] (tf32), the solve's in tf32x3 (kernels/chunk.py's
   SOLVE_PRECISION; ieee for float64). One fused prep kernel per (chunk, value head) is slower: 16.83 ms against
   these three's 5.84 + 0.49 + 1.23 on an H200 at 32 heads x 16384 tokens.
2. `_state_pass_kernel`, per (sequence, V-tile, value head) and direction, sequential over the sequence's chunks:
   the forward recursion from h0 (S_start of each chunk into `states`) and, in programs of their own beside them,
   the reverse one from dht (dS_end into `dstates`, and dh0); the [K, BV] state as up to four K-tiles of 64 rows,
   three [64, 64] x [64, BV]-shaped products per tile and direction per chunk (LAUNCH["chunked_pass_precision"]:
   bf16 but for the reverse recursion's Qt^T dO, as two bf16 products of Qt's two bf16 terms with a bf16 dO, else
   tf32). No K x K map. For the split local kernels it also writes each chunk's Vn and dVn (fp32) in U's and dO2's
   places, as fla's recursions hand theirs on (in bf16 there).
3a. `_local_vk_kernel`, per (chunk, value head): every sum over V (dA_qk, Y_v (beta v)^T, dQt, dKt, dW, dgamma,
   rowsum(v Y_v)) by V-tiles, within K-tiles for the [CT, K] ones, in registers; Y_v, dv, Y_k, dA_kk, dbeta, the
   diagonal of dA_qk, and the two matrices of the decay-weighted sums. With LAUNCH["split_vk_ktiles"] (the
   default; 1-2% faster on K3, kernels/backward.py) `_local_kt_kernel` does the K-tiles' sums first, one program per
   (chunk, value head, K-tile), and this kernel reads their Y_k.
3b. `_local_sums_kernel`, per (chunk, value head, K-tile of LAUNCH["sums_bk"] columns, 32 at most) and 16-row
   block, every block in one launch (LAUNCH["sums_one_launch"]; else one launch per block): the decay-weighted
   sums (LAUNCH["diag_blocks"] as in the prep, at one anchor with
   LAUNCH["sums_one_anchor"] where the gates' bound allows: `one_anchor`); then `_local_k_kernel`, per (chunk,
   value head, K-tile of LAUNCH["split_k_bk"] columns, 16 on a GPU), one program each: dq, dk (per value head),
   dg of the tile's key channels (every sum of 3b is per key channel, so the K-tiles are independent work items).
   3a and 3b in LAUNCH["split_precision"] (tf32). The sums inside `_local_k_kernel` are slower.
The split into 3a/3b and the tiles are for registers: a one-kernel form (whole K and V per chunk)
had 19 KB of spill stores at K = V = 128 and needed 256 KiB of shared memory; ptxas for sm_90
(benchmarks/compile_sm90.py --chunked --spills) reports the registers and spills per kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

CT = 64  # chunk length (backward.CT)

from kda_trace.kernels.backward_blocks import (
    MAX_EXP, _chunk_span, _col_sums_block, _diag_sums_by_steps, _norm_rows, _pair_rows, _pair_rows_anchored,
    _row_sums_block, _sums_block_anchored, _xdot,
)
from kda_trace.kernels.chunk import SOLVE_PRECISION, _bf16, _inverse_unit_lower
from kda_trace.kernels.common import dot_precision, register_cap


@triton.jit
def _akk_block(p_P, p_b, n, I: tl.constexpr, J: tl.constexpr, HV: tl.constexpr, CT: tl.constexpr):  # noqa: E741
    """Block (I, J) of A_kk = diag(beta) P, 16x16, from the P at p_P [CT, CT] (zero past the chunk's n rows and
    columns); p_b: the chunk's first beta, row t at p_b + t * HV."""
    o = tl.arange(0, 16)
    rows = I * 16 + o
    b_b = tl.load(p_b + rows * HV, mask=rows < n, other=0.0).to(p_P.dtype.element_ty)
    return tl.load(p_P + rows[:, None] * CT + (J * 16 + o)[None, :]) * b_b[:, None]


@triton.jit
def _put_block(p_X, x, I: tl.constexpr, J: tl.constexpr, CT: tl.constexpr):  # noqa: E741
    o = tl.arange(0, 16)
    tl.store(p_X + (I * 16 + o)[:, None] * CT + (J * 16 + o)[None, :], x)


@triton.jit
def _get_block(p_X, I: tl.constexpr, J: tl.constexpr, CT: tl.constexpr):  # noqa: E741
    o = tl.arange(0, 16)
    return tl.load(p_X + (I * 16 + o)[:, None] * CT + (J * 16 + o)[None, :])


@triton.jit
def _solve(p_P, p_b, p_X, n, HV: tl.constexpr, CT: tl.constexpr, PREC: tl.constexpr):
    """X = (I + A_kk)^-1 into p_X [CT, CT], its lower blocks only (every X block is lower triangular, the diagonal
    ones element-wise: read X back with the mask j <= i), by 16x16 blocks like kernels/chunk.py's `_solve_kernel`:
    X_II = (I + A_II)^-1 by `_inverse_unit_lower`, then X_IJ = -X_II sum_{J <= M < I} A_IM X_MJ one block
    diagonal (I - J = 1, 2, 3) at a time: 40 16x16 products, 10 of them in a dependent chain, against 63
    dependent row steps of forward substitution. The blocks go through p_X (a barrier per diagonal) rather
    than stay in registers: with tf32x3 products, ten live blocks made the prep kernel spill (sm_90, K = 128).
    Rows and columns past n: A_kk is zero there (P is), so X is exactly the identity there (products with
    exact zeros)."""
    NB: tl.constexpr = CT // 16
    for i in tl.static_range(NB):
        _put_block(p_X, _inverse_unit_lower(_akk_block(p_P, p_b, n, i, i, HV, CT), 16, PREC, PREC, False, False), i, i, CT)
    for d in tl.static_range(1, NB):
        tl.debug_barrier()  # the blocks of the diagonals before d are in p_X
        for i in tl.static_range(d, NB):
            x = tl.zeros([16, 16], dtype=p_X.dtype.element_ty)
            for m in tl.static_range(i - d, i):
                x += _xdot(_akk_block(p_P, p_b, n, i, m, HV, CT), _get_block(p_X, m, i - d, CT), PREC)
            _put_block(p_X, -_xdot(_get_block(p_X, i, i, CT), x, PREC), i, i - d, CT)


@triton.jit
def _decayed_k_tile(p_X, b_b, b_gt, b_gn, p_q, p_k, off_x, W, Kt, Qt, off, m_tk, scale, p_rq, p_rk, o_t, m_t,
                    SR: tl.constexpr, NORM: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr,
                    WITH_WK: tl.constexpr):
    """One K-tile of the prep's operands: W = X diag(beta) k e(G) (p_X: X's [CT, CT] pointers) and Kt = k e(Gl - G)
    (both only WITH_WK: not where the forward's are given), Qt = scale q e(G), from the tile's gates b_gt [CT, BKT]
    (zero past the chunk) and the gates one row later b_gn (G and Gl - G as sums of the gates: exp arguments
    <= 0); q, k at p_q / p_k + off_x, W, Kt, Qt at + off. W and Kt in their buffers' dtype (bf16 rounded to nearest
    even for a pass whose products round them so anyway). NORM: q's and k's rows times their L2-norm factors at
    p_rq / p_rk + o_t * SR (`_norm_rows`)."""
    ACC: tl.constexpr = Qt.dtype.element_ty
    b_eG = tl.exp(tl.cumsum(b_gt, axis=0))
    if WITH_WK:
        b_k = _norm_rows(tl.load(p_k + off_x, mask=m_tk, other=0.0).to(ACC), p_rk, o_t, m_t, SR, NORM)
        b_w = _xdot(tl.load(p_X), b_k * (b_b[:, None] * b_eG), PREC)
        tl.store(W + off, _as_stored(b_w, W, INTERPRET), mask=m_tk)
        b_kt = b_k * tl.exp(tl.cumsum(b_gn, axis=0, reverse=True))
        tl.store(Kt + off, _as_stored(b_kt, Kt, INTERPRET), mask=m_tk)
    b_q = _norm_rows(tl.load(p_q + off_x, mask=m_tk, other=0.0).to(ACC), p_rq, o_t, m_t, SR, NORM)
    tl.store(Qt + off, scale * b_q * b_eG, mask=m_tk)


@triton.jit
def _values_tile(b_X, b_Aqk, b_b, v, do, U, dO2, off_v, m_tv, PREC: tl.constexpr, WITH_U: tl.constexpr):
    """One V-tile of the prep's operands: U = X diag(beta) v (WITH_U) and dO2 = A_qk^T dO (b_Aqk: A_qk with its
    scale)."""
    ACC: tl.constexpr = dO2.dtype.element_ty
    if WITH_U:
        b_v = tl.load(v + off_v, mask=m_tv, other=0.0).to(ACC)
        tl.store(U + off_v, _xdot(b_X, b_v * b_b[:, None], PREC), mask=m_tv)
    b_do = tl.load(do + off_v, mask=m_tv, other=0.0).to(ACC)
    tl.store(dO2 + off_v, _xdot(tl.trans(b_Aqk), b_do, PREC), mask=m_tv)


# ----------------------------------------------------------------------------------------------------
# 1, the prep, in three kernels: P and A_qk by row blocks, X, then the operands by tiles
# ----------------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["n_work"])
def _prep_pairs_kernel(
    q, k, g, Pb, Aqk, cu_seqlens, chunk_indices, n_work,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, CT: tl.constexpr, BI: tl.constexpr,
    PREC: tl.constexpr, ANCHORS: tl.constexpr, DPREC: tl.constexpr,
):
    """Row block BI (one launch per block, like kernels/chunk.py's intra kernel) of P and of A_qk / scale
    ([NT, HV, CT, CT], backward_blocks.py's `_pair_rows_anchored` with ANCHORS, else `_pair_rows` twice) for the
    work items (chunk, value head), shared out over the programs. The gates (in the buffers' dtype) are read
    where they are, masked past the chunk's rows. (Every (item, row block) in one launch, as the sums kernel
    runs, is slower here: H100, K3 with the chunk matrices recomputed, fwd+bwd 20.37 against 19.87 ms.)"""
    pid = tl.program_id(0).to(tl.int64)
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    for w in range(pid, n_work, tl.num_programs(0)):
        i_c = w // HV
        i_hv = w % HV
        i_h = i_hv // (HV // H)
        _, _, r0, n, _ = _chunk_span(cu_seqlens, chunk_indices, i_c, CT)
        p_g = g + (r0 * HV + i_hv) * K
        p_q = q + (r0 * H + i_h) * K
        p_k = k + (r0 * H + i_h) * K
        item = i_c * HV + i_hv
        if ANCHORS:
            _pair_rows_anchored(p_q, p_k, H * K, p_g, HV * K, Pb + item * (CT * CT), Aqk + item * (CT * CT), n, K,
                                BI, BK, CT, PREC, DPREC, MAX_EXP)
        else:
            _pair_rows(p_k, p_k, H * K, p_g, HV * K, Pb + item * (CT * CT), n, o_k, m_k, BI, BK, CT, False, PREC)
            _pair_rows(p_q, p_k, H * K, p_g, HV * K, Aqk + item * (CT * CT), n, o_k, m_k, BI, BK, CT, True, PREC)


@triton.jit
def _prep_solve_kernel(Pb, beta, Xb, cu_seqlens, chunk_indices, HV: tl.constexpr, CT: tl.constexpr,
                       SOLVE_PREC: tl.constexpr):
    """Per (chunk, value head): X = (I + diag(beta) P)^-1 ([NT, HV, CT, CT]) by `_solve`, in X's own slot, then
    its upper part written as zeros (`_solve` stores the lower blocks only)."""
    i_c = tl.program_id(0).to(tl.int64)
    i_hv = tl.program_id(1).to(tl.int64)
    _, _, r0, n, _ = _chunk_span(cu_seqlens, chunk_indices, i_c, CT)
    item = i_c * HV + i_hv
    p_X = Xb + item * (CT * CT)
    _solve(Pb + item * (CT * CT), beta + r0 * HV + i_hv, p_X, n, HV, CT, SOLVE_PREC)
    tl.debug_barrier()
    o_t = tl.arange(0, CT)
    off_t = o_t[:, None] * CT + o_t[None, :]
    b_X = tl.load(p_X + off_t, mask=o_t[None, :] <= o_t[:, None], other=0.0)
    tl.debug_barrier()
    tl.store(p_X + off_t, b_X)


@triton.jit
def _prep_operands_kernel(
    q, k, v, g, beta, do, Xb, Aqk, W, U, Qt, Kt, dO2, gamma, rq, rk, cu_seqlens, chunk_indices, p_scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BKT: tl.constexpr, BVT: tl.constexpr,
    CT: tl.constexpr, NORM: tl.constexpr, PREC: tl.constexpr, WITH_U: tl.constexpr, WITH_WK: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """Per (chunk, value head) and tile: for each of the NKT K-tiles of BKT columns, W = X diag(beta) k e(G),
    Kt = k e(Gl - G) (those two only WITH_WK: not with the forward's) and Qt = scale q e(G) (G and Gl - G as sums
    of the gates, exp arguments <= 0; W and Kt in their buffers' dtype, `_decayed_k_tile`) and the chunk's decay
    gamma = e(G_last); for each of the V-tiles of BVT columns after them, U = X diag(beta) v (WITH_U: not with the
    forward's states) and dO2 = A_qk^T dO. NORM: q and k as given times their rows' L2-norm factors rq, rk
    ([T, H])."""
    scale = tl.load(p_scale)  # in the buffers' dtype (`scale_arg`)
    NKT: tl.constexpr = (K + BKT - 1) // BKT
    NVT: tl.constexpr = (V + BVT - 1) // BVT
    ACC: tl.constexpr = Qt.dtype.element_ty
    # the tiles of one (chunk, value head) are neighbouring programs: X and A_qk come from DRAM once, then from L2
    pid = tl.program_id(0).to(tl.int64)
    i_tile = pid % (NKT + NVT)
    item = pid // (NKT + NVT)  # chunk * HV + value head
    i_c = item // HV
    i_hv = item % HV
    i_h = i_hv // (HV // H)
    _, _, r0, n, _ = _chunk_span(cu_seqlens, chunk_indices, i_c, CT)
    o_t = tl.arange(0, CT)
    m_t = o_t < n
    off_t = item * (CT * CT) + o_t[:, None] * CT + o_t[None, :]
    b_b = tl.load(beta + (r0 + o_t) * HV + i_hv, mask=m_t, other=0.0).to(ACC)
    if i_tile < NKT:
        o_kt = i_tile * BKT + tl.arange(0, BKT)
        m_tk = m_t[:, None] & (o_kt < K)[None, :]
        p_gt = g + (r0 * HV + i_hv) * K + o_kt[None, :]
        b_gt = tl.load(p_gt + o_t[:, None] * (HV * K), mask=m_tk, other=0.0).to(ACC)
        tl.store(gamma + item * K + o_kt, tl.exp(tl.sum(b_gt, axis=0)), mask=o_kt < K)
        b_gn = tl.load(p_gt + (o_t + 1)[:, None] * (HV * K), mask=((o_t + 1) < n)[:, None] & (o_kt < K)[None, :],
                       other=0.0).to(ACC)
        off = (r0 * HV + i_hv) * K + o_t[:, None] * (HV * K) + o_kt[None, :]
        row_x = (r0 * H + i_h) * K  # the chunk's first row of q and k
        _decayed_k_tile(Xb + off_t, b_b, b_gt, b_gn, q + row_x, k + row_x, o_t[:, None] * (H * K) + o_kt[None, :],
                        W, Kt, Qt, off, m_tk, scale, rq + r0 * H + i_h, rk + r0 * H + i_h, o_t, m_t, H, NORM, PREC,
                        INTERPRET, WITH_WK)
    else:
        o_v = (i_tile - NKT) * BVT + tl.arange(0, BVT)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        off_v = (r0 * HV + i_hv) * V + o_t[:, None] * (HV * V) + o_v[None, :]
        _values_tile(tl.load(Xb + off_t), tl.load(Aqk + off_t) * scale, b_b, v, do, U, dO2, off_v, m_tv, PREC,
                     WITH_U)


@triton.jit
def _rows(p, r0, i_hv, k0, m_t, o_t, BKT: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, TRANS: tl.constexpr):
    """Columns k0 .. k0 + BKT of a chunk's [CT, K] rows in a [T, HV, K] buffer (row r0 first), [CT, BKT]; with
    TRANS the transpose [BKT, CT], loaded as such."""
    o_k = k0 + tl.arange(0, BKT)
    base = p + (r0 * HV + i_hv) * K
    if TRANS:
        return tl.load(base + o_t[None, :] * (HV * K) + o_k[:, None], mask=m_t[None, :] & (o_k < K)[:, None],
                       other=0.0)
    else:
        return tl.load(base + o_t[:, None] * (HV * K) + o_k[None, :], mask=m_t[:, None] & (o_k < K)[None, :],
                       other=0.0)


@triton.jit
def _fwd_tile(b_s, W, Kt, gamma, r0, i_hv, i_g, k0, m_t, o_t, b_vn,
              BKT: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, PREC: tl.constexpr):
    """One K-tile of S_end = diag(gamma) S + Kt^T Vn."""
    o_k = k0 + tl.arange(0, BKT)
    b_gam = tl.load(gamma + i_g * K + o_k, mask=o_k < K, other=0.0)
    b_ktt = _rows(Kt, r0, i_hv, k0, m_t, o_t, BKT, HV, K, True)
    return b_s * b_gam[:, None] + _xdot(b_ktt, b_vn, PREC)


@triton.jit
def _rev_tile(b_d, W, Qt, b_gam, r0, i_hv, k0, m_t, o_t, b_do, b_dvn,
              BKT: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, PREC: tl.constexpr, PREC_SRC: tl.constexpr):
    """One K-tile of dS_start = diag(gamma) dS_end + Qt^T dO - W^T dVn (Qt^T dO in PREC_SRC; b_gam: the tile's
    gamma)."""
    b_qtt = _rows(Qt, r0, i_hv, k0, m_t, o_t, BKT, HV, K, True)
    b_wt = _rows(W, r0, i_hv, k0, m_t, o_t, BKT, HV, K, True)
    return (b_d * b_gam[:, None] + _xdot(b_qtt, b_do, PREC_SRC)
            - _xdot(b_wt, b_dvn, PREC))


@triton.jit
def _load_tiles(p, off_s, m0, m1, m2, m3, NKT: tl.constexpr, TS: tl.constexpr, BKT: tl.constexpr,
                BV: tl.constexpr, ACC: tl.constexpr):
    """The K-tiles of a [K, V] state at p (tile j at p + j * TS), as ACC; tiles past NKT are zeros."""
    t0 = tl.load(p + off_s, mask=m0, other=0.0).to(ACC)
    t1 = tl.zeros([BKT, BV], dtype=ACC)
    t2 = tl.zeros([BKT, BV], dtype=ACC)
    t3 = tl.zeros([BKT, BV], dtype=ACC)
    if NKT > 1:
        t1 = tl.load(p + TS + off_s, mask=m1, other=0.0).to(ACC)
    if NKT > 2:
        t2 = tl.load(p + 2 * TS + off_s, mask=m2, other=0.0).to(ACC)
        t3 = tl.load(p + 3 * TS + off_s, mask=m3, other=0.0).to(ACC)
    return t0, t1, t2, t3


@triton.jit
def _store_tiles(p, off_s, t0, t1, t2, t3, m0, m1, m2, m3, NKT: tl.constexpr, TS: tl.constexpr):
    """Store the K-tiles of a [K, V] state at p (tile j at p + j * TS)."""
    tl.store(p + off_s, t0, mask=m0)
    if NKT > 1:
        tl.store(p + TS + off_s, t1, mask=m1)
    if NKT > 2:
        tl.store(p + 2 * TS + off_s, t2, mask=m2)
        tl.store(p + 3 * TS + off_s, t3, mask=m3)


@triton.jit
def _initial_tiles(p, off_seq, off_s, m0, m1, m2, m3, USE: tl.constexpr, NKT: tl.constexpr, TS: tl.constexpr,
                   BKT: tl.constexpr, BV: tl.constexpr, ACC: tl.constexpr):
    """A recursion's first state: the sequence's [K, V] state at p + off_seq as K-tiles with USE, else zeros."""
    t0 = tl.zeros([BKT, BV], dtype=ACC)
    t1 = tl.zeros([BKT, BV], dtype=ACC)
    t2 = tl.zeros([BKT, BV], dtype=ACC)
    t3 = tl.zeros([BKT, BV], dtype=ACC)
    if USE:
        t0, t1, t2, t3 = _load_tiles(p + off_seq, off_s, m0, m1, m2, m3, NKT, TS, BKT, BV, ACC)
    return t0, t1, t2, t3


@triton.jit
def _state_pass_kernel(
    W, U, Qt, Kt, gamma, dO2, do, states, dstates, h0, dht, dh0, cu_seqlens, chunk_offsets,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, CT: tl.constexpr,
    USE_H0: tl.constexpr, USE_DHT: tl.constexpr, PREC: tl.constexpr, PREC_SRC: tl.constexpr,
    PARALLEL: tl.constexpr, STORE_VN: tl.constexpr, FORWARD: tl.constexpr, PREFETCH: tl.constexpr = False,
):
    """For one (sequence, V-tile, value head): S_start(c) for every chunk (states), and dS_end(c) from the
    last chunk back (dstates) and dh0 = dS_start(0), by the recursions of the module docstring. The two
    recursions are independent (dS does not read S): with PARALLEL (LAUNCH["chunked_pass_parallel"]) the grid's
    third axis picks one (0: forward, 1: reverse), so twice as many programs run at once, each holding one
    state; else one program runs both. The [K, BV] state is held as up to four K-tiles of 64 rows (fla's
    layout), so that each product reads [64, 64] slices of W, Kt, Qt and no [64, K] operand is live at once
    (K = 128: 255 registers and spills). PREC: the products' precision, but PREC_SRC for the reverse recursion's
    Qt^T dO (off the recursion's chain of dependent products, and the one whose bf16 rounding reaches dh0:
    by a CPU estimate). With STORE_VN (for the split local kernels) the forward recursion also
    writes each chunk's Vn in U's place and the reverse one dVn in dO2's (each program reads a chunk's tile before
    it writes it, and no other program reads it). Without FORWARD (the forward's states and Vn given) only the
    reverse recursion runs. PREFETCH (LAUNCH["chunked_pass_prefetch"]): the reverse recursion reads each chunk's dO2
    and gamma one step ahead (`_pass_reverse`)."""
    NV: tl.constexpr = (V + BV - 1) // BV
    BKT: tl.constexpr = 64 if BK > 64 else BK
    NKT: tl.constexpr = BK // BKT
    i_n = tl.program_id(0).to(tl.int64) // NV
    i_v = tl.program_id(0).to(tl.int64) % NV
    i_hv = tl.program_id(1).to(tl.int64)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    n_tok = tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos
    c0 = tl.load(chunk_offsets + i_n).to(tl.int64)
    if not FORWARD:
        _pass_reverse(W, Qt, Kt, gamma, dO2, do, dstates, dht, dh0, i_n, i_v, i_hv, bos, n_tok, c0, HV, K, V, BKT,
                      NKT, BV, CT, USE_DHT, PREC, PREC_SRC, STORE_VN, PREFETCH)
    elif PARALLEL:
        if tl.program_id(2) == 0:
            _pass_forward(W, U, Kt, gamma, states, h0, i_n, i_v, i_hv, bos, n_tok, c0, HV, K, V, BKT, NKT, BV, CT,
                          USE_H0, PREC, STORE_VN)
        else:
            _pass_reverse(W, Qt, Kt, gamma, dO2, do, dstates, dht, dh0, i_n, i_v, i_hv, bos, n_tok, c0, HV, K, V,
                          BKT, NKT, BV, CT, USE_DHT, PREC, PREC_SRC, STORE_VN, PREFETCH)
    else:
        _pass_forward(W, U, Kt, gamma, states, h0, i_n, i_v, i_hv, bos, n_tok, c0, HV, K, V, BKT, NKT, BV, CT,
                      USE_H0, PREC, STORE_VN)
        _pass_reverse(W, Qt, Kt, gamma, dO2, do, dstates, dht, dh0, i_n, i_v, i_hv, bos, n_tok, c0, HV, K, V, BKT,
                      NKT, BV, CT, USE_DHT, PREC, PREC_SRC, STORE_VN, PREFETCH)


@triton.jit
def _pass_layout(i_v, K: tl.constexpr, V: tl.constexpr, BKT: tl.constexpr, BV: tl.constexpr, CT: tl.constexpr,
                 HV: tl.constexpr):
    """The pass's tile offsets and masks: (o_t, o_v, m_v, off_tv, off_s, m0..m3); tile j of a [K, V] state holds
    the rows j * BKT + o_kt (at off_s + j * BKT * V)."""
    o_t = tl.arange(0, CT)
    o_kt = tl.arange(0, BKT)
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    off_tv = o_t[:, None] * (HV * V) + o_v[None, :]
    off_s = o_kt[:, None] * V + o_v[None, :]
    m0 = (o_kt < K)[:, None] & m_v[None, :]
    m1 = (BKT + o_kt < K)[:, None] & m_v[None, :]
    m2 = (2 * BKT + o_kt < K)[:, None] & m_v[None, :]
    m3 = (3 * BKT + o_kt < K)[:, None] & m_v[None, :]
    return o_t, o_v, m_v, off_tv, off_s, m0, m1, m2, m3


@triton.jit
def _new_values(s0, s1, s2, s3, W, U, r0, i_hv, o_t, m_t, m_v, off_tv, HV: tl.constexpr, K: tl.constexpr,
                V: tl.constexpr, BKT: tl.constexpr, NKT: tl.constexpr, PREC: tl.constexpr, STORE: tl.constexpr):
    """A chunk's Vn = U - W S from its start state's K-tiles (into U's place with STORE)."""
    off_u = (r0 * HV + i_hv) * V + off_tv
    m_tv = m_t[:, None] & m_v[None, :]
    b_vn = tl.load(U + off_u, mask=m_tv, other=0.0)
    b_vn -= _xdot(_rows(W, r0, i_hv, 0, m_t, o_t, BKT, HV, K, False), s0, PREC)
    if NKT > 1:
        b_vn -= _xdot(_rows(W, r0, i_hv, BKT, m_t, o_t, BKT, HV, K, False), s1, PREC)
    if NKT > 2:
        b_vn -= _xdot(_rows(W, r0, i_hv, 2 * BKT, m_t, o_t, BKT, HV, K, False), s2, PREC)
        b_vn -= _xdot(_rows(W, r0, i_hv, 3 * BKT, m_t, o_t, BKT, HV, K, False), s3, PREC)
    if STORE:
        tl.store(U + off_u, b_vn, mask=m_tv)
    return b_vn


@triton.jit
def _fwd_step(s0, s1, s2, s3, W, U, Kt, gamma, states, c, n_chunks, n_tok, bos, c0, i_hv, o_t, m_v, off_tv, off_s,
              m0, m1, m2, m3, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BKT: tl.constexpr,
              NKT: tl.constexpr, CT: tl.constexpr, PREC: tl.constexpr, STORE_VN: tl.constexpr):
    """Chunk c of the forward recursion: store S_start (s0..s3), return S_end."""
    r0 = bos + c * CT  # the chunk's first row
    i_g = (c0 + c) * HV + i_hv  # its (chunk, value head) index
    m_t = o_t < n_tok - c * CT
    _store_tiles(states + i_g * (K * V), off_s, s0, s1, s2, s3, m0, m1, m2, m3, NKT, BKT * V)
    # Vn = U - W S (into U's place with STORE_VN, every chunk), then S_end = diag(gamma) S + Kt^T Vn (the last
    # chunk's end state is not needed). (Triton 3.6 fails to compile the float64 kernel, in its TritonGPUPrefetch
    # pass, where the products of Vn are outside a condition on c.)
    if c < n_chunks - 1 + STORE_VN:
        b_vn = _new_values(s0, s1, s2, s3, W, U, r0, i_hv, o_t, m_t, m_v, off_tv, HV, K, V, BKT, NKT, PREC, STORE_VN)
        if c < n_chunks - 1:
            s0 = _fwd_tile(s0, W, Kt, gamma, r0, i_hv, i_g, 0, m_t, o_t, b_vn, BKT, HV, K, PREC)
            if NKT > 1:
                s1 = _fwd_tile(s1, W, Kt, gamma, r0, i_hv, i_g, BKT, m_t, o_t, b_vn, BKT, HV, K, PREC)
            if NKT > 2:
                s2 = _fwd_tile(s2, W, Kt, gamma, r0, i_hv, i_g, 2 * BKT, m_t, o_t, b_vn, BKT, HV, K, PREC)
                s3 = _fwd_tile(s3, W, Kt, gamma, r0, i_hv, i_g, 3 * BKT, m_t, o_t, b_vn, BKT, HV, K, PREC)
    return s0, s1, s2, s3


@triton.jit
def _rev_inputs(dO2, gamma, c, n_tok, bos, c0, i_hv, o_t, m_v, off_tv, HV: tl.constexpr, K: tl.constexpr,
                V: tl.constexpr, BKT: tl.constexpr, NKT: tl.constexpr, CT: tl.constexpr):
    """What a step of the reverse recursion reads besides its products' operands: chunk c's dO2 tile [CT, BV] and
    gamma's K-tiles [BKT] (zeros for c < 0 and past NKT)."""
    o_k = tl.arange(0, BKT)
    here = o_k * 0 + c >= 0
    m_t = (o_t < n_tok - c * CT) & (o_t * 0 + c >= 0)
    b_o2 = tl.load(dO2 + ((bos + c * CT) * HV + i_hv) * V + off_tv, mask=m_t[:, None] & m_v[None, :], other=0.0)
    p_gam = gamma + ((c0 + c) * HV + i_hv) * K + o_k
    g0 = tl.load(p_gam, mask=(o_k < K) & here, other=0.0)
    g1 = tl.zeros([BKT], dtype=g0.dtype)
    g2 = tl.zeros([BKT], dtype=g0.dtype)
    g3 = tl.zeros([BKT], dtype=g0.dtype)
    if NKT > 1:
        g1 = tl.load(p_gam + BKT, mask=(BKT + o_k < K) & here, other=0.0)
    if NKT > 2:
        g2 = tl.load(p_gam + 2 * BKT, mask=(2 * BKT + o_k < K) & here, other=0.0)
        g3 = tl.load(p_gam + 3 * BKT, mask=(3 * BKT + o_k < K) & here, other=0.0)
    return b_o2, g0, g1, g2, g3


@triton.jit
def _rev_step(d0, d1, d2, d3, W, Qt, Kt, b_o2, g0, g1, g2, g3, dO2, do, dstates, c, n_tok, bos, c0, i_hv, o_t, m_v,
              off_tv, off_s, m0, m1, m2, m3, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BKT: tl.constexpr,
              NKT: tl.constexpr, CT: tl.constexpr, PREC: tl.constexpr, PREC_SRC: tl.constexpr,
              STORE_VN: tl.constexpr):
    """Chunk c of the reverse recursion: store dS_end (d0..d3), return dS_start. b_o2, g0..g3: the chunk's
    `_rev_inputs`."""
    ACC: tl.constexpr = dstates.dtype.element_ty
    r0 = bos + c * CT
    i_g = (c0 + c) * HV + i_hv
    m_t = o_t < n_tok - c * CT
    m_tv = m_t[:, None] & m_v[None, :]
    _store_tiles(dstates + i_g * (K * V), off_s, d0, d1, d2, d3, m0, m1, m2, m3, NKT, BKT * V)
    # dVn = A_qk^T dO + Kt dS_end, then dS_start = diag(gamma) dS_end + Qt^T dO - W^T dVn
    b_dvn = b_o2 + _xdot(_rows(Kt, r0, i_hv, 0, m_t, o_t, BKT, HV, K, False), d0, PREC)
    if NKT > 1:
        b_dvn += _xdot(_rows(Kt, r0, i_hv, BKT, m_t, o_t, BKT, HV, K, False), d1, PREC)
    if NKT > 2:
        b_dvn += _xdot(_rows(Kt, r0, i_hv, 2 * BKT, m_t, o_t, BKT, HV, K, False), d2, PREC)
        b_dvn += _xdot(_rows(Kt, r0, i_hv, 3 * BKT, m_t, o_t, BKT, HV, K, False), d3, PREC)
    if STORE_VN:
        tl.store(dO2 + (r0 * HV + i_hv) * V + off_tv, b_dvn, mask=m_tv)
    b_do = tl.load(do + (r0 * HV + i_hv) * V + off_tv, mask=m_tv, other=0.0).to(ACC)
    d0 = _rev_tile(d0, W, Qt, g0, r0, i_hv, 0, m_t, o_t, b_do, b_dvn, BKT, HV, K, PREC, PREC_SRC)
    if NKT > 1:
        d1 = _rev_tile(d1, W, Qt, g1, r0, i_hv, BKT, m_t, o_t, b_do, b_dvn, BKT, HV, K, PREC, PREC_SRC)
    if NKT > 2:
        d2 = _rev_tile(d2, W, Qt, g2, r0, i_hv, 2 * BKT, m_t, o_t, b_do, b_dvn, BKT, HV, K, PREC, PREC_SRC)
        d3 = _rev_tile(d3, W, Qt, g3, r0, i_hv, 3 * BKT, m_t, o_t, b_do, b_dvn, BKT, HV, K, PREC, PREC_SRC)
    return d0, d1, d2, d3


@triton.jit
def _pass_forward(W, U, Kt, gamma, states, h0, i_n, i_v, i_hv, bos, n_tok, c0,
                  HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BKT: tl.constexpr, NKT: tl.constexpr,
                  BV: tl.constexpr, CT: tl.constexpr, USE_H0: tl.constexpr, PREC: tl.constexpr,
                  STORE_VN: tl.constexpr):
    """The forward recursion of `_state_pass_kernel`: S_start of every chunk into states."""
    ACC: tl.constexpr = states.dtype.element_ty
    o_t, o_v, m_v, off_tv, off_s, m0, m1, m2, m3 = _pass_layout(i_v, K, V, BKT, BV, CT, HV)
    n_chunks = (n_tok + CT - 1) // CT
    s0, s1, s2, s3 = _initial_tiles(h0, (i_n * HV + i_hv) * (K * V), off_s, m0, m1, m2, m3, USE_H0, NKT, BKT * V,
                                    BKT, BV, ACC)
    for c in range(n_chunks):
        s0, s1, s2, s3 = _fwd_step(s0, s1, s2, s3, W, U, Kt, gamma, states, c, n_chunks, n_tok, bos, c0, i_hv, o_t,
                                   m_v, off_tv, off_s, m0, m1, m2, m3, HV, K, V, BKT, NKT, CT, PREC, STORE_VN)


@triton.jit
def _pass_reverse(W, Qt, Kt, gamma, dO2, do, dstates, dht, dh0, i_n, i_v, i_hv, bos, n_tok, c0,
                  HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BKT: tl.constexpr, NKT: tl.constexpr,
                  BV: tl.constexpr, CT: tl.constexpr, USE_DHT: tl.constexpr, PREC: tl.constexpr,
                  PREC_SRC: tl.constexpr, STORE_VN: tl.constexpr, PREFETCH: tl.constexpr):
    """The reverse recursion of `_state_pass_kernel`: dS_end of every chunk into dstates, from the last chunk
    back, and dh0. PREFETCH: each step's `_rev_inputs` read one step ahead."""
    ACC: tl.constexpr = dstates.dtype.element_ty
    o_t, o_v, m_v, off_tv, off_s, m0, m1, m2, m3 = _pass_layout(i_v, K, V, BKT, BV, CT, HV)
    s_seq = (i_n * HV + i_hv) * (K * V)
    n_chunks = (n_tok + CT - 1) // CT
    d0, d1, d2, d3 = _initial_tiles(dht, s_seq, off_s, m0, m1, m2, m3, USE_DHT, NKT, BKT * V, BKT, BV, ACC)
    if PREFETCH:
        n_o2, n_g0, n_g1, n_g2, n_g3 = _rev_inputs(dO2, gamma, n_chunks - 1, n_tok, bos, c0, i_hv, o_t, m_v, off_tv,
                                                   HV, K, V, BKT, NKT, CT)
    for cr in range(n_chunks):
        c = n_chunks - 1 - cr
        if PREFETCH:
            # read a step ahead: dO2 and gamma feed no product's operands, so Triton would issue plain loads of them
            # inside the step, on the chain through dS
            b_o2, g0, g1, g2, g3 = n_o2, n_g0, n_g1, n_g2, n_g3
            n_o2, n_g0, n_g1, n_g2, n_g3 = _rev_inputs(dO2, gamma, c - 1, n_tok, bos, c0, i_hv, o_t, m_v, off_tv,
                                                       HV, K, V, BKT, NKT, CT)
        else:
            b_o2, g0, g1, g2, g3 = _rev_inputs(dO2, gamma, c, n_tok, bos, c0, i_hv, o_t, m_v, off_tv, HV, K, V, BKT,
                                               NKT, CT)
        d0, d1, d2, d3 = _rev_step(d0, d1, d2, d3, W, Qt, Kt, b_o2, g0, g1, g2, g3, dO2, do, dstates, c, n_tok, bos,
                                   c0, i_hv, o_t, m_v, off_tv, off_s, m0, m1, m2, m3, HV, K, V, BKT, NKT, CT, PREC,
                                   PREC_SRC, STORE_VN)
    _store_tiles(dh0 + s_seq, off_s, d0, d1, d2, d3, m0, m1, m2, m3, NKT, BKT * V)


# ----------------------------------------------------------------------------------------------------
# 3a, 3b (LAUNCH["chunked_local"] = "split"): the matrix local kernel's formulas, from the pass's Vn and dVn and
# the prep's X and P (tests/kernels/chunk_backward_matrix.py: the derivation)
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _k_tile_sums(do, Vn, dVn, p_s, p_d, dQt, dKt, dgamma, item, row_v, off_tk, o_k, m_t, m_tk, K: tl.constexpr,
                 V: tl.constexpr, BKT: tl.constexpr, BVT: tl.constexpr, PREC: tl.constexpr):
    """One K-tile (columns o_k) of 3a's sums over V, by V-tiles of BVT: dQt = dO S^T, dKt = Vn dSe^T and dgamma =
    rowsum(S * dSe) (stored), and dW = -dVn S^T (returned, [CT, BKT]). S, dSe: the chunk's at p_s, p_d ([K, V])."""
    NVT: tl.constexpr = (V + BVT - 1) // BVT
    ACC: tl.constexpr = dQt.dtype.element_ty
    CT: tl.constexpr = m_t.shape[0]
    m_k = o_k < K
    b_dqt = tl.zeros([CT, BKT], dtype=ACC)
    b_dkt = tl.zeros([CT, BKT], dtype=ACC)
    b_dw = tl.zeros([CT, BKT], dtype=ACC)
    b_dgam = tl.zeros([BKT], dtype=ACC)
    for i_v in range(NVT):
        o_v = i_v * BVT + tl.arange(0, BVT)
        m_v = o_v < V
        m_tv = m_t[:, None] & m_v[None, :]
        off_tv = row_v + o_v[None, :]
        off_kv = o_k[:, None] * V + o_v[None, :]
        m_kv = m_k[:, None] & m_v[None, :]
        b_s = tl.load(p_s + off_kv, mask=m_kv, other=0.0)
        b_d = tl.load(p_d + off_kv, mask=m_kv, other=0.0)
        b_do = tl.load(do + off_tv, mask=m_tv, other=0.0).to(ACC)
        b_dqt += _xdot(b_do, tl.trans(b_s), PREC)
        b_dkt += _xdot(tl.load(Vn + off_tv, mask=m_tv, other=0.0).to(ACC), tl.trans(b_d), PREC)
        b_dw -= _xdot(tl.load(dVn + off_tv, mask=m_tv, other=0.0), tl.trans(b_s), PREC)
        b_dgam += tl.sum(b_s * b_d, axis=1)
    tl.store(dQt + off_tk, b_dqt, mask=m_tk)
    tl.store(dKt + off_tk, b_dkt, mask=m_tk)
    tl.store(dgamma + item * K + o_k, b_dgam, mask=m_k)
    return b_dw


@triton.jit
def _local_kt_kernel(
    do, Vn, dVn, Xb, states, dstates, dQt, dKt, Yk, dgamma, cu_seqlens, chunk_indices,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BKT: tl.constexpr, BVT: tl.constexpr, CT: tl.constexpr,
    PREC: tl.constexpr,
):
    """3a's sums over V of one K-tile (LAUNCH["split_vk_ktiles"]), one program per (chunk, value head, K-tile of
    BKT), the K-tiles of an item as neighbouring programs (its dO, Vn, dVn then from L2): dQt, dKt, dgamma
    (`_k_tile_sums`) and Y_k = X^T dW. `_local_vk_kernel` (YK_GIVEN) does the rest: the sums over V of the
    V-tiles, and XdX and dbeta from this Y_k. More, lighter programs than the K-tiles inside `_local_vk_kernel`."""
    NKT: tl.constexpr = (K + BKT - 1) // BKT
    pid = tl.program_id(0).to(tl.int64)
    item = pid // NKT  # chunk * HV + value head
    i_c = item // HV
    i_hv = item % HV
    _, _, r0, n, _ = _chunk_span(cu_seqlens, chunk_indices, i_c, CT)
    o_t = tl.arange(0, CT)
    m_t = o_t < n
    o_k = (pid % NKT) * BKT + tl.arange(0, BKT)
    m_tk = m_t[:, None] & (o_k < K)[None, :]
    row_v = (r0 * HV + i_hv) * V + o_t[:, None] * (HV * V)
    off_tk = (r0 * HV + i_hv) * K + o_t[:, None] * (HV * K) + o_k[None, :]
    b_dw = _k_tile_sums(do, Vn, dVn, states + item * (K * V), dstates + item * (K * V), dQt, dKt, dgamma, item, row_v,
                        off_tk, o_k, m_t, m_tk, K, V, BKT, BVT, PREC)
    b_X = tl.load(Xb + item * (CT * CT) + o_t[:, None] * CT + o_t[None, :])
    tl.store(Yk + off_tk, _xdot(tl.trans(b_X), b_dw, PREC), mask=m_tk)


@triton.jit
def _local_vk_kernel(
    k, v, g, beta, do, Vn, dVn, Xb, Pb, states, dstates, dv, dQt, dKt, Yk, dgamma, dbeta, d1, M1, M2, rk,
    cu_seqlens, chunk_indices, p_scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BKT: tl.constexpr, BVT: tl.constexpr,
    CT: tl.constexpr, NORM: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr,
    YK_GIVEN: tl.constexpr = False,
):
    """Per (chunk, value head), everything that sums over V or K, in registers (no partial copies), from the pass's
    Vn and dVn (in U's and dO2's places) and the chunk's S (states) and dS_end (dstates):
    by V-tiles of BVT, Y_v = X^T dVn, dv = beta Y_v (final), dA_qk = dO Vn^T and rowsum(v Y_v); then by K-tiles of
    BKT, each summed over the V-tiles, dQt = dO S^T, dKt = Vn dSe^T, dW = -dVn S^T and dgamma = rowsum(S * dSe)
    (stored: dQt, dKt [T, HV, K], dgamma [NT, HV, K]), and from dW, Y_k = X^T dW ([T, HV, K]) with its terms of
    XdX = Y_v (beta v)^T + Y_k (beta Kb)^T and of dbeta; last dA_kk = (-XdX X^T)_strict,
    dbeta = rowsum(v Y_v) + rowsum(Kb Y_k) + rowsum(dA_kk P) (final), the diagonal of dA_qk times scale (d1 [T, HV]:
    it goes to dq and dk directly, tests/kernels/chunk_backward_matrix.py) and the two matrices of the decay-weighted
    sums, M1 = scale (dA_qk)_strict and M2 = diag(beta) dA_kk ([NT, HV, CT, CT]).
    YK_GIVEN (LAUNCH["split_vk_ktiles"]): `_local_kt_kernel` has already stored dQt, dKt, dgamma and Y_k, so the
    K-tiles only read Y_k back for XdX and dbeta (states, dstates and dVn's second reading unused).
    On a GPU the tiles are at least 32 wide (masked past K and V): 16-wide K-tiles, as the inner width of a tf32
    product, gave a kernel of this form a 15% wrong dA_kk on the H100 (Triton 3.6)."""
    scale = tl.load(p_scale)  # in the buffers' dtype (`scale_arg`)
    NVT: tl.constexpr = (V + BVT - 1) // BVT
    NKT: tl.constexpr = (K + BKT - 1) // BKT
    ACC: tl.constexpr = Yk.dtype.element_ty
    i_c = tl.program_id(0).to(tl.int64)
    i_hv = tl.program_id(1).to(tl.int64)
    i_h = i_hv // (HV // H)
    item = i_c * HV + i_hv
    _, _, r0, n, _ = _chunk_span(cu_seqlens, chunk_indices, i_c, CT)
    o_t = tl.arange(0, CT)
    m_t = o_t < n
    strict = o_t[None, :] < o_t[:, None]
    off_m = item * (CT * CT) + o_t[:, None] * CT + o_t[None, :]
    row_v = (r0 * HV + i_hv) * V + o_t[:, None] * (HV * V)  # the chunk's rows of v, do, Vn, dVn, dv
    row_k = (r0 * HV + i_hv) * K + o_t[:, None] * (HV * K)  # of g, dQt, dKt, Yk
    p_s = states + item * (K * V)
    p_d = dstates + item * (K * V)
    b_b = tl.load(beta + (r0 + o_t) * HV + i_hv, mask=m_t, other=0.0).to(ACC)
    b_X = tl.load(Xb + off_m)
    b_xdx = tl.zeros([CT, CT], dtype=ACC)
    b_dAqk = tl.zeros([CT, CT], dtype=ACC)
    b_db = tl.zeros([CT], dtype=ACC)
    for i_v in range(NVT):
        o_v = i_v * BVT + tl.arange(0, BVT)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        off_tv = row_v + o_v[None, :]
        b_dvn = tl.load(dVn + off_tv, mask=m_tv, other=0.0)
        b_yv = _xdot(tl.trans(b_X), b_dvn, PREC)
        tl.store(dv + off_tv, _as_stored(b_b[:, None] * b_yv, dv, INTERPRET), mask=m_tv)
        b_v = tl.load(v + off_tv, mask=m_tv, other=0.0).to(ACC)
        b_db += tl.sum(b_v * b_yv, axis=1)
        b_xdx += _xdot(b_yv, tl.trans(b_v * b_b[:, None]), PREC)
        b_do = tl.load(do + off_tv, mask=m_tv, other=0.0).to(ACC)
        b_dAqk += _xdot(b_do, tl.trans(tl.load(Vn + off_tv, mask=m_tv, other=0.0).to(ACC)), PREC)
    diag = o_t[None, :] == o_t[:, None]
    tl.store(d1 + (r0 + o_t) * HV + i_hv, tl.sum(tl.where(diag, b_dAqk, 0.0), axis=1) * scale, mask=m_t)
    tl.store(M1 + off_m, tl.where(strict, b_dAqk * scale, 0.0))
    p_k = k + (r0 * H + i_h) * K + o_t[:, None] * (H * K)
    for i_k in range(NKT):
        o_k = i_k * BKT + tl.arange(0, BKT)
        m_k = o_k < K
        m_tk = m_t[:, None] & m_k[None, :]
        off_tk = row_k + o_k[None, :]
        if YK_GIVEN:
            b_yk = tl.load(Yk + off_tk, mask=m_tk, other=0.0)
        else:
            b_dw = _k_tile_sums(do, Vn, dVn, p_s, p_d, dQt, dKt, dgamma, item, row_v, off_tk, o_k, m_t, m_tk, K, V,
                                BKT, BVT, PREC)
            b_yk = _xdot(tl.trans(b_X), b_dw, PREC)
            tl.store(Yk + off_tk, b_yk, mask=m_tk)
        b_gt = tl.load(g + off_tk, mask=m_tk, other=0.0).to(ACC)
        b_kb = _norm_rows(tl.load(p_k + o_k[None, :], mask=m_tk, other=0.0).to(ACC), rk + r0 * H + i_h, o_t, m_t, H,
                          NORM) * tl.exp(tl.cumsum(b_gt, axis=0))
        b_xdx += _xdot(b_yk, tl.trans(b_kb * b_b[:, None]), PREC)
        b_db += tl.sum(b_kb * b_yk, axis=1)
    b_dAkk = tl.where(strict, -_xdot(b_xdx, tl.trans(b_X), PREC), 0.0)
    b_db += tl.sum(b_dAkk * tl.load(Pb + off_m), axis=1)
    tl.store(dbeta + (r0 + o_t) * HV + i_hv, b_db, mask=m_t)
    tl.store(M2 + off_m, b_dAkk * b_b[:, None])


@triton.jit
def _as_stored(x, p, INTERPRET: tl.constexpr):
    """x in the element type of the buffer at p: bf16 rounded to nearest even (`_bf16`, as torch's cast), else a
    plain conversion (a no-op for fp32 / fp64)."""
    if p.dtype.element_ty == tl.bfloat16:
        return _bf16(x, INTERPRET)
    else:
        return x.to(p.dtype.element_ty)


@triton.jit
def _sums_tile_at(q, k, g, M1, M2, rq, rk, cu_seqlens, chunk_indices, w, H: tl.constexpr, HV: tl.constexpr,
                  K: tl.constexpr, BKS: tl.constexpr, CT: tl.constexpr):
    """Where work item w (chunk, value head, K-tile) of the sums reads: (p_q, p_k, p_g, p_m1, p_m2, p_rq, p_rk, its
    gates' offset, the chunk's rows n, the tile's column mask)."""
    NKT: tl.constexpr = (K + BKS - 1) // BKS
    o_b = tl.arange(0, BKS)
    item = w // NKT  # chunk * HV + value head
    i_c = item // HV
    i_hv = item % HV
    i_h = i_hv // (HV // H)
    k0 = (w % NKT) * BKS
    _, _, r0, n, _ = _chunk_span(cu_seqlens, chunk_indices, i_c, CT)
    m_kt = k0 + o_b < K
    off_g = (r0 * HV + i_hv) * K + k0
    return (q + (r0 * H + i_h) * K + k0, k + (r0 * H + i_h) * K + k0, g + off_g, M1 + item * (CT * CT),
            M2 + item * (CT * CT), rq + r0 * H + i_h, rk + r0 * H + i_h, off_g, n, m_kt)


@triton.jit
def _sums_tile(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, w,
               H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BKS: tl.constexpr, CT: tl.constexpr,
               BI: tl.constexpr, PREC: tl.constexpr, ANCHORS: tl.constexpr, DPREC: tl.constexpr,
               ONE_ANCHOR: tl.constexpr, NORM: tl.constexpr, STEPS: tl.constexpr = True, flags=None,
               NESTED: tl.constexpr = False, Bal=None, BALANCE: tl.constexpr = False):
    """Row block BI of `_local_sums_kernel`'s sums for work item w (chunk, value head, K-tile), into R1, R2, R3.
    Not STEPS (two anchors): a block past the anchored range gets no diagonal part, and flags[w * CT / 16 + BI]
    says whether it passed (`_diag_steps_kernel` adds it). BALANCE: the diagonal block's imbalance
    (`_sums_block_anchored`) into Bal [NT, HV, CT / 16, K]."""
    o_b = tl.arange(0, BKS)
    rows = BI * 16 + tl.arange(0, 16)
    p_q, p_k, p_g, p_m1, p_m2, p_rq, p_rk, off_g, n, m_kt = _sums_tile_at(q, k, g, M1, M2, rq, rk, cu_seqlens,
                                                                          chunk_indices, w, H, HV, K, BKS, CT)
    if ANCHORS:
        b_r1, b_r2, b_r3, past, bal = _sums_block_anchored(p_m1, p_m2, p_q, p_k, H * K, p_g, HV * K, n, o_b, m_kt,
                                                           BI, BKS, CT, PREC, DPREC, MAX_EXP, ONE_ANCHOR, p_rq, p_rk,
                                                           H, NORM, STEPS, NESTED, BALANCE)
        if not STEPS:
            tl.store(flags + w * (CT // 16) + BI, past.to(tl.int8))
        if BALANCE:
            NKT: tl.constexpr = (K + BKS - 1) // BKS
            tl.store(Bal + ((w // NKT) * (CT // 16) + BI) * K + (w % NKT) * BKS + o_b, bal,
                     mask=m_kt & (o_b * 0 + BI * 16 < n))
    else:
        SG: tl.constexpr = HV * K
        b_r1 = _row_sums_block(p_m1, p_k, H * K, p_g, SG, n, o_b, m_kt, BI, BKS, CT, PREC)   # dq, from A_qk
        b_r2 = _row_sums_block(p_m2, p_k, H * K, p_g, SG, n, o_b, m_kt, BI, BKS, CT, PREC)   # dk, A_kk rows
        b_r3 = (_col_sums_block(p_m1, p_q, H * K, p_g, SG, n, o_b, m_kt, BI, BKS, CT, PREC)  # dk, A_qk columns
                + _col_sums_block(p_m2, p_k, H * K, p_g, SG, n, o_b, m_kt, BI, BKS, CT, PREC))  # dk, A_kk columns
    off = off_g + rows[:, None] * (HV * K) + o_b[None, :]
    m_out = (rows < n)[:, None] & m_kt[None, :]
    tl.store(R1 + off, b_r1, mask=m_out)
    tl.store(R2 + off, b_r2, mask=m_out)
    tl.store(R3 + off, b_r3, mask=m_out)


@triton.jit
def _steps_tile(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, w, H: tl.constexpr,
                HV: tl.constexpr, K: tl.constexpr, BKS: tl.constexpr, CT: tl.constexpr, BI: tl.constexpr,
                NORM: tl.constexpr, UNROLL: tl.constexpr):
    """Row block BI of work item w: the diagonal block's part of the sums as running products
    (`_diag_sums_by_steps`), added to R1, R2, R3."""
    o_b = tl.arange(0, BKS)
    rows = BI * 16 + tl.arange(0, 16)
    p_q, p_k, p_g, p_m1, p_m2, p_rq, p_rk, off_g, n, m_kt = _sums_tile_at(q, k, g, M1, M2, rq, rk, cu_seqlens,
                                                                          chunk_indices, w, H, HV, K, BKS, CT)
    b_r1, b_r2, b_r3 = _diag_sums_by_steps(p_m1, p_m2, p_q, p_k, H * K, p_g, HV * K, n, o_b, m_kt, BI, BKS, CT,
                                           p_rq, p_rk, H, NORM, UNROLL)
    off = off_g + rows[:, None] * (HV * K) + o_b[None, :]
    m_out = (rows < n)[:, None] & m_kt[None, :]
    tl.store(R1 + off, tl.load(R1 + off, mask=m_out) + b_r1, mask=m_out)
    tl.store(R2 + off, tl.load(R2 + off, mask=m_out) + b_r2, mask=m_out)
    tl.store(R3 + off, tl.load(R3 + off, mask=m_out) + b_r3, mask=m_out)


@triton.jit(do_not_specialize=["n_work"])
def _diag_steps_kernel(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, flags, n_work,
                       H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BKS: tl.constexpr, CT: tl.constexpr,
                       NORM: tl.constexpr, UNROLL: tl.constexpr):
    """After `_local_sums_kernel` without its fall-back (STEPS off, LAUNCH["sums_steps_pass"]): the diagonal parts
    of the (item, row block)s flagged past the anchored range, by running products, over persistent programs. The
    fall-back's code then costs no registers in the sums kernel, whose blocks mostly do not need it. UNROLL: the
    running products' steps unrolled that many at a time (LAUNCH["sums_steps_unroll"])."""
    pid = tl.program_id(0).to(tl.int64)
    NB: tl.constexpr = CT // 16
    for u in range(pid, n_work * NB, tl.num_programs(0)):
        if tl.load(flags + u) != 0:
            w = u // NB
            bi = u % NB
            if bi == 0:
                _steps_tile(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, w, H, HV, K, BKS, CT, 0,
                            NORM, UNROLL)
            elif bi == 1:
                _steps_tile(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, w, H, HV, K, BKS, CT, 1,
                            NORM, UNROLL)
            elif bi == 2:
                _steps_tile(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, w, H, HV, K, BKS, CT, 2,
                            NORM, UNROLL)
            else:
                _steps_tile(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, w, H, HV, K, BKS, CT, 3,
                            NORM, UNROLL)


@triton.jit(do_not_specialize=["n_work"])
def _local_sums_kernel(
    q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, flags, n_work, Bal,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BKS: tl.constexpr, CT: tl.constexpr,
    BI: tl.constexpr, PREC: tl.constexpr, ANCHORS: tl.constexpr, DPREC: tl.constexpr, ONE_ANCHOR: tl.constexpr,
    NORM: tl.constexpr, ALL_BLOCKS: tl.constexpr, STEPS: tl.constexpr, NESTED: tl.constexpr = False,
    BALANCE: tl.constexpr = False,
):
    """3b's decay-weighted sums for the work items (chunk, value head, K-tile of BKS <= 32 columns) shared out
    over the programs ([T, HV, K] each): R1 = row sums of M1 with k, R2 = row sums of M2 with k, R3 = column
    sums of M1 with q plus those of M2 with k (backward_blocks.py's `_sums_block_anchored` with ANCHORS, at one
    anchor with ONE_ANCHOR, else `_row_sums_block` and `_col_sums_block`; M1, M2 [NT, HV, CT, CT] from
    `_local_vk_kernel`), by 16-row blocks: row block BI for every item (one launch per block, like
    `_prep_pairs_kernel`), or with ALL_BLOCKS (ANCHORS only) every (item, row block) in one launch, an item's four
    blocks as neighbouring work (LAUNCH["sums_one_launch"]: they read the same gates, q, k, M1 and M2, which then
    come from L2).
    Every row block holds 6 off-diagonal products of each kind, so the blocks are the same size.
    The gates (in the buffers' dtype) are read where they are, masked past the chunk's rows and K. Not STEPS: the
    blocks past the anchored range are flagged in `flags` for `_diag_steps_kernel` (`_sums_tile`). BALANCE (ANCHORS
    only): each diagonal block's imbalance into Bal (`_sums_tile`)."""
    pid = tl.program_id(0).to(tl.int64)
    if ALL_BLOCKS:
        NB: tl.constexpr = CT // 16
        # one branch per block, each calling `_sums_tile` with its block as a constexpr: the timed form (a
        # static_range loop over the blocks with a guard compiles to other code, 588 against 492 bytes of spills at
        # two anchors on 2 warps, ptxas sm_90)
        for u in range(pid, n_work * NB, tl.num_programs(0)):
            w = u // NB
            bi = u % NB
            if bi == 0:
                _sums_tile(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, w, H, HV, K, BKS, CT, 0,
                           PREC, ANCHORS, DPREC, ONE_ANCHOR, NORM, STEPS, flags, NESTED, Bal, BALANCE)
            elif bi == 1:
                _sums_tile(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, w, H, HV, K, BKS, CT, 1,
                           PREC, ANCHORS, DPREC, ONE_ANCHOR, NORM, STEPS, flags, NESTED, Bal, BALANCE)
            elif bi == 2:
                _sums_tile(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, w, H, HV, K, BKS, CT, 2,
                           PREC, ANCHORS, DPREC, ONE_ANCHOR, NORM, STEPS, flags, NESTED, Bal, BALANCE)
            else:
                _sums_tile(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, w, H, HV, K, BKS, CT, 3,
                           PREC, ANCHORS, DPREC, ONE_ANCHOR, NORM, STEPS, flags, NESTED, Bal, BALANCE)
    else:
        for w in range(pid, n_work, tl.num_programs(0)):
            _sums_tile(q, k, g, M1, M2, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, w, H, HV, K, BKS, CT, BI,
                       PREC, ANCHORS, DPREC, ONE_ANCHOR, NORM, STEPS, flags, NESTED, Bal, BALANCE)


@triton.jit
def _local_k_kernel(
    q, k, g, beta, Yk, d1, dQt, dKt, dgamma, dq, dk, dg, R1, R2, R3, rq, rk, cu_seqlens, chunk_indices, p_scale, Bal,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BKT: tl.constexpr, CT: tl.constexpr, NORM: tl.constexpr,
    INTERPRET: tl.constexpr, BALANCE: tl.constexpr = False,
):
    """Per work item (chunk, value head, K-tile of BKT columns), one program each: dq, dk (per value head, in their
    buffers' dtype) and dg of the tile's key channels from `_local_sums_kernel`'s decay-weighted sums (R1, R2, R3)
    and 3a's dQt, dKt, dgamma, Y_k and d1. Every sum here is per key channel, so K-tiles are independent: more,
    smaller programs than one per (chunk, value head). A streaming kernel (no products): one program per item, no
    persistent loop, lets the GPU overlap one item's loads with another's stores. BALANCE: each diagonal block's
    imbalance (Bal, from the sums kernel) taken out of dG at the block's first row."""
    scale = tl.load(p_scale)  # in the buffers' dtype (`scale_arg`)
    ACC: tl.constexpr = dg.dtype.element_ty
    NKT: tl.constexpr = (K + BKT - 1) // BKT
    w = tl.program_id(0).to(tl.int64)
    i_kt = w % NKT
    item = w // NKT  # chunk * HV + value head
    i_c = item // HV
    i_hv = item % HV
    i_h = i_hv // (HV // H)
    k0 = i_kt * BKT
    o_t = tl.arange(0, CT)
    o_b = tl.arange(0, BKT)
    _, _, r0, n, _ = _chunk_span(cu_seqlens, chunk_indices, i_c, CT)
    m_t = o_t < n
    o_kt = k0 + o_b
    m_kt = o_kt < K
    m_tk = m_t[:, None] & m_kt[None, :]
    p_q = q + (r0 * H + i_h) * K + k0  # the tile's first column
    p_k = k + (r0 * H + i_h) * K + k0
    off_tk = (r0 * HV + i_hv) * K + o_t[:, None] * (HV * K) + o_kt[None, :]
    b_gt = tl.load(g + off_tk, mask=m_tk, other=0.0).to(ACC)
    # the gates one row later (zero past the chunk), read again from memory (cached) rather than shifted
    # through shared memory
    b_gn = tl.load(g + off_tk + HV * K, mask=(o_t + 1 < n)[:, None] & m_kt[None, :], other=0.0).to(ACC)
    b_b = tl.load(beta + (r0 + o_t) * HV + i_hv, mask=m_t, other=0.0).to(ACC)
    b_d1 = tl.load(d1 + (r0 + o_t) * HV + i_hv, mask=m_t, other=0.0)
    b_eG = tl.exp(tl.cumsum(b_gt, axis=0))
    b_eT = tl.exp(tl.cumsum(b_gn, axis=0, reverse=True))
    b_q = _norm_rows(tl.load(p_q + o_t[:, None] * (H * K) + o_b[None, :], mask=m_tk, other=0.0).to(ACC),
                     rq + r0 * H + i_h, o_t, m_t, H, NORM)
    b_k = _norm_rows(tl.load(p_k + o_t[:, None] * (H * K) + o_b[None, :], mask=m_tk, other=0.0).to(ACC),
                     rk + r0 * H + i_h, o_t, m_t, H, NORM)
    b_yk = tl.load(Yk + off_tk, mask=m_tk, other=0.0)
    b_dQt = tl.load(dQt + off_tk, mask=m_tk, other=0.0)
    b_dKt = tl.load(dKt + off_tk, mask=m_tk, other=0.0)
    b_r1 = tl.load(R1 + off_tk, mask=m_tk, other=0.0)
    b_r2 = tl.load(R2 + off_tk, mask=m_tk, other=0.0)
    b_r3 = tl.load(R3 + off_tk, mask=m_tk, other=0.0)
    b_dq = scale * b_eG * b_dQt + b_r1 + b_d1[:, None] * b_k
    b_dk = b_eG * b_b[:, None] * b_yk + b_eT * b_dKt + b_r2 + b_r3 + b_d1[:, None] * b_q
    b_dG = scale * b_q * b_eG * b_dQt + b_k * b_eG * b_b[:, None] * b_yk + b_q * b_r1 + b_k * (b_r2 - b_r3)
    if BALANCE:
        first = (o_t % 16 == 0) & m_t
        b_dG -= tl.load(Bal + (item * (CT // 16) + o_t // 16)[:, None] * K + o_kt[None, :],
                        mask=first[:, None] & m_kt[None, :], other=0.0)
    # dg = reverse cumsum of dG, plus what the Kt and gamma terms give each row, sum_{i < t} Kt_i dKt_i and
    # gamma dgamma (tests/kernels/chunk_backward_matrix.py); the exclusive sum as the inclusive one less the
    # row itself (fp32, error relative to the sum, no tf32 product)
    b_kd = b_k * b_eT * b_dKt
    b_dg = tl.cumsum(b_dG, axis=0, reverse=True) + (tl.cumsum(b_kd, axis=0) - b_kd)
    b_dgam = tl.load(dgamma + item * K + o_kt, mask=m_kt, other=0.0)
    b_dg += (b_dgam * tl.exp(tl.sum(b_gt, axis=0)))[None, :]
    tl.store(dq + off_tk, _as_stored(b_dq, dq, INTERPRET), mask=m_tk)
    tl.store(dk + off_tk, _as_stored(b_dk, dk, INTERPRET), mask=m_tk)
    tl.store(dg + off_tk, b_dg, mask=m_tk)


def chunk_states_and_grads(xs, sizes, tables, acc, h0, do, dht, scale, launch, n_programs, for_split=False,
                           given=None, norms=None):
    """Kernels 1 and 2: (states, dstates [NT, HV, K, V], dh0 [N, HV, K, V], prep) in acc; prep: the prep
    kernel's buffers by name (W, U, Qt, Kt, gamma, dO2, and X, P for_split, the split local kernels, for whom the
    pass also writes Vn and dVn in U's and dO2's places). xs: the packed q, k, v, g, beta;
    do packed [TT, HV, V]; dht in the [K, V] layout or None; launch: backward.LAUNCH; given: the forward's P, Aqk
    and X (`_prep`), or None to compute them, and with them optionally the forward's states and Vn ("states",
    "Vn": then the pass runs only its reverse recursion, and Vn is handed on in pre["U"]; "W" and "KG": the pass
    reads them as W and Kt); norms: q's and k's L2-norm factors [T, H] (q, k in xs as given), or None
    (`_prep`)."""
    from kda_trace.platform import triton_interpreted

    q, k, v, g, beta = xs
    B, T, H, HV, K, V, N = sizes
    cu, chunk_indices, chunk_offsets, NT = tables
    TT, dev = B * T, q.device
    interp = triton_interpreted()
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, triton.next_power_of_2(V))
    prec = _precision(acc, launch["chunked_precision"], interp)
    # the pass in bf16 on a GPU for 2-byte inputs, else tf32: its Vn and dVn reach dv and dbeta directly (fp32 inputs,
    # K = 32: dbeta 9.2e-3 off float64 with a bf16 pass on the H100)
    pass_prec = launch["chunked_pass_precision"] or ("bf16" if not interp and do.element_size() <= 2 else "tf32")
    # W and Kt are read by the pass only. A pass in bf16 rounds them to bf16 in each product: the prep stores them
    # so (the same values, half the bytes of the pass's two widest operands; LAUNCH["chunked_pass_bf16_copies"],
    # None: on).
    copies = launch["chunked_pass_bf16_copies"]
    wdt = torch.bfloat16 if pass_prec == "bf16" and acc == torch.float32 and (copies is None or copies) else acc
    # the forward's W and k e(Gl - G) where the pass takes them as they are: in its bf16 copies' dtype, or in acc
    # (a tf32 pass does not widen a bf16 one)
    with_wk = given is None or "W" not in given or (wdt != torch.bfloat16 and given["W"].dtype != acc)
    if not with_wk:
        pre = {"W": given["W"], "Kt": given["KG"]}
    else:
        pre = {n: torch.empty(TT, HV, K, dtype=wdt, device=dev) for n in ("W", "Kt")}
    pre["Qt"] = torch.empty(TT, HV, K, dtype=acc, device=dev)
    kept = given is not None and "states" in given  # the forward's states and Vn: no forward recursion, no U
    pre.update({n: torch.empty(TT, HV, V, dtype=acc, device=dev) for n in (("dO2",) if kept else ("U", "dO2"))})
    pre["gamma"] = torch.empty(NT, HV, K, dtype=acc, device=dev)
    if given is None:
        pre.update({n: torch.empty(NT, HV, CT, CT, dtype=acc, device=dev) for n in ("X", "P")})
    z = torch.empty(1, dtype=acc, device=dev)
    n_prog = n_programs(NT * HV, dev, interp)  # the pairs kernel's persistent programs
    # the solve's products in tf32x3 (about fp32; kernels/chunk.py's SOLVE_PRECISION) even where the other products
    # are tf32: X = (I + A_kk)^-1 multiplies six 16x16 factors per diagonal block and chains three rounds of
    # blocks, and tf32's 2^-11 operand rounding there would reach every row of W and U (an inverse amplifies
    # relative errors by cond(I + A_kk)); ieee for float64
    solve_prec = "ieee" if acc == torch.float64 else SOLVE_PRECISION.value
    _prep(xs, sizes, tables, acc, pre, do, scale, launch, n_prog, prec, solve_prec, given, norms, with_wk)
    if not for_split:
        del pre["X"], pre["P"]

    states = given["states"] if kept else torch.empty(NT, HV, K, V, dtype=acc, device=dev)
    dstates = torch.empty(NT, HV, K, V, dtype=acc, device=dev)
    dh0 = torch.empty(N, HV, K, V, dtype=acc, device=dev)
    # The pass is sequential over chunks. V-tiles of 32 (16 made more programs but took longer: 4.2 against 3.4 ms
    # at 32 heads x 16384 on the H100; 64 spills at K = 128); two pipeline stages where they fit: they need more
    # shared memory than Hopper has at K > 128 or with a 4-byte do (measured on the H100), and a launch
    # that runs out of it is retried with one stage. Two stages beat one at many (sequence, head) pairs too: 22.8
    # against 23.3 ms fwd+bwd at 96 pairs (K3) and 45.8 against 46.8 at 1952 (61 packed sequences x 32 heads), H100.
    BVp = launch["chunked_pass_bv"] or (BV if interp else min(BV, 32))
    two = BK <= 128 and do.element_size() <= 2
    stages = launch["chunked_pass_stages"] or (2 if two else 1)
    parallel = launch["chunked_pass_parallel"]
    # Qt^T dO, the product whose rounding reaches dh0: Qt as two bf16 terms where dO is bf16 (exact then), tf32
    # for other dO
    src_bf16 = "bf16_split_a" if do.dtype == torch.bfloat16 else "tf32"
    src_prec = launch["chunked_pass_source_precision"] or (src_bf16 if pass_prec == "bf16" else pass_prec)
    prec, prec_src = _precision(acc, pass_prec, interp), _precision(acc, src_prec, interp)

    _launch_within_shared_memory(
        _state_pass_kernel, (N * triton.cdiv(V, BVp), HV, 2 if parallel and not kept else 1),
        (pre["W"], pre.get("U", z), pre["Qt"], pre["Kt"], pre["gamma"], pre["dO2"], do, states, dstates,
         h0 if h0 is not None else z, dht.to(acc).contiguous() if dht is not None else z, dh0, cu, chunk_offsets),
        dict(HV=HV, K=K, V=V, BK=BK, BV=BVp, CT=CT, USE_H0=h0 is not None, USE_DHT=dht is not None,
             PREC=prec, PREC_SRC=prec_src, PARALLEL=bool(parallel), STORE_VN=for_split, FORWARD=not kept,
             PREFETCH=launch["chunked_pass_prefetch"] is None or bool(launch["chunked_pass_prefetch"]),
             num_warps=launch["chunked_pass_warps"] or 4, **register_cap(launch["chunked_pass_maxnreg"])),
        stages, retry=not launch["chunked_pass_stages"])
    if kept:
        pre["U"] = given["Vn"]  # where 3a reads Vn (the pass's own, with its forward recursion)
    return states, dstates, dh0, pre


def _launch_within_shared_memory(kernel, grid, args, consts, stages, retry=True):
    """kernel[grid](*args, **consts) with `stages` pipeline stages (None: Triton's default); where they need more
    shared memory than the device has (Triton refuses before launching), once more with one stage, if retry."""
    try:
        kernel[grid](*args, **consts, **({"num_stages": stages} if stages else {}))
    except triton.runtime.errors.OutOfResources:
        if stages == 1 or not retry:
            raise
        kernel[grid](*args, **consts, num_stages=1)


def default_cap(key: str, acc, anchors: bool = True) -> int:
    """The register cap a LAUNCH["..._maxnreg"] of None stands for (0: none): with fp32 buffers the sums kernel at
    128 (four programs per SM) where its diagonal blocks are anchored (element-wise they would spill 600-900 bytes
    there) and the prep operands kernel at 168 (three); backward.py's LAUNCH comment has the measurements."""
    if acc != torch.float32:
        return 0
    return {"sums_maxnreg": 128 if anchors else 0, "prep_operands_maxnreg": 168}.get(key, 0)


def _precision(acc, setting: str, interp: bool) -> str:
    """The PREC of `_xdot` for a launch precision setting: ieee for float64 buffers, else the setting."""
    return "ieee" if acc == torch.float64 else dot_precision(setting, interp)


def one_anchor(launch, gate_bound) -> bool:
    """Whether the sums kernel takes its diagonal blocks at one anchor (`_sums_block_anchored`'s ONE_ANCHOR):
    LAUNCH["sums_one_anchor"] on, the anchored form, and every gate known to be >= gate_bound >= -MAX_EXP / 8 (the
    safe gate's lower bound; 8 gates from the anchor to a block's first row)."""
    if gate_bound is None or not launch["sums_one_anchor"] or not _anchors(launch):
        return False
    return -8.0 * float(gate_bound) <= MAX_EXP.value


def _anchors(launch) -> bool:
    """LAUNCH["diag_blocks"]: the diagonal blocks of the pair matrices and of 3b's sums on tensor cores (None,
    "anchors" or "nested") or element-wise ("elementwise")."""
    if launch["diag_blocks"] not in (None, "nested", "anchors", "elementwise"):
        raise ValueError("LAUNCH['diag_blocks'] must be None, 'nested', 'anchors' or 'elementwise', got "
                         f"{launch['diag_blocks']!r}")
    return launch["diag_blocks"] != "elementwise"


def _balance(launch: dict, gate_bound) -> bool:
    """Whether the sums kernel writes its diagonal blocks' imbalance for the local_k kernel (LAUNCH["diag_balance"];
    None: with the anchored blocks but at one anchor, the safe gate's, where it cost the backward 2.5%)."""
    setting = launch["diag_balance"]
    on = not one_anchor(launch, gate_bound) if setting is None else bool(setting)
    return on and _anchors(launch)


def _nested(launch, strong_gates: bool) -> bool:
    """Whether the sums kernel takes its diagonal blocks at nested anchors (backward_blocks.py `_diag_sums_nested`:
    four products per sum, any gate) rather than at two (two products, a fall-back for the blocks past their
    range): LAUNCH["diag_blocks"] "nested", or None with strong_gates (kda_backward's)."""
    return _anchors(launch) and (launch["diag_blocks"] == "nested" or (launch["diag_blocks"] is None and strong_gates))


def sums_diag_precision(launch, nested: bool) -> str:
    """The sums kernel's diagonal-block product precision (LAUNCH["sums_diag_precision"]; None: "tf32" with the blocks
    at nested anchors, else "tf32_rn")."""
    setting = launch["sums_diag_precision"]
    if setting is None:
        return "tf32" if nested else "tf32_rn"
    return setting


def _norm_args(norms, dummy):
    """The (rq, rk) kernel arguments: q's and k's L2-norm factors ([T, H], the kernels' NORM on), or a dummy
    buffer twice (NORM off: never read)."""
    return (dummy, dummy) if norms is None else norms


def _gates_for_blocks(g, acc):
    """g in the buffers' dtype, which backward_blocks.py's helpers (the pairs and sums kernels' diagonal blocks)
    compute in: a no-op for fp32 / fp64 gates (the autograd path's, the definitions'); a bf16 g costs a [T, HV, K]
    copy, which workspace_bytes leaves out. Each of the two kernels makes its own and frees it after, rather than
    one copy kept across the pass."""
    return g.to(acc)


def _prep(xs, sizes, tables, acc, pre, do, scale, launch, n_prog, prec, solve_prec, given=None, norms=None,
          with_wk=True):
    """Kernel 1 as three: `_prep_pairs_kernel` (one launch per 16-row block, persistent programs),
    `_prep_solve_kernel`, `_prep_operands_kernel`; fills pre's W, U, Qt, Kt, gamma, dO2, X and P (W and Kt only
    with_wk: else pre holds the forward's). given: P, Aqk and X as the forward kept them (kernels/chunk.py
    `kda_chunk`'s `saved`): then only the operands kernel runs. norms: q's and k's L2-norm factors (`_norm_args`;
    only with given: the pairs kernel reads q and k as they are)."""
    from kda_trace.platform import triton_interpreted

    interp = triton_interpreted()
    q, k, v, g, beta = xs
    B, T, H, HV, K, V, N = sizes
    cu, chunk_indices, _, NT = tables
    dev = q.device
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, triton.next_power_of_2(V))
    if given is not None:
        pre["P"], pre["X"], aqk = given["P"], given["X"], given["Aqk"]
    else:
        if norms is not None:
            raise ValueError("the prep's pairs kernel takes q and k normalised, not with their norm factors")
        aqk = torch.empty(NT, HV, CT, CT, dtype=acc, device=dev)
        g_acc = _gates_for_blocks(g, acc)
        for bi in range(CT // 16):
            _prep_pairs_kernel[(n_prog,)](
                q, k, g_acc, pre["P"], aqk, cu, chunk_indices, NT * HV,
                H=H, HV=HV, K=K, BK=BK, CT=CT, BI=bi, PREC=prec, ANCHORS=_anchors(launch),
                DPREC=_precision(acc, launch["pairs_diag_precision"] or ("tf32" if interp else "bf16"), interp),
                num_warps=launch["prep_pairs_warps"] or 4, **register_cap(launch["prep_pairs_maxnreg"]))
        del g_acc
        _prep_solve_kernel[(NT, HV)](pre["P"], beta, pre["X"], cu, chunk_indices, HV=HV, CT=CT,
                                     SOLVE_PREC=solve_prec, num_warps=launch["prep_solve_warps"] or 4)
    BKT = min(BK, 64)
    BVT = launch["prep_bv"] or min(BV, 64)
    with_u = "U" in pre  # no U where the forward's states and Vn are given (dO2 stands in, never written)
    _prep_operands_kernel[(NT * HV * (triton.cdiv(K, BKT) + triton.cdiv(V, BVT)),)](
        q, k, v, g, beta, do, pre["X"], aqk, pre["W"], pre["U"] if with_u else pre["dO2"], pre["Qt"], pre["Kt"],
        pre["dO2"], pre["gamma"], *_norm_args(norms, pre["gamma"]), cu, chunk_indices, scale, H=H, HV=HV, K=K, V=V,
        BKT=BKT, BVT=BVT, CT=CT, NORM=norms is not None, PREC=prec, WITH_U=with_u, WITH_WK=with_wk, INTERPRET=interp,
        num_warps=launch["prep_operands_warps"] or 4,
        **register_cap(launch["prep_operands_maxnreg"], default_cap("prep_operands_maxnreg", acc)))


def local_split(xs, sizes, tables, acc, pre, do, scale, launch, n_programs, gate_bound=None, norms=None,
                strong_gates=False):
    """Kernels 3a and 3b (LAUNCH["chunked_local"] = "split"): dq, dk per value head (in q's and k's dtype when
    HV == H, else fp32 / fp64 for the caller's GVA sum), dv in v's dtype, fp32 (fp64) dg and dbeta of every chunk
    from its start state, dS at its end (pre["states"], pre["dstates"]), the pass's Vn and dVn (in pre["U"],
    pre["dO2"]) and the prep's X and P. Each buffer of `pre` is dropped after its last reader (the caller holds no
    other reference). gate_bound: a lower bound every gate is known to keep, or None (`one_anchor`); strong_gates:
    kda_backward's (`_nested`). norms: q's and
    k's L2-norm factors [T, H] (q, k in xs as given; dq, dk then in fp32 / fp64), or None."""
    from kda_trace.platform import triton_interpreted

    q, k, v, g, beta = xs
    B, T, H, HV, K, V, N = sizes
    cu, chunk_indices, _, NT = tables
    TT, dev = B * T, q.device
    interp = triton_interpreted()
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, triton.next_power_of_2(V))
    prec = _precision(acc, launch["split_precision"], interp)
    e = lambda *shape: torch.empty(*shape, dtype=acc, device=dev)  # noqa: E731
    for name in ("W", "Kt", "Qt", "gamma"):  # read by the pass only: freed before 3a's buffers are allocated
        pre.pop(name, None)
    # dv, and dq and dk where no GVA group sums them, are written in the dtype returned (fp32 buffers otherwise)
    final = lambda x: x.dtype if acc == torch.float32 else acc  # noqa: E731
    dv = torch.empty(TT, HV, V, dtype=final(v), device=dev)
    dQt, dKt, Yk, dgamma = e(TT, HV, K), e(TT, HV, K), e(TT, HV, K), e(NT, HV, K)
    d1, dbeta = e(TT, HV), e(TT, HV)
    M1, M2 = e(NT, HV, CT, CT), e(NT, HV, CT, CT)
    rq, rk = _norm_args(norms, d1)
    Vn, dVn, X, states, dstates = (pre.pop(n) for n in ("U", "dO2", "X", "states", "dstates"))
    vk_args = (k, v, g, beta, do, Vn, dVn, X, pre.pop("P"), states, dstates, dv, dQt, dKt, Yk, dgamma, dbeta, d1, M1,
               M2, rk, cu, chunk_indices, scale)
    # 32 x 32 tiles on 4 warps (255 registers and 112 KiB of shared memory: two programs per SM, where 64 x 64 on
    # 8 warps left one; 11.31 against 11.52 ms fwd+bwd at 32 heads x 16384, H100); 32 wide
    # on a GPU (see the kernel)
    vk_consts = dict(H=H, HV=HV, K=K, V=V, BKT=launch["split_bk"] or (BK if interp else 32),
                     BVT=launch["split_bv"] or (BV if interp else 32), CT=CT, NORM=norms is not None, PREC=prec,
                     INTERPRET=interp, num_warps=launch["split_vk_warps"] or 4,
                     **register_cap(launch["split_vk_maxnreg"]))
    # pipeline stages: Triton's default where its buffers fit in shared memory (112 KiB at K = V = 128 with bf16
    # inputs and 32 x 32 tiles), else one (48 KiB)
    if launch["split_vk_ktiles"]:
        BKK = launch["split_bk"] or (BK if interp else 32)
        _local_kt_kernel[(NT * HV * triton.cdiv(K, BKK),)](
            do, Vn, dVn, X, states, dstates, dQt, dKt, Yk, dgamma, cu, chunk_indices,
            HV=HV, K=K, V=V, BKT=BKK, BVT=vk_consts["BVT"], CT=CT, PREC=prec, num_warps=launch["split_kt_warps"] or 4)
        vk_consts["YK_GIVEN"] = True
    _launch_within_shared_memory(_local_vk_kernel, (NT, HV), vk_args, vk_consts, launch["split_vk_stages"])
    del vk_args, Vn, dVn, X, states, dstates
    BKT = launch["split_k_bk"] or (min(BK, 64) if interp else 16)
    n_work = NT * HV * triton.cdiv(K, BKT)
    R = (e(TT, HV, K), e(TT, HV, K), e(TT, HV, K))  # the decay-weighted sums, [T, HV, K]
    BKS = launch["sums_bk"] or min(BK, 32)
    if BKS > 32:
        raise ValueError(f"LAUNCH['sums_bk'] must be at most 32, got {BKS}")
    n_work_s = NT * HV * triton.cdiv(K, BKS)
    g_acc = _gates_for_blocks(g, acc)
    # one launch for the anchored form only: the element-wise one spills 12-24 KB there on 2 warps (ptxas, sm_90)
    one_launch = bool(launch["sums_one_launch"]) and _anchors(launch)
    n_prog_s = n_programs(n_work_s * (CT // 16 if one_launch else 1), dev, interp)  # persistent programs
    # the fall-back of the blocks past the anchored range in a pass of its own (LAUNCH["sums_steps_pass"])
    nested = _nested(launch, strong_gates)
    steps_pass = (bool(launch["sums_steps_pass"]) and one_launch and not one_anchor(launch, gate_bound)
                  and not nested)
    flags = torch.empty(n_work_s * (CT // 16), dtype=torch.int8, device=dev) if steps_pass else R[0]
    # each diagonal block's imbalance, taken out of dG by the local_k kernel (LAUNCH["diag_balance"])
    balance = _balance(launch, gate_bound)
    bal = e(NT, HV, CT // 16, K) if balance else R[0]
    for bi in range(1 if one_launch else CT // 16):
        _local_sums_kernel[(n_prog_s,)](
            q, k, g_acc, M1, M2, *R, rq, rk, cu, chunk_indices, flags, n_work_s, bal,
            H=H, HV=HV, K=K, BKS=BKS, CT=CT, BI=bi, PREC=prec, ANCHORS=_anchors(launch), NORM=norms is not None,
            DPREC=_precision(acc, sums_diag_precision(launch, nested), interp), ONE_ANCHOR=one_anchor(launch, gate_bound),
            ALL_BLOCKS=one_launch, STEPS=not steps_pass, NESTED=nested, BALANCE=balance,
            num_warps=launch["sums_warps"] or (2 if one_launch else 4),
            **register_cap(launch["sums_maxnreg"], default_cap("sums_maxnreg", acc, _anchors(launch))))
    if steps_pass:
        _diag_steps_kernel[(n_prog_s,)](
            q, k, g_acc, M1, M2, *R, rq, rk, cu, chunk_indices, flags, n_work_s, H=H, HV=HV, K=K, BKS=BKS, CT=CT,
            NORM=norms is not None, UNROLL=launch["sums_steps_unroll"] or 1,
            num_warps=launch["sums_steps_warps"] or 4)
    del flags
    del g_acc, M1, M2
    # with norms, dq and dk are for the normalised q and k, whose chain rule (kernels/option_grads.py) wants them
    # unrounded
    dq, dk = (torch.empty(TT, HV, K, dtype=final(x) if HV == H and norms is None else acc, device=dev)
              for x in (q, k))
    dg = e(TT, HV, K)
    _local_k_kernel[(n_work,)](
        q, k, g, beta, Yk, d1, dQt, dKt, dgamma, dq, dk, dg, *R, rq, rk, cu, chunk_indices, scale, bal,
        H=H, HV=HV, K=K, BKT=BKT, CT=CT, NORM=norms is not None, INTERPRET=interp, BALANCE=balance,
        num_warps=launch["split_k_warps"] or 8, **register_cap(launch["split_k_maxnreg"]))
    return dq, dk, dv, dg, dbeta
