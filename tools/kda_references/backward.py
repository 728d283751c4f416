"""KDA backward, dense batch: gradients of the forward op (fla chunk_kda defaults, [K, V] state).

Given the forward inputs and the incoming gradients `do` (of o) and `dht` (of the final state), return the
gradients of L = sum(o * do) + sum(final_state * dht) with respect to q, k, v, g, beta and the initial state,
where, per batch row, value head and token (value head hv reads q/k head hv // (NUM_V_HEADS // NUM_HEADS)),
    S = diag(exp(g_t)) S;   S = S + beta_t k_t (v_t - S^T k_t)^T;   o_t = S^T (scale q_t)
Gradients are returned in their inputs' dtypes, except dg and dh0 (float32).

They are obtained with torch.autograd through the chunked form of the same recurrence in float64 (KDA.md
"The chunked algorithm", exact in exact arithmetic). Each row is cut into chunks of CHUNK tokens; in a
chunk, with G_i the cumulative sum of g over the chunk's tokens up to i (per key channel) and S the state
before the chunk,
    A_kk[i, j] = beta_i sum_d k_id k_jd exp(G_id - G_jd)  (j < i),   A_qk[i, j] = sum_d q_id k_jd exp(G_id - G_jd)  (j <= i)
    W = (I + A_kk)^-1 (beta k exp(G)),   U = (I + A_kk)^-1 (beta v)           (a unit lower-triangular solve)
    X = U - W S      (row i: beta_i (v_i - S_{i-1}^T k_i), the delta-rule write of token i)
    O = (q exp(G)) S + A_qk X,   S = diag(exp(G_last)) S + (k exp(G_last - G))^T X
(q already scaled). No exponent is positive (the pairwise decays exp(G_i - G_j) are formed for the pairs j < i
only, the diagonal has no decay, and G_last - G_j is summed over the later tokens), so strong gates underflow
to 0 instead of overflowing, and their gradients stay exact: a decay exp(G_i - G_i) would add and subtract
O(1) terms whose rounding swamps gradients of size e^-50.

Memory is bounded by recomputation: rows are differentiated in batches that keep at most
STATE_BYTES of states; in a batch, a first pass without autograd records the states before every group of L
consecutive chunk steps (L = sqrt(steps / 5) keeps the fewest states), then the groups are differentiated last
to first, each re-run from its recorded states with the states' gradient flowing back from the next group:
first the state pass of the whole group, then the intra-chunk part, INTRA_BYTES of work at a time.

Choices: float64, because on an H200 it costs little and keeps the gradients at float64 rounding from exact (the
outputs are then the float64 values rounded once to float32); CHUNK = 16, because the pairwise decays cost
(CHUNK - 1) / 2 * K per token and head and the state pass K * V per chunk, so at 16 neither dominates.
"""
import torch

# --- definition constants (tools/build_kda_dataset.py rewrites this block per definition) ---
NUM_HEADS = 32
NUM_V_HEADS = 32
HEAD_DIM_K = 128
HEAD_DIM_V = 128
# --- end of definition constants ---

CHUNK = 16  # tokens per chunk
# memory (sets memory use and speed, not the math), in float64 bytes: the states that a batch of sequences keeps
# (recorded and under autograd), and the intra-chunk work differentiated at once; on a GPU 12 GiB in all, fewer
# and larger steps than 3 GiB (kda_bwd_fused's 16 references in the H200 main job: see benchmarks/RESULTS.md)
STATE_BYTES = {"cuda": 2 ** 33, "cpu": 2 ** 28}
INTRA_BYTES = {"cuda": 2 ** 32, "cpu": 2 ** 25}


def check_inputs(q, k, v, g, beta, initial_state, do, dht):
    B, T = q.shape[:2]
    assert NUM_V_HEADS % NUM_HEADS == 0
    assert q.shape == (B, T, NUM_HEADS, HEAD_DIM_K) and k.shape == q.shape, (q.shape, k.shape)
    assert v.shape == (B, T, NUM_V_HEADS, HEAD_DIM_V) and do.shape == v.shape, (v.shape, do.shape)
    assert g.shape == (B, T, NUM_V_HEADS, HEAD_DIM_K), g.shape
    assert beta.shape == (B, T, NUM_V_HEADS), beta.shape
    assert initial_state.shape == (B, NUM_V_HEADS, HEAD_DIM_K, HEAD_DIM_V), initial_state.shape
    assert dht.shape == initial_state.shape, dht.shape


