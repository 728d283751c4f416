r"""Matrix-form (tensor-core shaped) backward of one KDA chunk, in float64 torch: the oracle and the written
derivation for a future `_local_kernel` replacement (kernels/backward.py).

Setting (one chunk of n <= 64 tokens, one value head; kernels/chunk.py's formulation). Inputs: q, k [n, K],
v [n, V], g [n, K] (log decay <= 0), beta [n], the chunk's start state S [K, V], the output gradient dO [n, V]
and dSe [K, V], the gradient of the loss with respect to the state at the chunk's end (from later chunks and
dht: what backward.py's chunk pass leaves in `dstates`).

Forward (G = inclusive cumsum of g over the chunk, per key channel; Gl = G of the last row; e(x) = exp(x)):
    Qt = scale q e(G),  Kb = k e(G),  Kt = k e(Gl - G),  gamma = e(Gl)                       [n, K], [K]
    A_kk[i, j] = beta_i sum_d k_id k_jd e(G_id - G_jd)    j < i   (strictly lower)
    A_qk[i, j] = scale  sum_d q_id k_jd e(G_id - G_jd)    j <= i
    X = (I + A_kk)^-1,  W = X diag(beta) Kb,  U = X diag(beta) v
    Vn = U - W S
    O = Qt S + A_qk Vn,     S_end = diag(gamma) S + Kt^T Vn
(check: `chunk_forward` here against the token recurrence, test_chunk_backward_matrix.py.)

Backward, in the order a kernel would compute it (every line is a matrix product or an element-wise op;
"(.)_lower" keeps j <= i, "(.)_strict" keeps j < i):
    dVn   = A_qk^T dO + Kt dSe                            [n, V]   (= dU)
    dA_qk = (dO Vn^T)_lower                               [n, n]
    dQt   = dO S^T,   dKt = Vn dSe^T,   dW = -dVn S^T     [n, K]
    dgamma = rowsum(S * dSe)                              [K]
    dS    = Qt^T dO - W^T dVn + diag(gamma) dSe           (the chunk pass's A_c^T dSe + b_c; not needed locally)
    dX    = dVn (diag(beta) v)^T + dW (diag(beta) Kb)^T   [n, n]
    Y_v   = X^T dVn [n, V],   Y_k = X^T dW [n, K]         (gradients of diag(beta) v and diag(beta) Kb)
    dA_kk = (-X^T dX X^T)_strict                          (d of a matrix inverse, X = (I + A_kk)^-1)
          = (-(Y_v (diag(beta) v)^T + Y_k (diag(beta) Kb)^T) X^T)_strict     (X^T dX = Y_v (bv)^T + Y_k (bKb)^T)
    dv    = beta Y_v
    dbeta = rowsum(v * Y_v) + rowsum(Kb * Y_k) + rowsum(dA_kk * A_kk) / beta   (the last: sum_j dA_kk[i,j] P[i,j],
            P[i, j] = sum_d k_id k_jd e(G_id - G_jd), so no division in a kernel: A_kk = diag(beta) P)
  the decay-weighted products (D[i, j, d] = e(G_id - G_jd), j <= i, never a positive argument):
    dq  = scale e(G) dQt                      + scale sum_j dA_qk[i, j] k_j D[i, j]
    dk  = e(G) beta Y_k + e(Gl - G) dKt        + scale sum_i dA_qk[i, j] q_i D[i, j]            (row j)
          + beta_i sum_j dA_kk[i, j] k_j D[i, j]  (row i)  + sum_i dA_kk[i, j] beta_i k_i D[i, j]  (row j)
  dG, the gradient of G (each e(+G_i) factor gives +x dx, each e(-G_j) gives -x dx, Gl collects e(Gl)):
    dG  = Qt * dQt + Kb * beta Y_k - Kt * dKt
          + q * dq_qk - k * dk_qk + k * dk_kk,row - k * dk_kk,col   (the A_qk / A_kk terms of dq, dk above)
    dG[last] += gamma * dgamma + colsum(Kt * dKt)
    dg  = reverse cumsum of dG over the chunk's rows (G_i = sum_{t <= i} g_t)

The kernels (kernels/backward_chunked.py, the backward's chunked mode: the prep and the split local kernels 3a to
3c): per (chunk, value head), all products above are [64, 64] x [64, K|V] tensor-core shapes given S (fp32
chunk-start state) and dSe (fp32 chunk-end dS).
The only terms with decays of both signs are the D-weighted sums (A_kk, A_qk and the four sums of dq, dk):
sum_j M[i, j] x_j D[i, j] = e(G_i) (M (x e(-G)))_i is what a GPU would like, but e(-G) overflows for strong gates.
The kernel anchors like the forward (kernels/chunk.py): within a 16-row block with anchor row a (its first row),
e(G_i - G_j) = e(G_i - G_a) e(G_a - G_j) with both arguments <= 0 for j in an earlier block (the off-diagonal
blocks are products of two non-positive-exponent operands), and the 16x16 diagonal blocks element-wise with
e(G_i - G_j) per pair. It also takes every difference G_x - G_y as a sum of gates over (y, x] (non-positive
terms: no cancellation): a difference of two chunk-start cumulative sums loses 1e-7 |G| absolute in fp32, which
cost dg 1.2e-5 RMS-relative (the others 2.5e-6) at gates to -40 in a first version. The diagonal of dA_qk and the Kt / gamma terms of
dG go straight to what they give (dq and dk; sum_{i < t} Kt_i dKt_i + gamma dgamma for dg), not as +x and -x
through the reverse cumsum. X: forward substitution row by row (fp32).
`matrix_chunk_backward` below uses only e(<= 0) arguments (D built from masked differences), so it is exact for
gates of any strength, and `matrix_backward` chains it over a whole (packed, GVA) batch as kernels/backward.py
does with its chunk pass.
"""

