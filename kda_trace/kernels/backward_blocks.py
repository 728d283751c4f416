"""Triton helpers of the backward: a chunk's span in a packed batch (both modes, kernels/backward.py and
kernels/backward_chunked.py), and the decay-weighted [64, 64] pair matrices and row / column sums of the
chunked mode's matrix form, by 16-row blocks. The formulas: tests/kernels/chunk_backward_matrix.py.

Off the diagonal, a block is a tensor-core product with the decay split at the first row a of the row block,
x e(G_i - G_a) times y e(G_a - G_j): both exp arguments <= 0, each G difference summed from the gates
(`_within`, `_to_anchor`), never the difference of two cumulative sums from the chunk start (those reach
64 |g|). The anchored forms at the end (`_pair_rows_anchored`, `_sums_block_anchored`, the default: LAUNCH["diag_blocks"])
take a diagonal block as tensor-core products too, at two anchors per block like the forward's intra kernel, and
fall back where a block's gates pass MAX_EXP (with fla's layer initialisation, A up to 16 and the unbounded gate,
about three quarters of the blocks pass it): in the pairs to nested anchors (`_nested_level`, every factor <= 1), in
the sums to running products of the gates' exps (`_diag_sums_by_steps`); or the sums take every diagonal block at
nested anchors (`_diag_sums_nested`, LAUNCH["diag_blocks"]). Otherwise a diagonal block (`_pair_rows`'
`_diag_pairs`, and the diagonal parts of `_row_sums_block` and `_col_sums_block`) is element-wise, e(G_i - G_j) per pair and column, computed at once as one [16, 16, BKC]
product per K-chunk of BKC = 32 columns (`_diag_decay`; not 16 serial steps of one column or row each),
with G_i - G_j = c_i - c_j, c the cumulative gates from the block's first row (`_within`), the argument
clamped to <= 0 (pairs i < j, whose entries are dropped or multiplied by M's zeros, and rounding). Accuracy
of that difference: c_i sums at most 15 gates, all <= 0, so fp32 rounds it to within about 15 u |c_i|
(u = 2^-24; a parallel scan's bound is smaller), and the absolute error of c_i - c_j is the relative error of
e(c_i - c_j). Under the tests' strongest gates (g down to -8 per step, |c| <= 120) that is at most about 1e-4
(typically some 1e-5, roundings of random sign), and only where c_j is large and c_i - c_j is not; pairs far
apart weigh e(c_i - c_j) ~ 0. The chunked mode's products are tf32 (operands rounded to 2^-11 = 5e-4, target
about 1e-3), far above it. Under the interpreter's fp32 products the chunked mode's strong-gate test stays at
most 3e-7 RMS-relative per gradient (7e-7 on dg with gates down to -20; bar 1e-5); float64 (u = 1.1e-16) stays
near 1e-15 (bar 1e-12). A one-kernel matrix local kernel with these helpers reached 2.8e-6 on dg under gates down
to -40 (|c| up to 600; bar 1e-5)."""

from __future__ import annotations

import triton
import triton.language as tl

from kda_trace.kernels.chunk import _bf16, _level_mask, _mma, _tf32_rn


@triton.jit
def _chunk_span(cu_seqlens, chunk_indices, i_c, CT: tl.constexpr):
    """Chunk i_c (global index): (its sequence, its index in the sequence, its first row, its number of
    valid rows 1..CT, the sequence's end row), int64."""
    i_n = tl.load(chunk_indices + i_c * 2).to(tl.int64)
    i_t = tl.load(chunk_indices + i_c * 2 + 1).to(tl.int64)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    r0 = bos + i_t * CT
    return i_n, i_t, r0, tl.minimum(eos - r0, CT), eos


@triton.jit
def _xdot(a, b, PREC: tl.constexpr):
    """a @ b with fp32 accumulation: fp32 (float64) operands in PREC ("tf32", "tf32x3", "ieee"; "tf32_rn": tf32 with
    the operands rounded to nearest first, `_tf32_rn`), or with PREC "bf16"
    both rounded to bf16 first (tensor cores at twice tf32's rate, fla's and our forward's precision).
    "bf16_split_a": a as the sum of two bf16 terms (its rounding and the rest: a to about 2^-16 relative), b
    rounded to bf16, two bf16 products: about fp32 accuracy where b is bf16 already (a bf16 dO), at bf16 operand
    traffic. "*_interpreted": the same under the interpreter (common.py `dot_precision`), through kernels/chunk.py's
    `_bf16` and `_mma`, which round and multiply there the way the GPU does."""
    if PREC == "bf16":
        return _mma(_bf16(a, False), _bf16(b, False), False)
    elif PREC == "bf16_interpreted":
        return _mma(_bf16(a, True), _bf16(b, True), True)
    elif PREC == "bf16_split_a":
        return _split_a_dot(a, b, False)
    elif PREC == "bf16_split_a_interpreted":
        return _split_a_dot(a, b, True)
    elif PREC == "tf32_rn":
        return tl.dot(_tf32_rn(a), _tf32_rn(b), input_precision="tf32")
    else:
        return tl.dot(a, b, input_precision=PREC)


@triton.jit
def _split_a_dot(a, b, INTERPRET: tl.constexpr):
    """`_xdot`'s "bf16_split_a": (a_hi + a_lo) @ b16 as two bf16 products."""
    a_hi = _bf16(a, INTERPRET)
    b_16 = _bf16(b, INTERPRET)
    return _mma(a_hi, b_16, INTERPRET) + _mma(_bf16(a - a_hi.to(a.dtype), INTERPRET), b_16, INTERPRET)


