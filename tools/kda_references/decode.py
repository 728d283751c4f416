"""KDA decode: one new token per request against a state pool, as an inference engine's decode step.

q and k are L2-normalised inside the op, the log decay g is computed from the raw gate input, beta from
logits; states live in a pool [P, HV, V, K] (K-last, the vLLM / SGLang layout) and request i owns slot
state_indices[i]. Specification, per request and value head, in float32, on P = S^T ([V, K]):
    S = diag(exp(g)) S;   S = S + beta k (v - S^T k)^T;   o = S^T (scale q)
The pool is float32 or bfloat16: a slot's stored state is read into float32 (exact), updated in float32,
and rounded once, to nearest even, to the pool's dtype when it is stored (what engines' decode kernels do
with a bf16 pool: load to float32 registers, one rounding at the store).
Rows whose slot is -1 (PAD_SLOT_ID) pad an engine's CUDA-graph batch after the real requests: they read
and write nothing and their o is zero.
The reference returns a new pool (the input pool is never modified): the slots of the real requests hold
the updated states, every other slot is a bit-identical copy.
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
    return real_rows(state_indices.tolist(), state_pool.shape[0])


def real_rows(slots, pool_size):
    """The number of real rows: distinct slots in [0, pool_size), then only padding rows (-1)."""
    R = sum(1 for s in slots if s != PAD_SLOT_ID)
    if any(s == PAD_SLOT_ID for s in slots[:R]) or any(s != PAD_SLOT_ID for s in slots[R:]):
        raise ValueError("padding rows (state_indices == -1) must come after every real row")
    real = slots[:R]
    if len(set(real)) != R or (real and (min(real) < 0 or max(real) >= pool_size)):
        raise ValueError(f"the real rows of state_indices must be distinct slots in [0, {pool_size})")
    return R


def run(q, k, v, g_raw, A_log, dt_bias, b, state_pool, state_indices, scale):
    R = check_inputs(q, k, v, g_raw, A_log, dt_bias, b, state_pool, state_indices)
    group = NUM_V_HEADS // NUM_HEADS  # value head hv reads q/k head hv // group
    o = torch.zeros(v.shape, dtype=torch.float32, device=v.device)          # padding rows keep zeros
    new_state_pool = state_pool.clone()
    if R == 0:
        return o.to(v.dtype), new_state_pool

    q_t = l2_normalize(q[:R].float()).repeat_interleave(group, dim=1) * scale  # [R, HV, K]
    k_t = l2_normalize(k[:R].float()).repeat_interleave(group, dim=1)          # [R, HV, K]
    v_t = v[:R].float()                                                        # [R, HV, V]
    decay = torch.exp(kda_gate(g_raw[:R], A_log, dt_bias))                     # [R, HV, K]
    beta = torch.sigmoid(b[:R].float())                                        # [R, HV]

    slots = state_indices[:R].long()
    P = state_pool[slots].float()                                           # gathered copy: [R, HV, V, K]
    P = P * decay[:, :, None, :]                                            # decay each key column
    predicted = (P @ k_t[..., None])[..., 0]                                # S^T k: [R, HV, V]
    P = P + (beta[..., None] * (v_t - predicted))[..., None] * k_t[:, :, None, :]  # delta-rule write
    o[:R] = (P @ q_t[..., None])[..., 0]                                    # read the updated state

    new_state_pool[slots] = P.to(state_pool.dtype)                          # one rounding to the pool dtype
    return o.to(v.dtype), new_state_pool