# ------------------------------------------------------------------------------ the chunked form
def chunk_plan(starts, lens):
    """How sequences (tokens starts[n] .. starts[n] + lens[n]) are cut into chunks. Sequences are sorted longest
    first (`order`), so the sequences that have a chunk c are the first active[c] of them; chunks are listed step
    by step (chunk 0 of every sequence, then chunk 1, ...). tok [chunks, CHUNK] is the token at every chunk
    position (0 past a sequence's end, where valid [chunks, CHUNK] is False)."""
    order = torch.sort(lens, descending=True, stable=True).indices
    starts, lens = starts[order], lens[order]
    n_chunks = (lens + CHUNK - 1) // CHUNK
    steps = torch.arange(int(n_chunks[0]), device=lens.device)
    active = (n_chunks[None, :] > steps[:, None]).sum(1)
    step = torch.repeat_interleave(steps, active)                                   # step of every chunk
    row = torch.arange(step.numel(), device=lens.device) - (torch.cumsum(active, 0) - active)[step]
    pos = step[:, None] * CHUNK + torch.arange(CHUNK, device=lens.device)          # position in its sequence
    valid = pos < lens[row, None]
    tok = torch.where(valid, starts[row, None] + pos, 0)
    return order, active.tolist(), tok, valid


def steps_per_group(steps):
    """Steps re-run together: a sequence keeps steps / L recorded states and about 5 L states' worth under
    autograd (the states of every step and the chunks' own tensors), fewest at L = sqrt(steps / 5)."""
    return max(1, round((steps / 5) ** 0.5))