@triton.jit
def _within(p_g, SG: tl.constexpr, n, bi, o_k, m_k):
    """[MB, BK]: sum_{a < t <= i} g_t for the rows i of block bi, a its first row (G_i - G_a). The gates: rows of
    stride SG at p_g, read as zero from row n on and outside m_k's columns (in every helper here)."""
    MB: tl.constexpr = 16
    rows = bi * MB + tl.arange(0, MB)
    o_b = tl.arange(0, MB)
    b_g = tl.load(p_g + rows[:, None] * SG + o_k[None, :], mask=(rows < n)[:, None] & m_k[None, :], other=0.0)
    return tl.cumsum(tl.where(o_b[:, None] == 0, 0.0, b_g), axis=0)


@triton.jit
def _to_anchor(p_g, SG: tl.constexpr, n, bj, bi, o_k, m_k):
    """[MB, BK]: sum_{j < t <= a} g_t for the rows j of block bj < bi, a the first row of block bi
    (G_a - G_j): the rest of block bj after j, the blocks between, and g_a."""
    MB: tl.constexpr = 16
    o_b = tl.arange(0, MB)
    rows = bj * MB + o_b
    b_next = tl.load(p_g + (rows + 1)[:, None] * SG + o_k[None, :],
                     mask=((o_b < MB - 1) & (rows + 1 < n))[:, None] & m_k[None, :], other=0.0)
    b_span = tl.load(p_g + (bi * MB) * SG + o_k, mask=m_k & (o_k * 0 + bi * MB < n), other=0.0)
    for bm in tl.static_range(bj + 1, bi):
        r_m = bm * MB + o_b
        b_span += tl.sum(tl.load(p_g + r_m[:, None] * SG + o_k[None, :], mask=(r_m < n)[:, None] & m_k[None, :],
                                 other=0.0), axis=0)
    return tl.cumsum(b_next, axis=0, reverse=True) + b_span[None, :]


@triton.jit
def _diag_decay(p_g, SG: tl.constexpr, n, bi, o_c, m_c):
    """[MB, MB, BKC]: e(c_i - c_j) for the rows i, j of block bi and the columns o_c (BKC of them), c the
    within-block cumulative gates (`_within`); the argument clamped to <= 0 (rows i < j, whose entries the
    callers zero or multiply by zero, and rounding)."""
    b_c = _within(p_g, SG, n, bi, o_c, m_c)
    return tl.exp(tl.minimum(b_c[:, None, :] - b_c[None, :, :], 0.0))


