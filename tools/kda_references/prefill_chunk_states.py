"""KDA prefill that also returns the state at every chunk boundary (prefix caching), packed varlen.

As the prefill op, plus `chunk_states`: every sequence is cut into chunks of CHUNK_SIZE = 64 tokens from its
first token (the last chunk may be shorter), and for each chunk the state *before* its first token is
returned, i.e. the state after the first 64 * c tokens of the sequence for chunk c = 0, 1, ...,
ceil(len / 64) - 1 (chunk 0: the initial state, or zeros). A sequence shorter than a chunk has one entry
(its initial state). Entries are laid out sequence after sequence, chunks in order: sequence n's chunk c is
row sum(ceil(len_m / 64) for m < n) + c. This is the convention of fla's chunk_kda(...,
return_intermediate_states=True); the state after the last token is final_state. Layout K-last [V, K],
float32 (the engine's state pool).

q and k are L2-normalised inside the op, the log decay g is computed from the raw gate input, beta from
logits, and the recurrent state is stored K-last ([V, K] per head, the layout of vLLM / SGLang pools).
Specification: for each sequence, value head and token, in float32,
    S = diag(exp(g_t)) S;   S = S + beta_t k_t (v_t - S^T k_t)^T;   o_t = S^T (scale q_t)
written here on the transposed state P = S^T ([V, K]). Every sequence starts from its own initial state
(or zeros) and ends with its own final state.
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
CHUNK_SIZE = 64


def l2_normalize(x):
    """x / sqrt(sum(x^2) + 1e-6) along the last (head) dimension."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def kda_gate(g_raw, A_log, dt_bias):
    """Raw gate [..., HV, K] -> log decay g <= 0, float32."""
    x = g_raw.float() + dt_bias.float()          # dt_bias [HV, K] broadcasts over tokens
    a = torch.exp(A_log.float())[:, None]        # [HV, 1]
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


def run(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, scale):
    check_inputs(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens)
    HV, K, V = NUM_V_HEADS, HEAD_DIM_K, HEAD_DIM_V
    N = cu_seqlens.numel() - 1
    group = NUM_V_HEADS // NUM_HEADS  # value head hv reads q/k head hv // group

    starts = cu_seqlens[:-1].long()
    lens = cu_seqlens[1:].long() - starts
    n_chunks = (lens + CHUNK_SIZE - 1) // CHUNK_SIZE
    first_chunk = torch.cumsum(n_chunks, 0) - n_chunks                      # row of each sequence's chunk 0
    # P[n, hv] is the state S^T of sequence n, [V, K] (K-last).
    if initial_state is None:
        P = torch.zeros(N, HV, V, K, dtype=torch.float32, device=q.device)
    else:
        P = initial_state.float().clone()
    o = torch.empty_like(v)  # each token's output is cast to v's dtype as it is written
    chunk_states = torch.empty(int(n_chunks.sum()), HV, V, K, dtype=torch.float32, device=q.device)

    # All sequences advance together: step t handles token t of every sequence that is still running.
    # The tokens of STEPS steps are gathered and brought to float32 at once ([STEPS, N, HV, ...]), so a
    # step only indexes a view and no float32 copy of the whole batch is ever made.
    steps, STEPS = int(lens.max()), CHUNK_SIZE  # a block of steps is one chunk of every running sequence
    for t0 in range(0, steps, STEPS):
        started = t0 < lens                                                   # sequences with a chunk here
        chunk_states[first_chunk[started] + t0 // CHUNK_SIZE] = P[started]    # the state before the chunk
        t = torch.arange(t0, min(t0 + STEPS, steps), device=q.device)[:, None]
        running = t < lens                                                    # [STEPS, N]
        # A sequence that has ended reads token 0 as a no-op: decay 1 and beta 0 leave its state unchanged.
        tok = torch.where(running, starts + t, 0)                             # [STEPS, N]
        q_s = l2_normalize(q[tok].float()).repeat_interleave(group, dim=2) * scale
        k_s = l2_normalize(k[tok].float()).repeat_interleave(group, dim=2)
        v_s = v[tok].float()
        d_s = torch.where(running[..., None, None], torch.exp(kda_gate(g_raw[tok], A_log, dt_bias)), 1.0)
        b_s = torch.where(running[..., None], torch.sigmoid(b[tok].float()), 0.0)
        o_s = torch.empty_like(v_s)
        for i in range(tok.shape[0]):
            q_t, k_t, v_t, d_t, b_t = q_s[i], k_s[i], v_s[i], d_s[i], b_s[i]
            P = P * d_t[:, :, None, :]                                        # decay each key column
            predicted = (P @ k_t[..., None])[..., 0]                          # S^T k: [N, HV, V]
            P = P + (b_t[..., None] * (v_t - predicted))[..., None] * k_t[:, :, None, :]  # delta-rule write
            o_s[i] = (P @ q_t[..., None])[..., 0]                             # read the updated state
        o[tok[running]] = o_s[running].to(o.dtype)
    return o, P, chunk_states