from __future__ import annotations

import torch

f64 = torch.float64


def _decay_pairs(G):
    """D[i, j, d] = exp(G_id - G_jd) for j <= i, 0 above the diagonal; arguments are never positive."""
    n = G.shape[0]
    lower = torch.ones(n, n, dtype=torch.bool, device=G.device).tril()
    diff = G[:, None, :] - G[None, :, :]
    return torch.where(lower[:, :, None], diff, torch.full_like(diff, float("-inf"))).exp(), lower


def chunk_forward(q, k, v, g, beta, S, scale):
    """(O [n, V], S_end [K, V]) of one chunk in the matrix form above (float64, differentiable)."""
    n = q.shape[0]
    G = g.cumsum(0)
    Gl = G[-1]
    D, lower = _decay_pairs(G)
    strict = lower & ~torch.eye(n, dtype=torch.bool, device=q.device)
    Qt, Kb, Kt, gamma = scale * q * G.exp(), k * G.exp(), k * (Gl - G).exp(), Gl.exp()
    A_kk = torch.where(strict, beta[:, None] * torch.einsum("id,jd,ijd->ij", k, k, D), 0.0)
    A_qk = torch.where(lower, scale * torch.einsum("id,jd,ijd->ij", q, k, D), 0.0)
    X = torch.linalg.inv(torch.eye(n, dtype=q.dtype, device=q.device) + A_kk)
    W, U = X @ (beta[:, None] * Kb), X @ (beta[:, None] * v)
    Vn = U - W @ S
    return Qt @ S + A_qk @ Vn, gamma[:, None] * S + Kt.T @ Vn