@triton.jit
def _nested_level(c, S: tl.constexpr):
    """Level S (8, 4, 2 or 1) of a diagonal block at nested anchors: the block's 16 rows in groups of 2 S, each split
    at its anchor a, the group's row S. The pairs (i, j) with i in a group's second half and j in its first weigh
    e(c_i - c_j) = e(c_i - c_a) e(c_a - c_j), both factors <= 1 whatever the gates (c: the within-block cumulative
    gates [16, BK], `_within`, not increasing down the rows). Every pair i > j is at exactly one level, that of the
    highest bit in which i and j differ, so four levels and the diagonal (weight 1) make the block: four tensor-core
    products per sum instead of the two anchors' two, and nothing can overflow. Returns (row factors, column
    factors) [16, BK]: e(-|c_r - c_a|) on the groups' second halves, resp. their first halves, zero elsewhere;
    `_level_mask` keeps each group's own pairs."""
    o = tl.arange(0, 16)
    a = (o // (2 * S)) * (2 * S) + S
    e = tl.exp(-tl.abs(c - tl.gather(c, tl.broadcast_to(a[:, None], c.shape), axis=0)))
    upper = ((o % (2 * S)) >= S)[:, None]
    return tl.where(upper, e, 0.0), tl.where(upper, 0.0, e)


@triton.jit
def _diag_sums_nested(b_m1, b_m2, b_q, b_k, b_c, DPREC: tl.constexpr):
    """The diagonal block's part of `_sums_block_anchored`'s three sums ([16, BK] each) at nested anchors
    (`_nested_level`): b_m1, b_m2 the block of M1 and M2 [16, 16], b_q, b_k its rows, b_c its within-block
    cumulative gates. Products in DPREC."""
    o_b = tl.arange(0, 16)
    eye = o_b[:, None] == o_b[None, :]
    d1 = tl.sum(tl.where(eye, b_m1, 0.0), axis=1)[:, None]
    d2 = tl.sum(tl.where(eye, b_m2, 0.0), axis=1)[:, None]
    b_r1 = d1 * b_k
    b_r2 = d2 * b_k
    b_r3 = d1 * b_q + d2 * b_k
    for lv in tl.static_range(4):
        e_r, e_c = _nested_level(b_c, 8 >> lv)
        in_level = _level_mask(8 >> lv)
        b_l1 = tl.where(in_level, b_m1, 0.0)
        b_l2 = tl.where(in_level, b_m2, 0.0)
        b_kc = b_k * e_c
        b_r1 += e_r * _xdot(b_l1, b_kc, DPREC)
        b_r2 += e_r * _xdot(b_l2, b_kc, DPREC)
        b_r3 += e_c * (_xdot(tl.trans(b_l1), b_q * e_r, DPREC) + _xdot(tl.trans(b_l2), b_k * e_r, DPREC))
    return b_r1, b_r2, b_r3


@triton.jit
def _diag_pairs_nested(p_q, p_k, SX: tl.constexpr, p_g, SG: tl.constexpr, bi: tl.constexpr, n, K: tl.constexpr,
                       BK: tl.constexpr, DPREC: tl.constexpr):
    """The diagonal blocks [16, 16] of `_pair_rows_anchored`'s two pair matrices at nested anchors (`_nested_level`),
    by K-chunks of at most 64: k's rows with k's (the diagonal left out) and q's with k's (with it); the k-side
    factors shared. Products in DPREC."""
    MB: tl.constexpr = 16
    BKC: tl.constexpr = 64 if BK > 64 else BK
    ACC: tl.constexpr = p_g.dtype.element_ty
    o_b = tl.arange(0, MB)
    rows = bi * MB + o_b
    b_kk = tl.zeros([MB, MB], dtype=ACC)
    b_qk = tl.zeros([MB, MB], dtype=ACC)
    for k0 in range(0, BK, BKC):
        o_k = k0 + tl.arange(0, BKC)
        m_k = o_k < K
        m_r = (rows < n)[:, None] & m_k[None, :]
        b_k = tl.load(p_k + rows[:, None] * SX + o_k[None, :], mask=m_r, other=0.0).to(ACC)
        b_q = tl.load(p_q + rows[:, None] * SX + o_k[None, :], mask=m_r, other=0.0).to(ACC)
        b_c = _within(p_g, SG, n, bi, o_k, m_k)
        for lv in tl.static_range(4):
            e_r, e_c = _nested_level(b_c, 8 >> lv)
            b_kc = tl.trans(b_k * e_c)
            in_level = _level_mask(8 >> lv)
            b_kk += tl.where(in_level, _xdot(b_k * e_r, b_kc, DPREC), 0.0)
            b_qk += tl.where(in_level, _xdot(b_q * e_r, b_kc, DPREC), 0.0)
        b_qk += tl.where(o_b[:, None] == o_b[None, :], tl.sum(b_q * b_k, axis=1)[:, None], 0.0)
    return b_kk, b_qk


@triton.jit
def _diag_pairs(p_x, p_y, SX: tl.constexpr, p_g, SG: tl.constexpr, bi, n, nk, BK: tl.constexpr, BKC: tl.constexpr):
    """[MB, MB]: sum_d x_id y_jd e(c_id - c_jd) for the rows i, j of block bi (x, y masked to the n valid rows and
    nk valid columns), one [MB, MB, BKC] product per K-chunk of BKC columns; valid for j <= i."""
    MB: tl.constexpr = 16
    rows = bi * MB + tl.arange(0, MB)
    b_blk = tl.zeros([MB, MB], dtype=p_g.dtype.element_ty)
    for k0 in range(0, BK, BKC):
        o_c = k0 + tl.arange(0, BKC)
        off = rows[:, None] * SX + o_c[None, :]
        m = (rows < n)[:, None] & (o_c < nk)[None, :]
        b_x = tl.load(p_x + off, mask=m, other=0.0).to(p_g.dtype.element_ty)
        b_y = tl.load(p_y + off, mask=m, other=0.0).to(p_g.dtype.element_ty)
        b_blk += tl.sum(b_x[:, None, :] * b_y[None, :, :] * _diag_decay(p_g, SG, n, bi, o_c, o_c < nk), axis=2)
    return b_blk


@triton.jit
def _pair_rows(p_x, p_y, SX: tl.constexpr, p_g, SG: tl.constexpr, p_m, n, o_k, m_k, bi: tl.constexpr, BK: tl.constexpr,
               CT: tl.constexpr, INCL: tl.constexpr, PREC: tl.constexpr):
    """Row block bi (rows 16 bi .. 16 bi + 15) of M[i, j] = sum_d x_id y_jd e(G_id - G_jd) for j < i (j <= i with
    INCL), 0 elsewhere, into p_m [CT, CT]. x, y: rows of stride SX (masked to the n valid rows and m_k's
    columns); g: the gates, rows of stride SG at p_g. The diagonal block (`_diag_pairs`), the zero blocks
    right of it, then the tensor-core products left of it."""
    MB: tl.constexpr = 16
    BKC: tl.constexpr = 32 if BK > 32 else BK
    o_b = tl.arange(0, MB)
    nk = tl.sum(m_k.to(tl.int32), axis=0)  # the valid columns (K)
    rows = bi * MB + o_b
    b_blk = _diag_pairs(p_x, p_y, SX, p_g, SG, bi, n, nk, BK, BKC)
    if INCL:
        b_blk = tl.where(o_b[None, :] <= o_b[:, None], b_blk, 0.0)
    else:
        b_blk = tl.where(o_b[None, :] < o_b[:, None], b_blk, 0.0)
    tl.store(p_m + rows[:, None] * CT + rows[None, :], b_blk)
    for bj in tl.static_range(bi + 1, CT // MB):
        tl.store(p_m + rows[:, None] * CT + (bj * MB + o_b)[None, :], tl.zeros([MB, MB], dtype=b_blk.dtype))
    if bi > 0:
        # the blocks left of the diagonal: x e(G_i - G_a) times y e(G_a - G_j) on tensor cores, a the block's first row
        m_r = (rows < n)[:, None] & m_k[None, :]
        b_x = tl.load(p_x + rows[:, None] * SX + o_k[None, :], mask=m_r, other=0.0).to(p_g.dtype.element_ty)
        b_xa = b_x * tl.exp(_within(p_g, SG, n, bi, o_k, m_k))
        for bj in tl.static_range(bi):
            cols = bj * MB + o_b
            m_c = (cols < n)[:, None] & m_k[None, :]
            b_y = tl.load(p_y + cols[:, None] * SX + o_k[None, :], mask=m_c, other=0.0).to(p_g.dtype.element_ty)
            b_yb = b_y * tl.exp(_to_anchor(p_g, SG, n, bj, bi, o_k, m_k))
            tl.store(p_m + rows[:, None] * CT + cols[None, :], _xdot(b_xa, tl.trans(b_yb), PREC))


@triton.jit
def _row_sums_block(p_m, p_y, SY: tl.constexpr, p_g, SG: tl.constexpr, n, o_k, m_k, bi: tl.constexpr, BK: tl.constexpr,
                    CT: tl.constexpr, PREC: tl.constexpr):
    """[MB, BK], in registers: the rows of block bi of out[i] = sum_{j <= i} M[i, j] y_j e(G_i - G_j) (M [CT, CT]
    at p_m, zero above the diagonal), for BK <= 32 columns (the diagonal block as one [MB, MB, BK] product)."""
    MB: tl.constexpr = 16
    o_b = tl.arange(0, MB)
    rows = bi * MB + o_b
    b_md = tl.load(p_m + rows[:, None] * CT + rows[None, :])
    b_y = tl.load(p_y + rows[:, None] * SY + o_k[None, :], mask=(rows < n)[:, None] & m_k[None, :],
                  other=0.0).to(p_g.dtype.element_ty)
    b_out = tl.sum(b_md[:, :, None] * b_y[None, :, :] * _diag_decay(p_g, SG, n, bi, o_k, m_k), axis=1)
    if bi > 0:
        b_acc = tl.zeros([MB, BK], dtype=p_g.dtype.element_ty)
        for bj in tl.static_range(bi):
            cols = bj * MB + o_b
            b_yj = tl.load(p_y + cols[:, None] * SY + o_k[None, :], mask=(cols < n)[:, None] & m_k[None, :],
                           other=0.0).to(p_g.dtype.element_ty)
            b_m = tl.load(p_m + rows[:, None] * CT + cols[None, :])
            b_acc += _xdot(b_m, b_yj * tl.exp(_to_anchor(p_g, SG, n, bj, bi, o_k, m_k)), PREC)
        b_out += b_acc * tl.exp(_within(p_g, SG, n, bi, o_k, m_k))
    return b_out


@triton.jit
def _col_sums_block(p_m, p_x, SX: tl.constexpr, p_g, SG: tl.constexpr, n, o_k, m_k, bj: tl.constexpr, BK: tl.constexpr,
                    CT: tl.constexpr, PREC: tl.constexpr):
    """[MB, BK], in registers: the rows of block bj of out[j] = sum_{i >= j} M[i, j] x_i e(G_i - G_j) (M [CT, CT]
    at p_m, zero above the diagonal), for BK <= 32 columns (the diagonal block as one [MB, MB, BK] product)."""
    MB: tl.constexpr = 16
    NB: tl.constexpr = CT // MB
    o_b = tl.arange(0, MB)
    cols = bj * MB + o_b
    b_md = tl.load(p_m + cols[:, None] * CT + cols[None, :])
    b_x = tl.load(p_x + cols[:, None] * SX + o_k[None, :], mask=(cols < n)[:, None] & m_k[None, :],
                  other=0.0).to(p_g.dtype.element_ty)
    b_out = tl.sum(b_md[:, :, None] * b_x[:, None, :] * _diag_decay(p_g, SG, n, bj, o_k, m_k), axis=0)
    for bi in tl.static_range(bj + 1, NB):
        rows = bi * MB + o_b
        b_xi = tl.load(p_x + rows[:, None] * SX + o_k[None, :], mask=(rows < n)[:, None] & m_k[None, :],
                       other=0.0).to(p_g.dtype.element_ty)
        b_m = tl.load(p_m + rows[:, None] * CT + cols[None, :])
        b_out += (_xdot(tl.trans(b_m), b_xi * tl.exp(_within(p_g, SG, n, bi, o_k, m_k)), PREC)
                  * tl.exp(_to_anchor(p_g, SG, n, bj, bi, o_k, m_k)))
    return b_out


# ----------------------------------------------------------------------------------------------------
# The diagonal blocks on tensor cores (LAUNCH["diag_blocks"]): two anchors per block, or nested anchors
# ----------------------------------------------------------------------------------------------------
MAX_EXP = tl.constexpr(60.0)  # the largest positive exp argument of an anchored factor (kernels/chunk.py's MAX_EXP)


@triton.jit
def _anchor_factors(c, MAX_EXP: tl.constexpr):
    """The decays e(c_i - c_j) (j <= i) of a diagonal block split at two anchors, as kernels/chunk.py's intra
    kernel does: the first row of the block (a = 0) serves the columns j < 8, row 8 the columns j >= 8 (then i >= 8
    too). c: the within-block cumulative gates [MB, BK] (`_within`). Returns the row and column factors of each
    anchor, e(c_i) and e(-c_j) [j < 8], e(c_i - c_8) [i >= 8] and e(c_8 - c_j) [j >= 8] (zero outside the
    brackets), and the block's range: the largest positive argument, max(-c_7, c_8 - c_15) over the columns.
    Where the range passes MAX_EXP the column factors are clamped and wrong: the callers then use their
    fall-backs (`_diag_pairs_nested`, `_diag_sums_by_steps`). The row factors are <= 1; where they underflow,
    the true weight is below e(c_i + MAX_EXP) <= e(-27) of the row's own diagonal term."""
    MB: tl.constexpr = 16
    o_b = tl.arange(0, MB)
    lower = (o_b < MB // 2)[:, None]
    c7 = tl.sum(tl.where(o_b[:, None] == MB // 2 - 1, c, 0.0), axis=0)
    c8 = tl.sum(tl.where(o_b[:, None] == MB // 2, c, 0.0), axis=0)
    c15 = tl.sum(tl.where(o_b[:, None] == MB - 1, c, 0.0), axis=0)
    d = c - c8[None, :]
    e_rl = tl.exp(tl.minimum(c, 0.0))
    e_cl = tl.where(lower, tl.exp(tl.minimum(-c, MAX_EXP)), 0.0)
    e_rh = tl.where(lower, 0.0, tl.exp(tl.minimum(d, 0.0)))
    e_ch = tl.where(lower, 0.0, tl.exp(tl.minimum(-d, MAX_EXP)))
    spread = tl.max(tl.maximum(-c7, c8 - c15), axis=0)
    return e_rl, e_cl, e_rh, e_ch, spread


@triton.jit
def _norm_rows(x, p_r, rows, m, SR: tl.constexpr, NORM: tl.constexpr):
    """x ([R, BK] rows of q or k) times the rows' L2-norm factors at p_r + rows * SR with NORM (kernels/backward.py
    `kda_backward(qk_norms=...)`: the raw rows and their factors in place of fp32 normalised copies), else x."""
    if NORM:
        x = x * tl.load(p_r + rows * SR, mask=m, other=0.0)[:, None]
    return x


@triton.jit
def _earlier_rows(p_k, SX: tl.constexpr, p_g, SG: tl.constexpr, n, o_k, m_k, bi: tl.constexpr, BJ: tl.constexpr,
                  p_rk=None, SR: tl.constexpr = 1, NORM: tl.constexpr = False):
    """[BJ, BKC]: k_j e(G_a - G_j) for every row j before a = 16 bi (zero from row a on), G_a - G_j summed from the
    gates, sum_{j < t <= a} g_t (<= 0): `_to_anchor` for all the earlier blocks at once (k's norm factors at p_rk
    with NORM, `_norm_rows`)."""
    o_j = tl.arange(0, BJ)
    m_j = o_j < bi * 16
    m_r = (o_j < n) & m_j
    b_gn = tl.load(p_g + (o_j + 1)[:, None] * SG + o_k[None, :],
                   mask=((o_j + 1 <= bi * 16) & (o_j + 1 < n))[:, None] & m_k[None, :], other=0.0)
    b_k = tl.load(p_k + o_j[:, None] * SX + o_k[None, :], mask=m_r[:, None] & m_k[None, :],
                  other=0.0).to(p_g.dtype.element_ty)
    return _norm_rows(b_k, p_rk, o_j, m_r, SR, NORM) * tl.exp(tl.cumsum(b_gn, axis=0, reverse=True))


@triton.jit
def _pair_rows_anchored(p_q, p_k, SX: tl.constexpr, p_g, SG: tl.constexpr, p_p, p_a, n, K: tl.constexpr,
                        bi: tl.constexpr, BK: tl.constexpr, CT: tl.constexpr, PREC: tl.constexpr, DPREC: tl.constexpr,
                        MAX_EXP: tl.constexpr):
    """Row block bi of both pair matrices of the prep, as two `_pair_rows` calls give them (P = pairs of k with k,
    strict, into p_p; A_qk / scale = q with k, diagonal included, into p_a), by K-chunks of at most 64 columns:
    the diagonal block as tensor-core products at two anchors (`_anchor_factors`; at nested anchors by
    `_diag_pairs_nested` where the block's range passes MAX_EXP), the columns before it as one product with every earlier row (like
    kernels/chunk.py's intra kernel; k_j e(G_a - G_j), the argument summed from the gates), the k-side factors
    shared by the two matrices. K: the valid columns of the BK. Products in PREC, the diagonal block's in DPREC."""
    MB: tl.constexpr = 16
    BKC: tl.constexpr = 64 if BK > 64 else BK
    BJ: tl.constexpr = 64 if bi == 3 else (32 if bi == 2 else 16)  # the earlier rows j < 16 bi, padded
    ACC: tl.constexpr = p_g.dtype.element_ty
    o_b = tl.arange(0, MB)
    rows = bi * MB + o_b
    o_j = tl.arange(0, BJ)
    m_j = o_j < bi * MB
    kk_lo = tl.zeros([MB, MB], dtype=ACC)  # columns 0-7 of the diagonal block (anchor: its row 0)
    kk_hi = tl.zeros([MB, MB], dtype=ACC)  # columns 8-15 (anchor: its row 8)
    qk_lo = tl.zeros([MB, MB], dtype=ACC)
    qk_hi = tl.zeros([MB, MB], dtype=ACC)
    off_k = tl.zeros([MB, BJ], dtype=ACC)  # the columns before the block
    off_q = tl.zeros([MB, BJ], dtype=ACC)
    spread = tl.zeros([], dtype=ACC)
    for k0 in range(0, BK, BKC):
        o_k = k0 + tl.arange(0, BKC)
        m_k = o_k < K
        m_r = (rows < n)[:, None] & m_k[None, :]
        b_k = tl.load(p_k + rows[:, None] * SX + o_k[None, :], mask=m_r, other=0.0).to(ACC)
        b_q = tl.load(p_q + rows[:, None] * SX + o_k[None, :], mask=m_r, other=0.0).to(ACC)
        e_rl, e_cl, e_rh, e_ch, s = _anchor_factors(_within(p_g, SG, n, bi, o_k, m_k), MAX_EXP)
        spread = tl.maximum(spread, s)
        b_kl = b_k * e_cl
        b_kh = b_k * e_ch
        b_krl = b_k * e_rl
        b_qrl = b_q * e_rl
        kk_lo += _xdot(b_krl, tl.trans(b_kl), DPREC)
        qk_lo += _xdot(b_qrl, tl.trans(b_kl), DPREC)
        kk_hi += _xdot(b_k * e_rh, tl.trans(b_kh), DPREC)
        qk_hi += _xdot(b_q * e_rh, tl.trans(b_kh), DPREC)
        if bi > 0:
            b_ya = _earlier_rows(p_k, SX, p_g, SG, n, o_k, m_k, bi, BJ)
            off_k += _xdot(b_krl, tl.trans(b_ya), PREC)
            off_q += _xdot(b_qrl, tl.trans(b_ya), PREC)
    right = (o_b >= MB // 2)[None, :]
    b_kk = tl.where(right, kk_hi, kk_lo)
    b_qk = tl.where(right, qk_hi, qk_lo)
    if spread > MAX_EXP:  # the fall-back: the block again at nested anchors
        b_kk, b_qk = _diag_pairs_nested(p_q, p_k, SX, p_g, SG, bi, n, K, BK, DPREC)
    tl.store(p_p + rows[:, None] * CT + rows[None, :], tl.where(o_b[None, :] < o_b[:, None], b_kk, 0.0))
    tl.store(p_a + rows[:, None] * CT + rows[None, :], tl.where(o_b[None, :] <= o_b[:, None], b_qk, 0.0))
    for bj in tl.static_range(bi + 1, CT // MB):
        cols = bj * MB + o_b
        tl.store(p_p + rows[:, None] * CT + cols[None, :], tl.zeros([MB, MB], dtype=ACC))
        tl.store(p_a + rows[:, None] * CT + cols[None, :], tl.zeros([MB, MB], dtype=ACC))
    if bi > 0:
        tl.store(p_p + rows[:, None] * CT + o_j[None, :], off_k, mask=m_j[None, :])
        tl.store(p_a + rows[:, None] * CT + o_j[None, :], off_q, mask=m_j[None, :])


@triton.jit
def _diag_sums_by_steps(p_m1, p_m2, p_q, p_k, SX: tl.constexpr, p_g, SG: tl.constexpr, n, o_k, m_k, bi: tl.constexpr,
                        BK: tl.constexpr, CT: tl.constexpr, p_rq=None, p_rk=None, SR: tl.constexpr = 1,
                        NORM: tl.constexpr = False, UNROLL: tl.constexpr = 1):
    """The diagonal block's part of `_sums_block_anchored`'s three sums ([MB, BK] each) for a block whose gates pass
    the anchored products' range: one pair index t at a time, the decays kept as running products of the gates'
    exps. Rows (t from the block's last row down): W[i] = e(c_i - c_t) = W[i] e(g_{t+1}) for i > t, W[t] = 1, and
    r1[i] += M1[i, t] k_t W[i], r2 likewise with M2. Columns (t from the first row up): V[j] = e(c_t - c_j) =
    V[j] e(g_t) for j < t, V[t] = 1, and r3[j] += (M1[t, j] q_t + M2[t, j] k_t) V[j]. Every factor is <= 1, so
    nothing overflows whatever the range (a product that underflows is below the smallest float's weight), one
    exp per gate and channel instead of one per pair and channel, and no difference of two cumulative sums: each
    decay is a product of at most 15 rounded exps (~1e-6 relative in fp32). Entries of W and V on the other side of
    the diagonal are 0 (M is zero there). Rows and columns in two loops, fewer tiles live at once: in the sums kernel
    under its cap of 128 registers (ptxas for sm_90, Triton 3.9) 528 / 800 bytes of spill stores / loads, against
    584 / 1048 in one loop and 516 / 720 with the former pair-by-pair exps (two [MB, BK] exps per pair index).
    UNROLL (a power of 2 up to 16): steps per loop iteration, unrolled (`tl.static_range`), so that their loads,
    which do not depend on the running products, can be issued ahead of the steps that wait for them; the same
    operations in the same order."""
    MB: tl.constexpr = 16
    ACC: tl.constexpr = p_g.dtype.element_ty
    o_b = tl.arange(0, MB)
    rows = bi * MB + o_b
    b_r1 = tl.zeros([MB, BK], dtype=ACC)
    b_r2 = tl.zeros([MB, BK], dtype=ACC)
    b_r3 = tl.zeros([MB, BK], dtype=ACC)
    b_w = tl.zeros([MB, BK], dtype=ACC)  # rows: e(c_i - c_t), i >= t
    for s0 in range(0, MB, UNROLL):
        for s1 in tl.static_range(UNROLL):
            t = MB - 1 - (s0 + s1)  # from the block's last row down
            b_w, b_r1, b_r2 = _rows_step(p_m1, p_m2, p_k, SX, p_g, SG, n, o_k, m_k, o_b, rows, bi * MB + t, t, CT,
                                         p_rk, SR, NORM, b_w, b_r1, b_r2)
    b_v = tl.zeros([MB, BK], dtype=ACC)  # columns: e(c_t - c_j), j <= t
    for t0 in range(0, MB, UNROLL):
        for t1 in tl.static_range(UNROLL):
            t = t0 + t1
            b_v, b_r3 = _cols_step(p_m1, p_m2, p_q, p_k, SX, p_g, SG, n, o_k, m_k, o_b, rows, bi * MB + t, t, CT,
                                   p_rq, p_rk, SR, NORM, b_v, b_r3)
    return b_r1, b_r2, b_r3


@triton.jit
def _rows_step(p_m1, p_m2, p_k, SX: tl.constexpr, p_g, SG: tl.constexpr, n, o_k, m_k, o_b, rows, r_t, t,
               CT: tl.constexpr, p_rk, SR: tl.constexpr, NORM: tl.constexpr, b_w, b_r1, b_r2):
    """One pair index t of `_diag_sums_by_steps`'s rows (r_t: its row in the chunk)."""
    MB: tl.constexpr = 16
    ACC: tl.constexpr = p_g.dtype.element_ty
    # the gate of row t + 1 (none past the block or the sequence: factor 1, W still 0 there)
    e_w = tl.exp(tl.load(p_g + (r_t + 1) * SG + o_k, mask=m_k & (o_k * 0 + t + 1 < MB) & (o_k * 0 + r_t + 1 < n),
                         other=0.0))
    b_w = tl.where(o_b[:, None] == t, 1.0, b_w * e_w[None, :])
    k_t = tl.load(p_k + r_t * SX + o_k, mask=m_k & (o_k * 0 + r_t < n), other=0.0).to(ACC)
    if NORM:
        k_t = k_t * tl.load(p_rk + r_t * SR, mask=r_t < n, other=0.0)
    b_kw = k_t[None, :] * b_w
    b_r1 += tl.load(p_m1 + rows * CT + r_t)[:, None] * b_kw
    b_r2 += tl.load(p_m2 + rows * CT + r_t)[:, None] * b_kw
    return b_w, b_r1, b_r2


@triton.jit
def _cols_step(p_m1, p_m2, p_q, p_k, SX: tl.constexpr, p_g, SG: tl.constexpr, n, o_k, m_k, o_b, rows, r_t, t,
               CT: tl.constexpr, p_rq, p_rk, SR: tl.constexpr, NORM: tl.constexpr, b_v, b_r3):
    """One pair index t of `_diag_sums_by_steps`'s columns (r_t: its row in the chunk)."""
    ACC: tl.constexpr = p_g.dtype.element_ty
    m_t = m_k & (o_k * 0 + r_t < n)
    # the gate of row t itself (row 0's is not in c)
    e_v = tl.exp(tl.load(p_g + r_t * SG + o_k, mask=m_t & (o_k * 0 + t > 0), other=0.0))
    b_v = tl.where(o_b[:, None] == t, 1.0, b_v * e_v[None, :])
    q_t = tl.load(p_q + r_t * SX + o_k, mask=m_t, other=0.0).to(ACC)
    k_t = tl.load(p_k + r_t * SX + o_k, mask=m_t, other=0.0).to(ACC)
    if NORM:
        q_t = q_t * tl.load(p_rq + r_t * SR, mask=r_t < n, other=0.0)
        k_t = k_t * tl.load(p_rk + r_t * SR, mask=r_t < n, other=0.0)
    b_r3 += (tl.load(p_m1 + r_t * CT + rows)[:, None] * q_t[None, :]
             + tl.load(p_m2 + r_t * CT + rows)[:, None] * k_t[None, :]) * b_v
    return b_v, b_r3


@triton.jit
def _sums_block_anchored(p_m1, p_m2, p_q, p_k, SX: tl.constexpr, p_g, SG: tl.constexpr, n, o_k, m_k, bi: tl.constexpr,
                         BK: tl.constexpr, CT: tl.constexpr, PREC: tl.constexpr, DPREC: tl.constexpr,
                         MAX_EXP: tl.constexpr, ONE_ANCHOR: tl.constexpr = False, p_rq=None, p_rk=None,
                         SR: tl.constexpr = 1, NORM: tl.constexpr = False, STEPS: tl.constexpr = True,
                         NESTED: tl.constexpr = False, BALANCE: tl.constexpr = False):
    """Rows of block bi of the local kernel's three decay-weighted sums, in registers ([MB, BK] each, BK <= 32):
    r1 = `_row_sums_block`(M1, k), r2 = `_row_sums_block`(M2, k), r3 = `_col_sums_block`(M1, q) +
    `_col_sums_block`(M2, k), with the diagonal blocks as tensor-core products at two anchors
    (`_anchor_factors`; `_diag_sums_by_steps` where the block's range passes MAX_EXP), the columns before the
    block (rows) and the rows after it (columns) each as one product with the anchor between them, and the
    factors each side shares computed once. Products in PREC, the diagonal block's in DPREC.
    ONE_ANCHOR (the caller knows every gate >= -MAX_EXP / 8, as a safe gate's lower bound of -5 gives): the
    diagonal block at one anchor, its row 8, as fla's safe-gate path does: every |c_i - c_8| <= 8 |g| <= MAX_EXP,
    so half the products, no range check and no fall-back compiled in. NORM: q's and k's rows times their
    L2-norm factors at p_rq, p_rk (row stride SR; `_norm_rows`). Not STEPS: no fall-back compiled in either; a
    block past the range gets no diagonal part (`_diag_steps_kernel` adds it). NESTED (and not ONE_ANCHOR): the
    diagonal block at nested anchors (`_diag_sums_nested`: any gate, no range check, no fall-back). Returns the three
    sums, whether the block passed the range (False at one anchor or nested) and, with BALANCE, the diagonal block's
    imbalance [BK]: sum over its rows of q r1 + k (r2 - r3), its part of dG (`_local_k_kernel`), which is exactly
    zero (each pair (i, j) gives +x to row i and -x to row j), so what the products' rounding leaves there is
    error; through dG's reverse cumulative sum it would reach every earlier row of the chunk (and, summed over
    tokens, dA_log and dt_bias), so `_local_k_kernel` takes it back out at the block's first row (else 0.0)."""
    MB: tl.constexpr = 16
    NB: tl.constexpr = CT // MB
    ACC: tl.constexpr = p_g.dtype.element_ty
    o_b = tl.arange(0, MB)
    rows = bi * MB + o_b
    m_n = rows < n
    m_r = m_n[:, None] & m_k[None, :]
    b_k = _norm_rows(tl.load(p_k + rows[:, None] * SX + o_k[None, :], mask=m_r, other=0.0).to(ACC), p_rk, rows, m_n,
                     SR, NORM)
    b_q = _norm_rows(tl.load(p_q + rows[:, None] * SX + o_k[None, :], mask=m_r, other=0.0).to(ACC), p_rq, rows, m_n,
                     SR, NORM)
    b_m1 = tl.load(p_m1 + rows[:, None] * CT + rows[None, :])
    b_m2 = tl.load(p_m2 + rows[:, None] * CT + rows[None, :])
    b_t1 = tl.trans(b_m1)
    b_t2 = tl.trans(b_m2)
    if ONE_ANCHOR:
        b_c = _within(p_g, SG, n, bi, o_k, m_k)
        e_rl = tl.exp(tl.minimum(b_c, 0.0))  # the off-diagonal products' row factor, e(c_i - c_0)
        c8 = tl.sum(tl.where(o_b[:, None] == MB // 2, b_c, 0.0), axis=0)
        d = b_c - c8[None, :]
        e_r = tl.exp(tl.minimum(d, MAX_EXP))  # clamped only against a broken promise (no inf): never reached
        e_c = tl.exp(tl.minimum(-d, MAX_EXP))
        b_kc = b_k * e_c
        b_r1 = e_r * _xdot(b_m1, b_kc, DPREC)
        b_r2 = e_r * _xdot(b_m2, b_kc, DPREC)
        b_r3 = e_c * (_xdot(b_t1, b_q * e_r, DPREC) + _xdot(b_t2, b_k * e_r, DPREC))
        past = False
    elif NESTED:
        b_c = _within(p_g, SG, n, bi, o_k, m_k)
        e_rl = tl.exp(tl.minimum(b_c, 0.0))
        b_r1, b_r2, b_r3 = _diag_sums_nested(b_m1, b_m2, b_q, b_k, b_c, DPREC)
        past = False
    else:
        e_rl, e_cl, e_rh, e_ch, spread = _anchor_factors(_within(p_g, SG, n, bi, o_k, m_k), MAX_EXP)
        # rows: sum_j M[i, j] k_j e(c_i - c_j); columns: sum_i M[i, j] x_i e(c_i - c_j)
        b_kl = b_k * e_cl
        b_kh = b_k * e_ch
        b_r1 = e_rl * _xdot(b_m1, b_kl, DPREC) + e_rh * _xdot(b_m1, b_kh, DPREC)
        b_r2 = e_rl * _xdot(b_m2, b_kl, DPREC) + e_rh * _xdot(b_m2, b_kh, DPREC)
        b_r3 = (e_cl * (_xdot(b_t1, b_q * e_rl, DPREC) + _xdot(b_t2, b_k * e_rl, DPREC))
                + e_ch * (_xdot(b_t1, b_q * e_rh, DPREC) + _xdot(b_t2, b_k * e_rh, DPREC)))
        past = spread > MAX_EXP
        if STEPS:
            if past:  # the anchored products above are then thrown away
                b_r1, b_r2, b_r3 = _diag_sums_by_steps(p_m1, p_m2, p_q, p_k, SX, p_g, SG, n, o_k, m_k, bi, BK, CT,
                                                       p_rq, p_rk, SR, NORM)
        else:
            b_r1 = tl.where(past, 0.0, b_r1)
            b_r2 = tl.where(past, 0.0, b_r2)
            b_r3 = tl.where(past, 0.0, b_r3)
    bal = tl.sum(b_q * b_r1 + b_k * (b_r2 - b_r3), axis=0) if BALANCE else 0.0
    if bi > 0:
        # rows: every column j < a = 16 bi in one product (`_earlier_rows`)
        BJ: tl.constexpr = 64 if bi == 3 else (32 if bi == 2 else 16)
        o_j = tl.arange(0, BJ)
        m_j = o_j < bi * MB
        b_ya = _earlier_rows(p_k, SX, p_g, SG, n, o_k, m_k, bi, BJ, p_rk, SR, NORM)
        b_mj = rows[:, None] * CT + o_j[None, :]
        b_r1 += e_rl * _xdot(tl.load(p_m1 + b_mj, mask=m_j[None, :], other=0.0), b_ya, PREC)
        b_r2 += e_rl * _xdot(tl.load(p_m2 + b_mj, mask=m_j[None, :], other=0.0), b_ya, PREC)
    if bi < NB - 1:
        # columns: every row i >= b = 16 (bi + 1) in one product, x_i e(G_i - G_b) (G_i - G_b = sum_{b < t <= i}
        # g_t), times e(G_b - G_j) (= sum_{j < t <= b} g_t) for the block's own rows j
        BL: tl.constexpr = 64 if bi == 0 else (32 if bi == 1 else 16)
        b0: tl.constexpr = (bi + 1) * MB
        o_l = b0 + tl.arange(0, BL)
        m_l = o_l < CT
        b_gl = tl.load(p_g + o_l[:, None] * SG + o_k[None, :],
                       mask=(m_l & (o_l > b0) & (o_l < n))[:, None] & m_k[None, :], other=0.0)
        e_l = tl.exp(tl.cumsum(b_gl, axis=0))
        m_ln = (o_l < n) & m_l
        m_lk = m_ln[:, None] & m_k[None, :]
        b_xq = _norm_rows(tl.load(p_q + o_l[:, None] * SX + o_k[None, :], mask=m_lk, other=0.0).to(ACC), p_rq, o_l,
                          m_ln, SR, NORM) * e_l
        b_xk = _norm_rows(tl.load(p_k + o_l[:, None] * SX + o_k[None, :], mask=m_lk, other=0.0).to(ACC), p_rk, o_l,
                          m_ln, SR, NORM) * e_l
        b_ml = o_l[:, None] * CT + rows[None, :]
        b_s = (_xdot(tl.trans(tl.load(p_m1 + b_ml, mask=m_l[:, None], other=0.0)), b_xq, PREC)
               + _xdot(tl.trans(tl.load(p_m2 + b_ml, mask=m_l[:, None], other=0.0)), b_xk, PREC))
        b_gb = tl.load(p_g + (rows + 1)[:, None] * SG + o_k[None, :], mask=(rows + 1 < n)[:, None] & m_k[None, :],
                       other=0.0)
        b_r3 += b_s * tl.exp(tl.cumsum(b_gb, axis=0, reverse=True))
    return b_r1, b_r2, b_r3, past, bal
