"""KDA speculative-decoding verify against a state pool, as vLLM calls fla's fused_recurrent_kda_fwd.

Each request row n carries num_tokens draft tokens (the last accepted token plus the drafts) and a row of
state_indices [num_tokens] (pool slots, one per draft position). The request starts from the state in
slot state_indices[n, num_accepted_tokens[n] - 1] (the state after the last token the previous verify
step accepted), runs its tokens in order, and writes the state after token t to slot state_indices[n, t]
for every t in [0, num_tokens) (accepted or not: the next step picks the right one). Pool layout K-last
[pool_size, HV, V, K] float32. Specification, per request, value head and token, in float32, on P = S^T:
    S = diag(exp(g_t)) S;   S = S + beta_t k_t (v_t - S^T k_t)^T;   o_t = S^T (scale q_t)
Padding rows (an engine's CUDA-graph batch padded past its real requests) have every index -1
(PAD_SLOT_ID) and come after the real rows: they read and write nothing and their o is zero (fla, called
with zero-token sequences for them, never writes their o, which vLLM allocates with zeros).
The reference returns a new pool (the input pool is never modified); slots no real row names are
bit-identical copies. All reads happen before any write (a row reads one of its own slots, which it
rewrites at t = num_accepted_tokens - 1; rows name distinct slots).
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
PAD_SLOT_ID = -1


def l2_normalize(x):
    """x / sqrt(sum(x^2) + 1e-6) along the last (head) dimension."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def kda_gate(g_raw, A_log, dt_bias):
    """Raw gate [..., HV, K] -> log decay g <= 0, float32."""
    x = g_raw.float() + dt_bias.float()
    a = torch.exp(A_log.float())[:, None]
    if LOWER_BOUND is None:
        return -a * F.softplus(x)                # softplus(x) = x for x > 20
    return LOWER_BOUND * torch.sigmoid(a * x)    # in [LOWER_BOUND, 0]


def check_inputs(q, k, v, g_raw, A_log, dt_bias, b, state_pool, state_indices, num_accepted_tokens):
    """Shapes, and the index rules; returns the number of real (non-padding) rows."""
    B, T = q.shape[:2]
    assert NUM_V_HEADS % NUM_HEADS == 0
    assert q.shape == (B, T, NUM_HEADS, HEAD_DIM_K) and k.shape == q.shape, (q.shape, k.shape)
    assert v.shape == (B, T, NUM_V_HEADS, HEAD_DIM_V), v.shape
    assert g_raw.shape == (B, T, NUM_V_HEADS, HEAD_DIM_K), g_raw.shape
    assert b.shape == (B, T, NUM_V_HEADS), b.shape
    assert A_log.shape == (NUM_V_HEADS,) and dt_bias.shape == (NUM_V_HEADS, HEAD_DIM_K)
    assert state_pool.shape[1:] == (NUM_V_HEADS, HEAD_DIM_V, HEAD_DIM_K), state_pool.shape
    assert state_indices.shape == (B, T), state_indices.shape
    assert num_accepted_tokens.shape == (B,), num_accepted_tokens.shape
    rows = state_indices.tolist()
    real = [n for n, row in enumerate(rows) if row[0] != PAD_SLOT_ID]
    if real != list(range(len(real))):
        raise ValueError("padding rows (state_indices[n, 0] == -1) must come after every real row")
    if any(slot != PAD_SLOT_ID for row in rows[len(real):] for slot in row):
        raise ValueError("a padding row must be -1 (PAD_SLOT_ID) at every position")
    slots = [slot for row in rows[:len(real)] for slot in row]
    if len(set(slots)) != len(slots) or (slots and (min(slots) < 0 or max(slots) >= state_pool.shape[0])):
        raise ValueError(f"the real rows of state_indices must be distinct slots in [0, {state_pool.shape[0]})")
    accepted = num_accepted_tokens[:len(real)].tolist()
    if any(a < 1 or a > T for a in accepted):
        raise ValueError(f"num_accepted_tokens of a real row must be in [1, {T}], got {accepted}")
    return len(real)


def run(q, k, v, g_raw, A_log, dt_bias, b, state_pool, state_indices, num_accepted_tokens, scale):
    R = check_inputs(q, k, v, g_raw, A_log, dt_bias, b, state_pool, state_indices, num_accepted_tokens)
    T = q.shape[1]
    group = NUM_V_HEADS // NUM_HEADS  # value head hv reads q/k head hv // group
    o = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
    new_state_pool = state_pool.clone()
    if R == 0:
        return o.to(v.dtype), new_state_pool

    qs = l2_normalize(q[:R].float()).repeat_interleave(group, dim=2) * scale  # [R, T, HV, K]
    ks = l2_normalize(k[:R].float()).repeat_interleave(group, dim=2)          # [R, T, HV, K]
    vs = v[:R].float()                                                        # [R, T, HV, V]
    decay = torch.exp(kda_gate(g_raw[:R], A_log, dt_bias))                    # [R, T, HV, K]
    beta = torch.sigmoid(b[:R].float())                                       # [R, T, HV]

    idx = state_indices[:R].long()                                           # [R, T]
    start = idx.gather(1, num_accepted_tokens[:R].long()[:, None] - 1)[:, 0]  # [R]
    P = state_pool[start].float()                                             # gathered copy: [R, HV, V, K]
    for t in range(T):
        k_t = ks[:, t]
        P = P * decay[:, t, :, None, :]                                       # decay each key column
        predicted = (P @ k_t[..., None])[..., 0]                              # S^T k: [R, HV, V]
        P = P + (beta[:, t, :, None] * (vs[:, t] - predicted))[..., None] * k_t[:, :, None, :]
        o[:R, t] = (P @ qs[:, t, :, :, None])[..., 0]                         # read the updated state
        new_state_pool[idx[:, t]] = P.to(state_pool.dtype)                    # the state after token t
    return o.to(v.dtype), new_state_pool
