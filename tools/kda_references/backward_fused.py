"""KDA backward through the in-op gate, q/k L2 norm and beta logits, packed variable-length batch: what
Kimi Linear's training differentiates (fla chunk_kda with use_qk_l2norm_in_kernel, use_gate_in_kernel and
use_beta_sigmoid_in_kernel, cu_seqlens, [K, V] state).

Forward, per sequence: q, k = l2_normalize(q, k); the log decay
    unbounded (Kimi Linear):      g = -exp(A_log) * softplus(g_raw + dt_bias)       (softplus(x) = x for x > 20)
    safe / lower bound (K3, GLM): g = LOWER_BOUND * sigmoid(exp(A_log) * (g_raw + dt_bias))
beta = sigmoid(b), then, per value head and token (value head hv reads q/k head hv // (NUM_V_HEADS // NUM_HEADS)),
    S = diag(exp(g_t)) S;   S = S + beta_t k_t (v_t - S^T k_t)^T;   o_t = S^T (scale q_t)
Given `do` (gradient of o) and `dht` (of each sequence's final state), return the gradients of
L = sum(o * do) + sum(final_state * dht) with respect to the raw inputs q, k, v, g_raw, A_log, dt_bias, b and
the initial states (dA_log and ddt_bias sum over every token of every sequence), in their inputs' dtypes
except dA_log, ddt_bias and dh0 (float32).

They are obtained with torch.autograd, in float64, through the element-wise norm, gate and sigmoid and the
chunked form of the recurrence (KDA.md "The chunked algorithm", exact in exact arithmetic). Each sequence is
cut into chunks of CHUNK tokens; in a chunk, with G_i the cumulative sum of g over the chunk's tokens up to i
(per key channel) and S the state before the chunk,
    A_kk[i, j] = beta_i sum_d k_id k_jd exp(G_id - G_jd)  (j < i),   A_qk[i, j] = sum_d q_id k_jd exp(G_id - G_jd)  (j <= i)
    W = (I + A_kk)^-1 (beta k exp(G)),   U = (I + A_kk)^-1 (beta v)           (a unit lower-triangular solve)
    X = U - W S      (row i: beta_i (v_i - S_{i-1}^T k_i), the delta-rule write of token i)
    O = (q exp(G)) S + A_qk X,   S = diag(exp(G_last)) S + (k exp(G_last - G))^T X
(q already scaled). No exponent is positive (the pairwise decays exp(G_i - G_j) are formed for the pairs j < i
only, the diagonal has no decay, and G_last - G_j is summed over the later tokens), so strong gates underflow
to 0 instead of overflowing, and their gradients stay exact: a decay exp(G_i - G_i) would add and subtract
O(1) terms whose rounding swamps gradients of size e^-50.

Memory is bounded by recomputation: sequences are differentiated in batches (longest first) that keep at most
STATE_BYTES of states; in a batch, a first pass without autograd records the states before every group of L
consecutive chunk steps (L = sqrt(steps / 5) keeps the fewest states), then the groups are differentiated last
to first, each re-run (element-wise part included) from its recorded states with the states' gradient flowing
back from the next group: first the state pass of the whole group, then the intra-chunk part, INTRA_BYTES of
work at a time.

Choices: float64, because on an H200 it costs little and keeps the gradients at float64 rounding from exact (the
outputs are then the float64 values rounded once to float32); CHUNK = 16, because the pairwise decays cost
(CHUNK - 1) / 2 * K per token and head and the state pass K * V per chunk, so at 16 neither dominates.
"""
import torch
import torch.nn.functional as F

# --- definition constants (tools/build_kda_dataset.py rewrites this block per definition) ---
NUM_HEADS = 32
NUM_V_HEADS = 32
HEAD_DIM_K = 128
HEAD_DIM_V = 128
LOWER_BOUND = None  # None: unbounded gate; a number: the "safe" lower-bound gate
# --- end of definition constants ---

