"""Triton helpers shared by the backward's exact mode (kernels/backward.py) and its chunked mode
(kernels/backward_chunked.py): a chunk's span in a packed batch, and the decay-weighted [64, 64] pair matrices
and row / column sums of the matrix form, by 16-row blocks anchored at a block's first row (every exp argument
<= 0; every G difference summed from the gates). The formulas: tests/kernels/chunk_backward_matrix.py."""

from __future__ import annotations

import triton
import triton.language as tl


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
def _within(p_g, bi, o_k, BK: tl.constexpr):
    """[MB, BK]: sum_{a < t <= i} g_t for the rows i of block bi, a its first row (G_i - G_a)."""
    MB: tl.constexpr = 16
    o_b = tl.arange(0, MB)
    b_g = tl.load(p_g + (bi * MB + o_b)[:, None] * BK + o_k[None, :])
    return tl.cumsum(tl.where(o_b[:, None] == 0, 0.0, b_g), axis=0)


@triton.jit
def _to_anchor(p_g, bj, bi, o_k, BK: tl.constexpr):
    """[MB, BK]: sum_{j < t <= a} g_t for the rows j of block bj < bi, a the first row of block bi
    (G_a - G_j): the rest of block bj after j, the blocks between, and g_a."""
    MB: tl.constexpr = 16
    o_b = tl.arange(0, MB)
    rows = bj * MB + o_b
    b_next = tl.load(p_g + (rows + 1)[:, None] * BK + o_k[None, :], mask=(o_b < MB - 1)[:, None], other=0.0)
    b_span = tl.load(p_g + (bi * MB) * BK + o_k)
    for bm in tl.static_range(bj + 1, bi):
        b_span += tl.sum(tl.load(p_g + (bm * MB + o_b)[:, None] * BK + o_k[None, :]), axis=0)
    return tl.cumsum(b_next, axis=0, reverse=True) + b_span[None, :]