def matrix_chunk_backward(q, k, v, g, beta, S, dO, dSe, scale):
    """dq, dk, dv, dg, dbeta and dS (gradient for the chunk's start state) of L = sum(O dO) + sum(S_end dSe),
    by the matrix-form formulas of the module docstring (no autograd)."""
    n = q.shape[0]
    G = g.cumsum(0)
    Gl = G[-1]
    D, lower = _decay_pairs(G)
    strict = lower & ~torch.eye(n, dtype=torch.bool, device=q.device)
    eG, eT = G.exp(), (Gl - G).exp()
    Qt, Kb, Kt, gamma = scale * q * eG, k * eG, k * eT, Gl.exp()
    P = torch.where(strict, torch.einsum("id,jd,ijd->ij", k, k, D), 0.0)
    A_kk = beta[:, None] * P
    A_qk = torch.where(lower, scale * torch.einsum("id,jd,ijd->ij", q, k, D), 0.0)
    X = torch.linalg.inv(torch.eye(n, dtype=q.dtype, device=q.device) + A_kk)
    bv, bKb = beta[:, None] * v, beta[:, None] * Kb
    W, U = X @ bKb, X @ bv
    Vn = U - W @ S

    dVn = A_qk.T @ dO + Kt @ dSe
    dA_qk = torch.where(lower, dO @ Vn.T, 0.0)
    dQt, dKt, dW = dO @ S.T, Vn @ dSe.T, -dVn @ S.T
    dgamma = (S * dSe).sum(1)
    dS = Qt.T @ dO - W.T @ dVn + gamma[:, None] * dSe
    Y_v, Y_k = X.T @ dVn, X.T @ dW
    dA_kk = torch.where(strict, -(Y_v @ bv.T + Y_k @ bKb.T) @ X.T, 0.0)

    dv = beta[:, None] * Y_v
    dbeta = (v * Y_v).sum(1) + (Kb * Y_k).sum(1) + (dA_kk * P).sum(1)
    # the D-weighted sums (row parts: sum over j; column parts: sum over i)
    dq_qk = scale * torch.einsum("ij,jd,ijd->id", dA_qk, k, D)
    dk_qk = scale * torch.einsum("ij,id,ijd->jd", dA_qk, q, D)
    dk_row = beta[:, None] * torch.einsum("ij,jd,ijd->id", dA_kk, k, D)
    dk_col = torch.einsum("ij,id,ijd->jd", dA_kk * beta[:, None], k, D)
    dq = scale * eG * dQt + dq_qk
    dk = eG * beta[:, None] * Y_k + eT * dKt + dk_qk + dk_row + dk_col
    dG = Qt * dQt + Kb * beta[:, None] * Y_k - Kt * dKt + q * dq_qk - k * dk_qk + k * dk_row - k * dk_col
    dG[-1] = dG[-1] + gamma * dgamma + (Kt * dKt).sum(0)
    dg = dG.flip(0).cumsum(0).flip(0)
    return dq, dk, dv, dg, dbeta, dS


def matrix_backward(q, k, v, g, beta, do, scale, h0=None, dht=None, cu_seqlens=None, chunk=64):
    """Gradients (dict q, k, v, g, beta, h0) of sum(o do) + sum(ht dht) for a whole batch (shapes of
    kernels/backward.kda_backward, [K, V] state layout), float64: per sequence and value head, the chunk
    forward gives every chunk's start state, then `matrix_chunk_backward` runs from the last chunk back with
    dS carried between chunks. `chunk` (64 like the kernels) may be set smaller to test many chunks on
    short sequences."""
    q, k, v, g, beta, do = (x.to(f64) for x in (q, k, v, g, beta, do))
    B, T, H, K = q.shape
    HV, V = v.shape[2:]
    if cu_seqlens is None:
        spans = [(b, 0, T) for b in range(B)]
    else:
        c = cu_seqlens.tolist()
        spans = [(0, c[i], c[i + 1]) for i in range(len(c) - 1)]
    out = {"q": torch.zeros(B, T, HV, K, dtype=f64), "k": torch.zeros(B, T, HV, K, dtype=f64),
           "v": torch.zeros_like(v), "g": torch.zeros_like(g), "beta": torch.zeros_like(beta),
           "h0": torch.zeros(len(spans), HV, K, V, dtype=f64)}
    for n_seq, (b, s, e) in enumerate(spans):
        for hv in range(HV):
            h = hv // (HV // H)
            bounds = [(t, min(t + chunk, e)) for t in range(s, e, chunk)]
            S = torch.zeros(K, V, dtype=f64) if h0 is None else h0[n_seq, hv].to(f64)
            starts = []
            for t0, t1 in bounds:
                starts.append(S)
                _, S = chunk_forward(q[b, t0:t1, h], k[b, t0:t1, h], v[b, t0:t1, hv], g[b, t0:t1, hv],
                                     beta[b, t0:t1, hv], S, scale)
            dS = torch.zeros(K, V, dtype=f64) if dht is None else dht[n_seq, hv].to(f64)
            for (t0, t1), S in zip(reversed(bounds), reversed(starts)):
                dq, dk, dv, dg, dbeta, dS = matrix_chunk_backward(
                    q[b, t0:t1, h], k[b, t0:t1, h], v[b, t0:t1, hv], g[b, t0:t1, hv], beta[b, t0:t1, hv], S,
                    do[b, t0:t1, hv], dS, scale)
                out["q"][b, t0:t1, hv], out["k"][b, t0:t1, hv] = dq, dk
                out["v"][b, t0:t1, hv], out["g"][b, t0:t1, hv], out["beta"][b, t0:t1, hv] = dv, dg, dbeta
            out["h0"][n_seq, hv] = dS
    # GVA: the value heads of a group share q/k heads
    out["q"] = out["q"].view(B, T, H, HV // H, K).sum(3)
    out["k"] = out["k"].view(B, T, H, HV // H, K).sum(3)
    return out
