"""KDA decode: one new token per request against a state pool, as an inference engine's decode step.

q and k are L2-normalised inside the op, the log decay g is computed from the raw gate input, beta from
logits; states live in a pool [P, HV, V, K] (K-last, the vLLM / SGLang layout) and request i owns slot
state_indices[i]. Specification, per request and value head, in float32, on P = S^T ([V, K]):
    S = diag(exp(g)) S;   S = S + beta k (v - S^T k)^T;   o = S^T (scale q)
The reference returns a new pool (the input pool is never modified): the slots of the batch hold the
updated states, every other slot is a bit-identical copy.
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


def check_inputs(q, k, v, g_raw, A_log, dt_bias, b, state_pool, state_indices):
    B = q.shape[0]
    assert NUM_V_HEADS % NUM_HEADS == 0
    assert q.shape == (B, NUM_HEADS, HEAD_DIM_K) and k.shape == q.shape, (q.shape, k.shape)
    assert v.shape == (B, NUM_V_HEADS, HEAD_DIM_V), v.shape
    assert g_raw.shape == (B, NUM_V_HEADS, HEAD_DIM_K), g_raw.shape
    assert b.shape == (B, NUM_V_HEADS), b.shape
    assert A_log.shape == (NUM_V_HEADS,) and dt_bias.shape == (NUM_V_HEADS, HEAD_DIM_K)
    assert state_pool.shape[1:] == (NUM_V_HEADS, HEAD_DIM_V, HEAD_DIM_K), state_pool.shape
    assert state_indices.shape == (B,), state_indices.shape
    slots = state_indices.tolist()
    if len(set(slots)) != B or min(slots) < 0 or max(slots) >= state_pool.shape[0]:
        raise ValueError(f"state_indices must be {B} distinct slots in [0, {state_pool.shape[0]})")


def run(q, k, v, g_raw, A_log, dt_bias, b, state_pool, state_indices, scale):
    check_inputs(q, k, v, g_raw, A_log, dt_bias, b, state_pool, state_indices)
    group = NUM_V_HEADS // NUM_HEADS  # value head hv reads q/k head hv // group

    q_t = l2_normalize(q.float()).repeat_interleave(group, dim=1) * scale   # [B, HV, K]
    k_t = l2_normalize(k.float()).repeat_interleave(group, dim=1)           # [B, HV, K]
    v_t = v.float()                                                         # [B, HV, V]
    decay = torch.exp(kda_gate(g_raw, A_log, dt_bias))                      # [B, HV, K]
    beta = torch.sigmoid(b.float())                                         # [B, HV]

    slots = state_indices.long()
    P = state_pool[slots].float()                                           # gathered copy: [B, HV, V, K]
    P = P * decay[:, :, None, :]                                            # decay each key column
    predicted = (P @ k_t[..., None])[..., 0]                                # S^T k: [B, HV, V]
    P = P + (beta[..., None] * (v_t - predicted))[..., None] * k_t[:, :, None, :]  # delta-rule write
    o = (P @ q_t[..., None])[..., 0]                                        # read the updated state

    new_state_pool = state_pool.clone()
    new_state_pool[slots] = P.to(state_pool.dtype)
    return o.to(v.dtype), new_state_pool
