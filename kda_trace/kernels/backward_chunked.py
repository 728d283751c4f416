"""The chunked mode of the KDA backward (kernels/backward.py, LAUNCH["mode"] = "chunked"): the states at chunk
starts and the gradients dS at chunk ends by matrix products in the chunked forward's form, instead of the
exact mode's K x K chunk maps (A_c, B_c, b_c by token sweeps) and their pass.

With G the cumulative gate over a chunk (per key channel), Gl its last row, e(x) = exp(x) (kernels/chunk.py,
KDA.md "The chunked algorithm", tests/kernels/chunk_backward_matrix.py):
    Qt = scale q e(G),  Kb = k e(G),  Kt = k e(Gl - G),  gamma = e(Gl)                 [n, K], [K]
    A_kk = (diag(beta) k D k^T)_strict,  A_qk = scale (q D k^T)_lower   (D: e(G_i - G_j) per key channel)
    X = (I + A_kk)^-1,  W = X diag(beta) Kb,  U = X diag(beta) v
    forward:  Vn = U - W S;  S_end = diag(gamma) S + Kt^T Vn                 (A_c = diag(gamma) - Kt^T W)
    reverse:  dVn = A_qk^T dO + Kt dSe;  dS = diag(gamma) dSe + Qt^T dO - W^T dVn
                                                     (= A_c^T dSe + b_c, b_c = Qt^T dO - W^T A_qk^T dO)
Kernels:
1. `_prep_kernel`, per (chunk, value head), parallel (persistent programs, like the matrix local kernel):
   A_kk and A_qk by decay-weighted 16-row blocks (backward.py's `_pair_matrix`: every exp argument <= 0), X
   by forward substitution, then W, U, Qt, Kt, gamma and dO2 = A_qk^T dO, stored in fp32 (float64 for
   float64 inputs). Products in LAUNCH["chunked_precision"] (tf32x3 by default: about fp32).
2. `_state_pass_kernel`, per (sequence, V-tile, value head), sequential over the sequence's chunks: the
   forward recursion above from h0 (the state at each chunk start into `states`), then the reverse one from
   dht (dS at each chunk end into `dstates`, and dh0): per chunk three [64, K] x [K, BV] / [K, 64] x [64, BV]
   products each way, the state kept in fp32 (float64) between chunks. No K x K map is formed.
The per-chunk gradients then come from backward.py's local kernels, reading `states` and `dstates`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kda_trace.kernels.backward import _chunk_span, _pair_matrix


@triton.jit(do_not_specialize=["scale", "n_work"])
def _prep_kernel(
    q, k, v, g, beta, do, W, U, Qt, Kt, gamma, dO2, scratch, cu_seqlens, chunk_indices, scale, n_work,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, CT: tl.constexpr, PREC: tl.constexpr,
):
    """Work items (chunk, value head), n_work of them, shared out over the programs: the chunk's W, U, Qt, Kt
    ([T, HV, K|V] like g and v), gamma ([NT, HV, K]) and dO2 = A_qk^T dO ([T, HV, V]). Scratch per program:
    the gates [CT, BK] (zero past the chunk's rows) and two [CT, CT] matrices."""
    ACC: tl.constexpr = W.dtype.element_ty
    pid = tl.program_id(0).to(tl.int64)
    p_gs = scratch + pid * (CT * BK + 2 * CT * CT)
    p_m1 = p_gs + CT * BK
    p_m2 = p_m1 + CT * CT
    o_t = tl.arange(0, CT)
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    off_tk = o_t[:, None] * BK + o_k[None, :]
    eye = tl.where(o_t[:, None] == o_t[None, :], 1.0, 0.0).to(ACC)
    for w in range(pid, n_work, tl.num_programs(0)):
        i_c = w // HV
        i_hv = w % HV
        i_h = i_hv // (HV // H)
        _, _, r0, n, _ = _chunk_span(cu_seqlens, chunk_indices, i_c, CT)
        m_t = o_t < n
        m_tk = m_t[:, None] & m_k[None, :]
        m_tv = m_t[:, None] & m_v[None, :]
        p_q = q + (r0 * H + i_h) * K
        p_k = k + (r0 * H + i_h) * K
        b_q = tl.load(p_q + o_t[:, None] * (H * K) + o_k[None, :], mask=m_tk, other=0.0).to(ACC)
        b_k = tl.load(p_k + o_t[:, None] * (H * K) + o_k[None, :], mask=m_tk, other=0.0).to(ACC)
        off_g = (r0 * HV + i_hv) * K + o_t[:, None] * (HV * K) + o_k[None, :]
        b_g = tl.load(g + off_g, mask=m_tk, other=0.0).to(ACC)
        b_b = tl.load(beta + (r0 + o_t) * HV + i_hv, mask=m_t, other=0.0).to(ACC)
        # G and Gl - G as sums of the gates (exp arguments <= 0, no difference of two cumulative sums)
        b_gn = tl.load(g + off_g + HV * K, mask=(o_t + 1 < n)[:, None] & m_k[None, :], other=0.0).to(ACC)
        b_eG = tl.exp(tl.cumsum(b_g, axis=0))
        b_eT = tl.exp(tl.cumsum(b_gn, axis=0, reverse=True))
        tl.debug_barrier()  # the previous item's reads of the scratch are done
        tl.store(p_gs + off_tk, b_g)
        tl.debug_barrier()
        _pair_matrix(p_k, p_k, H * K, p_gs, p_m1, n, o_k, m_k, BK, CT, False, PREC)  # P: A_kk = diag(beta) P
        _pair_matrix(p_q, p_k, H * K, p_gs, p_m2, n, o_k, m_k, BK, CT, True, PREC)   # A_qk / scale
        tl.debug_barrier()
        b_A = tl.load(p_m1 + o_t[:, None] * CT + o_t[None, :]) * b_b[:, None]
        b_Aqk = tl.load(p_m2 + o_t[:, None] * CT + o_t[None, :]) * scale
        # X = (I + A_kk)^-1 row by row (forward substitution: row i needs only rows j < i)
        b_X = eye
        for i in range(1, CT):
            b_ai = tl.sum(tl.where((o_t == i)[:, None], b_A, 0.0), axis=0)
            b_xi = tl.where(o_t == i, 1.0, 0.0) - tl.sum(b_ai[:, None] * b_X, axis=0)
            b_X = tl.where((o_t == i)[:, None], b_xi[None, :], b_X)
        off_k = (r0 * HV + i_hv) * K + o_t[:, None] * (HV * K) + o_k[None, :]
        off_v = (r0 * HV + i_hv) * V + o_t[:, None] * (HV * V) + o_v[None, :]
        tl.store(W + off_k, tl.dot(b_X, b_k * (b_b[:, None] * b_eG), input_precision=PREC), mask=m_tk)
        tl.store(Qt + off_k, scale * b_q * b_eG, mask=m_tk)
        tl.store(Kt + off_k, b_k * b_eT, mask=m_tk)
        tl.store(gamma + (i_c * HV + i_hv) * K + o_k, tl.exp(tl.sum(b_g, axis=0)), mask=m_k)
        b_v = tl.load(v + off_v, mask=m_tv, other=0.0).to(ACC)
        tl.store(U + off_v, tl.dot(b_X, b_v * b_b[:, None], input_precision=PREC), mask=m_tv)
        b_do = tl.load(do + off_v, mask=m_tv, other=0.0).to(ACC)
        tl.store(dO2 + off_v, tl.dot(tl.trans(b_Aqk), b_do, input_precision=PREC), mask=m_tv)


@triton.jit
def _state_pass_kernel(
    W, U, Qt, Kt, gamma, dO2, do, states, dstates, h0, dht, dh0, cu_seqlens, chunk_offsets,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, CT: tl.constexpr,
    USE_H0: tl.constexpr, USE_DHT: tl.constexpr, PREC: tl.constexpr,
):
    """For one (sequence, V-tile, value head): S_start(c) for every chunk (states), then dS_end(c) from the
    last chunk back (dstates) and dh0 = dS_start(0), by the recursions of the module docstring."""
    NV: tl.constexpr = (V + BV - 1) // BV
    i_n = tl.program_id(0).to(tl.int64) // NV
    i_v = tl.program_id(0).to(tl.int64) % NV
    i_hv = tl.program_id(1).to(tl.int64)
    ACC: tl.constexpr = states.dtype.element_ty
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    n_tok = tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos
    n_chunks = (n_tok + CT - 1) // CT
    c0 = tl.load(chunk_offsets + i_n).to(tl.int64)
    o_t = tl.arange(0, CT)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    off_s = o_k[:, None] * V + o_v[None, :]
    s_seq = (i_n * HV + i_hv) * (K * V)
    off_tk = o_t[:, None] * (HV * K) + o_k[None, :]
    off_tv = o_t[:, None] * (HV * V) + o_v[None, :]

    if USE_H0:
        b_s = tl.load(h0 + s_seq + off_s, mask=m_kv, other=0.0).to(ACC)
    else:
        b_s = tl.zeros([BK, BV], dtype=ACC)
    for c in range(n_chunks):
        r0 = bos + c * CT  # the chunk's first row; its rows: + t * HV * (K | V)
        m_t = o_t < n_tok - c * CT
        tl.store(states + ((c0 + c) * HV + i_hv) * (K * V) + off_s, b_s, mask=m_kv)
        if c < n_chunks - 1:  # the last chunk's end state is not needed
            b_w = tl.load(W + (r0 * HV + i_hv) * K + off_tk, mask=m_t[:, None] & m_k[None, :], other=0.0)
            b_kt = tl.load(Kt + (r0 * HV + i_hv) * K + off_tk, mask=m_t[:, None] & m_k[None, :], other=0.0)
            b_u = tl.load(U + (r0 * HV + i_hv) * V + off_tv, mask=m_t[:, None] & m_v[None, :], other=0.0)
            b_gam = tl.load(gamma + ((c0 + c) * HV + i_hv) * K + o_k, mask=m_k, other=0.0)
            b_vn = b_u - tl.dot(b_w, b_s, input_precision=PREC)
            b_s = b_s * b_gam[:, None] + tl.dot(tl.trans(b_kt), b_vn, input_precision=PREC)

    if USE_DHT:
        b_d = tl.load(dht + s_seq + off_s, mask=m_kv, other=0.0).to(ACC)
    else:
        b_d = tl.zeros([BK, BV], dtype=ACC)
    for cr in range(n_chunks):
        c = n_chunks - 1 - cr
        r0 = bos + c * CT
        m_t = o_t < n_tok - c * CT
        m_tk = m_t[:, None] & m_k[None, :]
        tl.store(dstates + ((c0 + c) * HV + i_hv) * (K * V) + off_s, b_d, mask=m_kv)
        b_w = tl.load(W + (r0 * HV + i_hv) * K + off_tk, mask=m_tk, other=0.0)
        b_kt = tl.load(Kt + (r0 * HV + i_hv) * K + off_tk, mask=m_tk, other=0.0)
        b_qt = tl.load(Qt + (r0 * HV + i_hv) * K + off_tk, mask=m_tk, other=0.0)
        b_do2 = tl.load(dO2 + (r0 * HV + i_hv) * V + off_tv, mask=m_t[:, None] & m_v[None, :], other=0.0)
        b_do = tl.load(do + (r0 * HV + i_hv) * V + off_tv, mask=m_t[:, None] & m_v[None, :], other=0.0).to(ACC)
        b_gam = tl.load(gamma + ((c0 + c) * HV + i_hv) * K + o_k, mask=m_k, other=0.0)
        b_dvn = b_do2 + tl.dot(b_kt, b_d, input_precision=PREC)
        b_d = (b_d * b_gam[:, None] + tl.dot(tl.trans(b_qt), b_do, input_precision=PREC)
               - tl.dot(tl.trans(b_w), b_dvn, input_precision=PREC))
    tl.store(dh0 + s_seq + off_s, b_d, mask=m_kv)


def chunk_states_and_grads(xs, sizes, tables, acc, h0, do, dht, scale, launch, n_programs):
    """Kernels 1 and 2: (states, dstates [NT, HV, K, V], dh0 [N, HV, K, V]) in acc. xs: the packed q, k, v,
    g, beta; do packed [TT, HV, V]; dht in the [K, V] layout or None; launch: backward.LAUNCH."""
    from kda_trace.platform import triton_interpreted

    q, k, v, g, beta = xs
    B, T, H, HV, K, V, N = sizes
    cu, chunk_indices, chunk_offsets, NT = tables
    TT, dev = B * T, q.device
    interp = triton_interpreted()
    CT = 64
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, triton.next_power_of_2(V))
    prec = "ieee" if acc == torch.float64 else launch["chunked_precision"]
    Wm = torch.empty(TT, HV, K, dtype=acc, device=dev)
    Qt = torch.empty(TT, HV, K, dtype=acc, device=dev)
    Kt = torch.empty(TT, HV, K, dtype=acc, device=dev)
    U = torch.empty(TT, HV, V, dtype=acc, device=dev)
    dO2 = torch.empty(TT, HV, V, dtype=acc, device=dev)
    gam = torch.empty(NT, HV, K, dtype=acc, device=dev)
    n_work = NT * HV
    n_prog = n_programs(n_work, dev, interp)
    scratch = torch.empty(n_prog, CT * BK + 2 * CT * CT, dtype=acc, device=dev)
    _prep_kernel[(n_prog,)](
        q, k, v, g, beta, do, Wm, U, Qt, Kt, gam, dO2, scratch, cu, chunk_indices, scale, n_work,
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, CT=CT, PREC=prec, num_warps=launch["prep_warps"] or 8)
    del scratch

    states = torch.empty(NT, HV, K, V, dtype=acc, device=dev)
    dstates = torch.empty(NT, HV, K, V, dtype=acc, device=dev)
    dh0 = torch.empty(N, HV, K, V, dtype=acc, device=dev)
    BVp = launch["chunked_pass_bv"] or (BV if interp else min(BV, 32))
    z = torch.empty(1, dtype=acc, device=dev)
    _state_pass_kernel[(N * triton.cdiv(V, BVp), HV)](
        Wm, U, Qt, Kt, gam, dO2, do, states, dstates, h0 if h0 is not None else z,
        dht.to(acc).contiguous() if dht is not None else z, dh0, cu, chunk_offsets,
        HV=HV, K=K, V=V, BK=BK, BV=BVp, CT=CT, USE_H0=h0 is not None, USE_DHT=dht is not None, PREC=prec,
        num_warps=launch["chunked_pass_warps"] or 4)
    return states, dstates, dh0
