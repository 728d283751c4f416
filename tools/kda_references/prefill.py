"""KDA prefill: a packed variable-length batch, as an inference engine's prefill / extend calls it.

q and k are L2-normalised inside the op, the log decay g is computed from the raw gate input, beta from
logits, and the recurrent state is stored K-last ([V, K] per head, the layout of vLLM / SGLang pools).
Specification: for each sequence, value head and token (value head hv reads q/k head hv // (NUM_V_HEADS //
NUM_HEADS)), with S the state [K, V] (the transpose of the stored one),
    S = diag(exp(g_t)) S;   S = S + beta_t k_t (v_t - S^T k_t)^T;   o_t = S^T (scale q_t)
Every sequence starts from its own initial state (or zeros) and ends with its own final state. o is returned
in v's dtype, the final states in float32.

Computed in float64 in the chunked form of the same recurrence (KDA.md "The chunked algorithm"), exact in
exact arithmetic. Each sequence is cut into chunks of CHUNK tokens from its first token (chunks never cross
sequences); in a chunk, with G_i the cumulative sum of g over the chunk's tokens up to i (per key channel) and
S the state before the chunk,
    A_kk[i, j] = beta_i sum_d k_id k_jd exp(G_id - G_jd)  (j < i),   A_qk[i, j] = sum_d q_id k_jd exp(G_id - G_jd)  (j <= i)
    W = (I + A_kk)^-1 (beta k exp(G)),   U = (I + A_kk)^-1 (beta v)           (a unit lower-triangular solve)
    X = U - W S      (row i: beta_i (v_i - S_{i-1}^T k_i), the delta-rule write of token i)
    O = (q exp(G)) S + A_qk X,   S = diag(exp(G_last)) S + (k exp(G_last - G))^T X
(q already scaled). Every exponent is <= 0: the pairwise decays exp(G_i - G_j) are formed for the
pairs j < i only (CHUNK (CHUNK - 1) / 2 of them per chunk and head, K channels each; the diagonal has no decay),
so strong gates underflow to 0 instead of overflowing.
Everything but the last line is independent per chunk and runs for many chunks at once; the last line runs
chunk after chunk, for all sequences together.

Choices: float64, because on an H200 it costs little and keeps the result at float64 rounding from the exact
recurrence (the outputs are then the float64 values rounded once to float32); CHUNK = 16, because the pairwise
decays cost (CHUNK - 1) / 2 * K per token and head and the state pass K * V per chunk, so at 16 neither
dominates; chunks are computed in groups of at most GROUP_BYTES of float64 work (memory, not math), so 65536
tokens x 96 heads fit in about 10 GiB.
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
# float64 work memory of one group of chunks (sets memory use and speed, not the math): large on a GPU, where the
# reference is bound by its kernel launches (H200, 1 GiB groups: one step of chunks per group on a 65536-token
# prefill at 96 heads, 1.9 s a call of which 0.77 s on the device; 0.68 s with 8 GiB groups); small on a CPU (1.5x
# faster there than 1 GiB groups: fewer fresh pages)
GROUP_BYTES = {"cuda": 2 ** 33, "cpu": 2 ** 25}


def l2_normalize(x):
    """x / sqrt(sum(x^2) + 1e-6) along the last (head) dimension."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def kda_gate(g_raw, A_log, dt_bias):
    """Raw gate [..., HV, K] -> log decay g <= 0, float64."""
    x = g_raw.double() + dt_bias.double()        # dt_bias [HV, K] broadcasts over tokens
    a = torch.exp(A_log.double())[:, None]       # [HV, 1]
    if LOWER_BOUND is None:
        return -a * F.softplus(x)                # softplus(x) = x for x > 20 (torch's threshold)
    return LOWER_BOUND * torch.sigmoid(a * x)    # in [LOWER_BOUND, 0]