@triton.jit
def _pair_matrix(p_x, p_y, SX: tl.constexpr, p_g, p_m, n, o_k, m_k, BK: tl.constexpr, CT: tl.constexpr,
                 INCL: tl.constexpr, PREC: tl.constexpr):
    """M[i, j] = sum_d x_id y_jd e(G_id - G_jd) for j < i (j <= i with INCL), 0 elsewhere, into p_m [CT, CT].
    x, y: rows of stride SX (masked to the n valid rows); g: the gates [CT, BK] at p_g (zero past n)."""
    MB: tl.constexpr = 16
    o_b = tl.arange(0, MB)
    for bi in tl.static_range(CT // MB):
        rows = bi * MB + o_b
        m_r = (rows < n)[:, None] & m_k[None, :]
        b_x = tl.load(p_x + rows[:, None] * SX + o_k[None, :], mask=m_r, other=0.0).to(p_g.dtype.element_ty)
        b_gi = tl.load(p_g + rows[:, None] * BK + o_k[None, :])
        b_xa = b_x * tl.exp(_within(p_g, bi, o_k, BK))
        for bj in tl.static_range(CT // MB):
            cols = bj * MB + o_b
            if bj < bi:
                m_c = (cols < n)[:, None] & m_k[None, :]
                b_y = tl.load(p_y + cols[:, None] * SX + o_k[None, :], mask=m_c, other=0.0).to(p_g.dtype.element_ty)
                b_yb = b_y * tl.exp(_to_anchor(p_g, bj, bi, o_k, BK))
                b_blk = tl.dot(b_xa, tl.trans(b_yb), input_precision=PREC)
            elif bj == bi:
                b_blk = tl.zeros([MB, MB], dtype=b_xa.dtype)
                for jj in range(MB):
                    j = bi * MB + jj
                    b_yj = tl.load(p_y + j * SX + o_k, mask=m_k & (o_k * 0 + j < n), other=0.0).to(p_g.dtype.element_ty)
                    b_d = tl.cumsum(tl.where(o_b[:, None] > jj, b_gi, 0.0), axis=0)  # G_i - G_j, i >= j
                    b_col = tl.sum(b_x * b_yj[None, :] * tl.exp(b_d), axis=1)
                    b_blk = tl.where(o_b[None, :] == jj, b_col[:, None], b_blk)
                if INCL:
                    b_blk = tl.where(o_b[None, :] <= o_b[:, None], b_blk, 0.0)
                else:
                    b_blk = tl.where(o_b[None, :] < o_b[:, None], b_blk, 0.0)
            else:
                b_blk = tl.zeros([MB, MB], dtype=b_xa.dtype)
            tl.store(p_m + rows[:, None] * CT + cols[None, :], b_blk)


@triton.jit
def _row_sums(p_m, p_y, SY: tl.constexpr, p_g, p_out, n, o_k, m_k, BK: tl.constexpr, CT: tl.constexpr,
              PREC: tl.constexpr):
    """out[i] = sum_{j <= i} M[i, j] y_j e(G_i - G_j) ([CT, BK] at p_out), M [CT, CT] at p_m (zero above
    the diagonal)."""
    MB: tl.constexpr = 16
    o_b = tl.arange(0, MB)
    for bi in tl.static_range(CT // MB):
        rows = bi * MB + o_b
        b_gi = tl.load(p_g + rows[:, None] * BK + o_k[None, :])
        b_acc = tl.zeros([MB, BK], dtype=b_gi.dtype)
        for bj in tl.static_range(bi):
            cols = bj * MB + o_b
            b_y = tl.load(p_y + cols[:, None] * SY + o_k[None, :], mask=(cols < n)[:, None] & m_k[None, :],
                          other=0.0).to(p_g.dtype.element_ty)
            b_m = tl.load(p_m + rows[:, None] * CT + cols[None, :])
            b_acc += tl.dot(b_m, b_y * tl.exp(_to_anchor(p_g, bj, bi, o_k, BK)), input_precision=PREC)
        b_acc = b_acc * tl.exp(_within(p_g, bi, o_k, BK))
        for jj in range(MB):
            j = bi * MB + jj
            b_yj = tl.load(p_y + j * SY + o_k, mask=m_k & (o_k * 0 + j < n), other=0.0).to(p_g.dtype.element_ty)
            b_d = tl.cumsum(tl.where(o_b[:, None] > jj, b_gi, 0.0), axis=0)  # G_i - G_j for rows i >= j
            b_mc = tl.load(p_m + rows * CT + j)
            b_acc += b_mc[:, None] * b_yj[None, :] * tl.exp(b_d)
        tl.store(p_out + rows[:, None] * BK + o_k[None, :], b_acc)


@triton.jit
def _col_sums(p_m, p_x, SX: tl.constexpr, p_g, p_out, n, o_k, m_k, BK: tl.constexpr, CT: tl.constexpr,
              PREC: tl.constexpr):
    """out[j] += sum_{i >= j} M[i, j] x_i e(G_i - G_j) ([CT, BK] at p_out), M [CT, CT] at p_m (zero above
    the diagonal); the anchor of each product is the first row of its row block."""
    MB: tl.constexpr = 16
    o_b = tl.arange(0, MB)
    for bj in tl.static_range(CT // MB):
        cols = bj * MB + o_b
        b_acc = tl.load(p_out + cols[:, None] * BK + o_k[None, :])
        # the gates shifted up one row inside the block: the reverse cumsum of the first i - j of them is G_i - G_j
        b_next = tl.load(p_g + (cols + 1)[:, None] * BK + o_k[None, :], mask=(o_b < MB - 1)[:, None], other=0.0)
        for bi in tl.static_range(bj + 1, CT // MB):
            rows = bi * MB + o_b
            b_x = tl.load(p_x + rows[:, None] * SX + o_k[None, :], mask=(rows < n)[:, None] & m_k[None, :],
                          other=0.0).to(p_g.dtype.element_ty)
            b_m = tl.load(p_m + rows[:, None] * CT + cols[None, :])
            b_acc += tl.dot(tl.trans(b_m), b_x * tl.exp(_within(p_g, bi, o_k, BK)),
                            input_precision=PREC) * tl.exp(_to_anchor(p_g, bj, bi, o_k, BK))
        for ii in range(MB):
            i = bj * MB + ii
            b_xi = tl.load(p_x + i * SX + o_k, mask=m_k & (o_k * 0 + i < n), other=0.0).to(p_g.dtype.element_ty)
            b_d = tl.cumsum(tl.where(o_b[:, None] < ii, b_next, 0.0), axis=0, reverse=True)  # G_i - G_j, j <= i
            b_mr = tl.load(p_m + i * CT + cols)
            b_acc += b_mr[:, None] * b_xi[None, :] * tl.exp(b_d)
        tl.store(p_out + cols[:, None] * BK + o_k[None, :], b_acc)