CHUNK = 16  # tokens per chunk
# memory (sets memory use and speed, not the math), in float64 bytes: the states that a batch of sequences keeps
# (recorded and under autograd), and the intra-chunk work differentiated at once; on a GPU 12 GiB in all, fewer
# and larger steps than 3 GiB (kda_bwd_fused's 16 references in the H200 main job: see benchmarks/RESULTS.md)
STATE_BYTES = {"cuda": 2 ** 33, "cpu": 2 ** 28}
INTRA_BYTES = {"cuda": 2 ** 32, "cpu": 2 ** 25}


def l2_normalize(x):
    """x / sqrt(sum(x^2) + 1e-6) along the last (head) dimension."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def kda_gate(g_raw, A_log, dt_bias):
    """Raw gate [..., HV, K] -> log decay g <= 0 (in the inputs' dtype: float64 here)."""
    x = g_raw + dt_bias                          # dt_bias [HV, K] broadcasts over tokens
    a = torch.exp(A_log)[:, None]                # [HV, 1]
    if LOWER_BOUND is None:
        return -a * F.softplus(x)                # softplus(x) = x for x > 20 (torch's threshold)
    return LOWER_BOUND * torch.sigmoid(a * x)    # in [LOWER_BOUND, 0]


def check_inputs(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, do, dht):
    T = q.shape[0]
    N = cu_seqlens.shape[0] - 1
    assert NUM_V_HEADS % NUM_HEADS == 0
    assert q.shape == (T, NUM_HEADS, HEAD_DIM_K) and k.shape == q.shape, (q.shape, k.shape)
    assert v.shape == (T, NUM_V_HEADS, HEAD_DIM_V) and do.shape == v.shape, (v.shape, do.shape)
    assert g_raw.shape == (T, NUM_V_HEADS, HEAD_DIM_K), g_raw.shape
    assert A_log.shape == (NUM_V_HEADS,) and dt_bias.shape == (NUM_V_HEADS, HEAD_DIM_K), (A_log.shape, dt_bias.shape)
    assert b.shape == (T, NUM_V_HEADS), b.shape
    assert initial_state.shape == (N, NUM_V_HEADS, HEAD_DIM_K, HEAD_DIM_V), initial_state.shape
    assert dht.shape == initial_state.shape, dht.shape
    bounds = cu_seqlens.tolist()
    assert bounds[0] == 0 and bounds[-1] == T, bounds
    assert all(e > s for s, e in zip(bounds, bounds[1:])), "every sequence needs at least one token"


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


def prepare(q, k, v, g_raw, b, A_log, dt_bias, valid, scale):
    """Raw tokens of some chunks, float64 [M, C, heads, ...], as intra_chunk takes them: L2 norm, gate and
    sigmoid applied, [M, heads, C, ...], q/k repeated to the value heads, q scaled, zero at padding positions."""
    group = NUM_V_HEADS // NUM_HEADS  # value head hv reads q/k head hv // group
    q, k = place(l2_normalize(q), valid), place(l2_normalize(k), valid)
    g, beta = place(kda_gate(g_raw, A_log, dt_bias), valid), place(torch.sigmoid(b), valid)
    return q.repeat_interleave(group, 1) * scale, k.repeat_interleave(group, 1), place(v, valid), g, beta


def place(x, valid):
    """[M, C, heads, ...] -> [M, heads, C, ...], zero at padding positions."""
    return torch.where(valid.view(valid.shape + (1,) * (x.dim() - 2)), x, 0).transpose(1, 2)


def run(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, scale, do, dht):
    check_inputs(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, do, dht)
    # autograd must work even when the caller runs under torch.no_grad() or torch.inference_mode()
    with torch.inference_mode(False), torch.enable_grad():
        return gradients(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, scale, do, dht)


def gradients(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, scale, do, dht):
    tokens = (q, k, v, g_raw, b)
    grads = [torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in tokens]
    d_rates = [torch.zeros(x.shape, dtype=torch.float64, device=x.device) for x in (A_log, dt_bias)]   # sums
    dh0 = torch.empty(initial_state.shape, dtype=torch.float32, device=q.device)
    starts = cu_seqlens[:-1].long()
    lens = cu_seqlens[1:].long() - starts
    for seqs in sequence_batches(lens, q.device):
        seqs = torch.tensor(seqs, device=q.device)
        dh0[seqs] = batch_gradients(tokens, (A_log.double(), dt_bias.double()), grads, d_rates, starts[seqs],
                                    lens[seqs], initial_state[seqs], do, dht[seqs], scale)
    dq, dk, dv, dg_raw, db = grads
    return dq, dk, dv, dg_raw, d_rates[0].float(), d_rates[1].float(), db, dh0


def intra_chunks(tokens, rates, tok, valid, scale, per):
    """intra_chunk of the chunks of tokens `tok`, `per` chunks at a time (bounded work memory)."""
    parts = [intra_chunk(*prepare(*(x[tok[a:a + per]].double() for x in tokens), *rates, valid[a:a + per], scale))
             for a in range(0, tok.shape[0], per)]
    return [torch.cat(p) for p in zip(*parts)]


def batch_gradients(tokens, rates, grads, d_rates, starts, lens, h0, do, dht, scale):
    """Gradients of a batch of sequences: those of the tokens are written into `grads` (through float32, as a
    float32 run rounds), those of A_log and dt_bias added to `d_rates`; returns dL/d(initial states), float32."""
    HV, K, V = NUM_V_HEADS, HEAD_DIM_K, HEAD_DIM_V
    order, active, tok, valid = chunk_plan(starts, lens)
    first = [0]
    for m in active:
        first.append(first[-1] + m)   # first chunk of every step
    L = steps_per_group(len(active))
    groups = [(s, min(s + L, len(active))) for s in range(0, len(active), L)]
    budget = INTRA_BYTES.get(tok.device.type, INTRA_BYTES["cuda"])
    per = max(1, budget // (8 * HV * CHUNK * (6 * CHUNK * K + 50 * (K + V))))   # chunks differentiated at once

    # Pass 1 (no autograd): the states before every group.
    S = h0.double()[order]
    saved = []
    with torch.no_grad():
        for s0, s1 in groups:
            t, ok = tok[first[s0]:first[s1]], valid[first[s0]:first[s1]]
            saved.append(S[:active[s0]].clone())
            chunks = intra_chunks(tokens, rates, t, ok, scale, per)
            S = torch.cat([chunk_pass(chunks, S[:active[s0]], active[s0:s1])[1], S[active[s0]:]])

    # Pass 2: the groups last to first; dS is dL/d(the states after the group), sequences in sorted order. The
    # state pass is differentiated for the whole group, then the intra-chunk part `per` chunks at a time.
    dS = dht.double()[order]
    for (s0, s1), S0 in zip(reversed(groups), reversed(saved)):
        t, ok = tok[first[s0]:first[s1]], valid[first[s0]:first[s1]]
        with torch.no_grad():
            chunks = [c.requires_grad_() for c in intra_chunks(tokens, rates, t, ok, scale, per)]
        S0.requires_grad_()
        o, S_end = chunk_pass(chunks, S0, active[s0:s1])
        *d_chunks, dS0 = torch.autograd.grad((o, S_end), (*chunks, S0), (place(do[t].double(), ok), dS[:S0.shape[0]]))
        dS = torch.cat([dS0, dS[S0.shape[0]:]])
        for a in range(0, t.shape[0], per):
            ts, oks = t[a:a + per], ok[a:a + per]
            leaves = [x[ts].double().requires_grad_() for x in tokens] + [x.clone().requires_grad_() for x in rates]
            out = intra_chunk(*prepare(*leaves, oks, scale))
            *d_tokens, d_A_log, d_dt_bias = torch.autograd.grad(out, leaves, [d[a:a + per] for d in d_chunks])
            for grad, d in zip(grads, d_tokens):
                grad[ts[oks]] = d[oks].float().to(grad.dtype)
            d_rates[0] += d_A_log
            d_rates[1] += d_dt_bias
    dh0 = torch.empty_like(dS)
    dh0[order] = dS
    return dh0.float()