def check_inputs(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens):
    T = q.shape[0]
    assert NUM_V_HEADS % NUM_HEADS == 0
    assert q.shape == (T, NUM_HEADS, HEAD_DIM_K) and k.shape == q.shape, (q.shape, k.shape)
    assert v.shape == (T, NUM_V_HEADS, HEAD_DIM_V), v.shape
    assert g_raw.shape == (T, NUM_V_HEADS, HEAD_DIM_K), g_raw.shape
    assert b.shape == (T, NUM_V_HEADS), b.shape
    assert A_log.shape == (NUM_V_HEADS,) and dt_bias.shape == (NUM_V_HEADS, HEAD_DIM_K)
    assert cu_seqlens.dim() == 1 and cu_seqlens.numel() >= 2, cu_seqlens.shape
    offsets = cu_seqlens.tolist()
    if offsets[0] != 0 or offsets[-1] != T:
        raise ValueError(f"cu_seqlens must start at 0 and end at {T} tokens, got {offsets[0]}..{offsets[-1]}")
    if any(end <= start for start, end in zip(offsets[:-1], offsets[1:])):
        raise ValueError("cu_seqlens has a zero-length (or decreasing) sequence; every sequence needs >= 1 token")
    if initial_state is not None:
        assert initial_state.shape == (len(offsets) - 1, NUM_V_HEADS, HEAD_DIM_V, HEAD_DIM_K), initial_state.shape



# ------------------------------------------------------------------------------ the chunked form
def chunk_plan(cu_seqlens):
    """How sequences (token ranges cu_seqlens[n]..cu_seqlens[n+1]) are cut into chunks. Sequences are sorted
    longest first (`order`), so the sequences that have a chunk c are the first active[c] of them; chunks are
    listed step by step (chunk 0 of every sequence, then chunk 1, ...). tok [chunks, CHUNK] is the token at
    every chunk position (0 past a sequence's end, where valid [chunks, CHUNK] is False)."""
    starts = cu_seqlens[:-1].long()
    lens = cu_seqlens[1:].long() - starts
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


def step_groups(active, chunk_bytes, device):
    """Runs of consecutive steps whose chunks take at most GROUP_BYTES together (at least one step each)."""
    budget = GROUP_BYTES.get(device.type, GROUP_BYTES["cuda"])
    if device.type == "cuda":  # a quarter of the free memory at most: other processes may share the GPU
        budget = min(budget, torch.cuda.mem_get_info(device)[0] // 4)
    groups, first, size = [], 0, 0
    for s, m in enumerate(active):
        if s > first and size + m * chunk_bytes > budget:
            groups.append((first, s))
            first, size = s, 0
        size += m * chunk_bytes
    return groups + [(first, len(active))]


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


def chunk_inputs(q, k, v, g_raw, A_log, dt_bias, b, tok, valid, scale):
    """The tokens of some chunks, float64 [M, heads, C, ...], after the L2 norm, the gate and the sigmoid; q/k
    repeated to the value heads; zero at padding positions."""
    group = NUM_V_HEADS // NUM_HEADS  # value head hv reads q/k head hv // group

    def place(x):  # [M, C, heads, ...] -> [M, heads, C, ...], zero at padding positions
        return torch.where(valid.view(valid.shape + (1,) * (x.dim() - 2)), x, 0).transpose(1, 2)

    return (place(l2_normalize(q[tok].double())).repeat_interleave(group, 1) * scale,
            place(l2_normalize(k[tok].double())).repeat_interleave(group, 1),
            place(v[tok].double()), place(kda_gate(g_raw[tok], A_log, dt_bias)), place(torch.sigmoid(b[tok].double())))


def run(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, scale):
    check_inputs(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens)
    HV, K, V = NUM_V_HEADS, HEAD_DIM_K, HEAD_DIM_V
    N = cu_seqlens.numel() - 1
    if initial_state is None:
        S = torch.zeros(N, HV, K, V, dtype=torch.float64, device=q.device)
    else:
        S = initial_state.double().transpose(-1, -2)          # the stored [V, K] as S [K, V]
    order, active, tok, valid = chunk_plan(cu_seqlens)
    o = torch.empty_like(v)
    S = S[order]
    first = [0]
    for m in active:
        first.append(first[-1] + m)   # first chunk of every step
    chunk_bytes = 8 * HV * CHUNK * (4 * CHUNK * K + 16 * (K + V))
    for s0, s1 in step_groups(active, chunk_bytes, q.device):
        t, ok = tok[first[s0]:first[s1]], valid[first[s0]:first[s1]]
        chunks = intra_chunk(*chunk_inputs(q, k, v, g_raw, A_log, dt_bias, b, t, ok, scale))
        o_c, S_end = chunk_pass(chunks, S[:active[s0]], active[s0:s1])
        S = torch.cat([S_end, S[active[s0]:]])
        # through float32: a bf16 o equals the float32 result rounded once more (no float64 -> bf16 rounding)
        o[t[ok]] = o_c.transpose(1, 2)[ok].float().to(o.dtype)
    final = torch.empty_like(S)
    final[order] = S
    return o, final.transpose(-1, -2).float().contiguous()