def sequence_batches(lens, device):
    """The sequences, longest first, in batches differentiated together: as many as keep at most STATE_BYTES of
    states (at least one)."""
    budget = STATE_BYTES.get(device.type, STATE_BYTES["cuda"])
    state_bytes = 8 * NUM_V_HEADS * HEAD_DIM_K * HEAD_DIM_V
    batches = []
    for n in torch.sort(lens, descending=True, stable=True).indices.tolist():
        if batches:
            steps = -(-int(lens[batches[-1][0]]) // CHUNK)   # the batch's longest sequence
            L = steps_per_group(steps)
            if (len(batches[-1]) + 1) * (steps / L + 5 * L) * state_bytes <= budget:
                batches[-1].append(n)
                continue
        batches.append([n])
    return batches


def intra_chunk(q, k, v, g, beta):
    """The state-independent part of every chunk. q (scaled), k, g [M, HV, C, K]; v [M, HV, C, V]; beta
    [M, HV, C], float64, zero at padding positions (which then change nothing). Returns [W; q exp(G)] (stacked
    along the chunk axis), U, A_qk, k exp(G_last - G) and exp(G_last) [M, HV, K]."""
    C = q.shape[-2]
    G = g.cumsum(-2)
    i, j = torch.tril_indices(C, C, -1, device=q.device)                       # the pairs j < i
    k_decayed = k[..., j, :] * torch.exp(G[..., i, :] - G[..., j, :])         # exp(G_i - G_j) k_j: exponents < 0
    # the diagonal (no decay) apart, and G_last - G_j as a sum over the later tokens: a strong gate's gradients
    # then carry no rounding of O(1) terms that cancel (exp(G_i - G_i) would give +x and -x to G_i)
    A_qk = torch.diag_embed((q * k).sum(-1))
    A_qk[..., i, j] = (k_decayed * q[..., i, :]).sum(-1)
    A_kk = torch.zeros_like(A_qk)
    A_kk[..., i, j] = (k_decayed * k[..., i, :]).sum(-1) * beta[..., i]
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    T = torch.linalg.solve_triangular(eye + A_kk, eye, upper=False, unitriangular=True)   # (I + A_kk)^-1
    W, U = T @ (beta[..., None] * k * G.exp()), T @ (beta[..., None] * v)
    later = torch.cat([g[..., 1:, :].flip(-2).cumsum(-2).flip(-2), torch.zeros_like(g[..., :1, :])], -2)
    # W and q exp(G) are both multiplied by the state: stacked, one product per chunk reads it
    return torch.cat([W, q * G.exp()], -2), U, A_qk, k * later.exp(), G[..., -1, :].exp()


def chunk_pass(chunks, S, active):
    """Carry the states through the chunks of consecutive steps (chunks as intra_chunk returns them, step after
    step). S [active[0], HV, K, V]: the states before the first step. Returns o [M, HV, C, V] and the states
    after the last step (of a sequence that ended earlier: its final state)."""
    Wq, U, A_qk, k_exp, decay_last = chunks
    C = U.shape[-2]
    outs, done, a = [], [], 0
    for m in active:
        if m < S.shape[0]:  # sequences m.. have no more chunks: their states are final
            done.append(S[m:])
            S = S[:m]
        b = a + m
        WS, qS = (Wq[a:b] @ S).split(C, -2)  # W S and (q exp(G)) S
        X = U[a:b] - WS
        outs.append(qS + A_qk[a:b] @ X)
        S = decay_last[a:b, :, :, None] * S + k_exp[a:b].transpose(-1, -2) @ X
        a = b
    return torch.cat(outs), torch.cat([S] + done[::-1])


def prepare(q, k, v, g, beta, valid, scale):
    """Tokens of some chunks, float64 [M, C, heads, ...], as intra_chunk takes them: [M, heads, C, ...], q/k
    repeated to the value heads, q scaled, zero at padding positions."""
    group = NUM_V_HEADS // NUM_HEADS  # value head hv reads q/k head hv // group
    q, k, v, g, beta = (place(x, valid) for x in (q, k, v, g, beta))
    return q.repeat_interleave(group, 1) * scale, k.repeat_interleave(group, 1), v, g, beta


def place(x, valid):
    """[M, C, heads, ...] -> [M, heads, C, ...], zero at padding positions."""
    return torch.where(valid.view(valid.shape + (1,) * (x.dim() - 2)), x, 0).transpose(1, 2)


def run(q, k, v, g, beta, initial_state, scale, do, dht):
    check_inputs(q, k, v, g, beta, initial_state, do, dht)
    B, T = q.shape[:2]
    cu_seqlens = torch.arange(B + 1, device=q.device) * T   # the rows as the sequences of a packed batch
    tokens = [x.reshape(B * T, *x.shape[2:]) for x in (q, k, v, g, beta)]
    # autograd must work even when the caller runs under torch.no_grad() or torch.inference_mode()
    with torch.inference_mode(False), torch.enable_grad():
        *grads, dh0 = gradients(*tokens, initial_state, cu_seqlens, scale, do.reshape(B * T, *do.shape[2:]), dht)
    return (*(d.reshape(x.shape) for d, x in zip(grads, (q, k, v, g, beta))), dh0)


def gradients(q, k, v, g, beta, initial_state, cu_seqlens, scale, do, dht):
    inputs = (q, k, v, g, beta)
    grads = [torch.empty(x.shape, dtype=dtype, device=x.device)
             for x, dtype in zip(inputs, (q.dtype, k.dtype, v.dtype, torch.float32, beta.dtype))]
    dh0 = torch.empty(initial_state.shape, dtype=torch.float32, device=q.device)
    starts = cu_seqlens[:-1].long()
    lens = cu_seqlens[1:].long() - starts
    for seqs in sequence_batches(lens, q.device):
        seqs = torch.tensor(seqs, device=q.device)
        dh0[seqs] = batch_gradients(inputs, grads, starts[seqs], lens[seqs], initial_state[seqs], do, dht[seqs], scale)
    return (*grads, dh0)


def intra_chunks(inputs, tok, valid, scale, per):
    """intra_chunk of the chunks of tokens `tok`, `per` chunks at a time (bounded work memory)."""
    parts = [intra_chunk(*prepare(*(x[tok[a:a + per]].double() for x in inputs), valid[a:a + per], scale))
             for a in range(0, tok.shape[0], per)]
    return [torch.cat(p) for p in zip(*parts)]


def batch_gradients(inputs, grads, starts, lens, h0, do, dht, scale):
    """Gradients of a batch of sequences: those of the tokens are written into `grads` (through float32, as a
    float32 run rounds); returns dL/d(initial states), float32."""
    HV, K, V = NUM_V_HEADS, HEAD_DIM_K, HEAD_DIM_V
    order, active, tok, valid = chunk_plan(starts, lens)
    first = [0]
    for m in active:
        first.append(first[-1] + m)   # first chunk of every step
    L = steps_per_group(len(active))
    groups = [(s, min(s + L, len(active))) for s in range(0, len(active), L)]
    budget = INTRA_BYTES.get(tok.device.type, INTRA_BYTES["cuda"])
    per = max(1, budget // (8 * HV * CHUNK * (6 * CHUNK * K + 40 * (K + V))))   # chunks differentiated at once

    # Pass 1 (no autograd): the states before every group.
    S = h0.double()[order]
    saved = []
    with torch.no_grad():
        for s0, s1 in groups:
            t, ok = tok[first[s0]:first[s1]], valid[first[s0]:first[s1]]
            saved.append(S[:active[s0]].clone())
            chunks = intra_chunks(inputs, t, ok, scale, per)
            S = torch.cat([chunk_pass(chunks, S[:active[s0]], active[s0:s1])[1], S[active[s0]:]])

    # Pass 2: the groups last to first; dS is dL/d(the states after the group), sequences in sorted order. The
    # state pass is differentiated for the whole group, then the intra-chunk part `per` chunks at a time.
    dS = dht.double()[order]
    for (s0, s1), S0 in zip(reversed(groups), reversed(saved)):
        t, ok = tok[first[s0]:first[s1]], valid[first[s0]:first[s1]]
        with torch.no_grad():
            chunks = [c.requires_grad_() for c in intra_chunks(inputs, t, ok, scale, per)]
        S0.requires_grad_()
        o, S_end = chunk_pass(chunks, S0, active[s0:s1])
        *d_chunks, dS0 = torch.autograd.grad((o, S_end), (*chunks, S0), (place(do[t].double(), ok), dS[:S0.shape[0]]))
        dS = torch.cat([dS0, dS[S0.shape[0]:]])
        for a in range(0, t.shape[0], per):
            ts, oks = t[a:a + per], ok[a:a + per]
            leaves = [x[ts].double().requires_grad_() for x in inputs]
            d_leaves = torch.autograd.grad(intra_chunk(*prepare(*leaves, oks, scale)), leaves,
                                           [d[a:a + per] for d in d_chunks])
            for grad, d in zip(grads, d_leaves):
                grad[ts[oks]] = d[oks].float().to(grad.dtype)
    dh0 = torch.empty_like(dS)
    dh0[order] = dS
    return dh0.float()
