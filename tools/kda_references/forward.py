"""KDA forward, dense batch: fla's chunk_kda with its defaults (the training / prefill forward).

q and k arrive unit-norm (the caller normalised them), g is the precomputed log decay (<= 0), beta is a
probability, and the state is [K, V] per head (fla's default layout). Specification, per batch row,
value head and token, in float32:
    S = diag(exp(g_t)) S;   S = S + beta_t k_t (v_t - S^T k_t)^T;   o_t = S^T (scale q_t)
"""
import torch

# --- definition constants (tools/build_kda_dataset.py rewrites this block per definition) ---
NUM_HEADS = 32
NUM_V_HEADS = 32
HEAD_DIM_K = 128
HEAD_DIM_V = 128
# --- end of definition constants ---


def check_inputs(q, k, v, g, beta, initial_state):
    B, T = q.shape[:2]
    assert NUM_V_HEADS % NUM_HEADS == 0
    assert q.shape == (B, T, NUM_HEADS, HEAD_DIM_K) and k.shape == q.shape, (q.shape, k.shape)
    assert v.shape == (B, T, NUM_V_HEADS, HEAD_DIM_V), v.shape
    assert g.shape == (B, T, NUM_V_HEADS, HEAD_DIM_K), g.shape
    assert beta.shape == (B, T, NUM_V_HEADS), beta.shape
    if initial_state is not None:
        assert initial_state.shape == (B, NUM_V_HEADS, HEAD_DIM_K, HEAD_DIM_V), initial_state.shape


def run(q, k, v, g, beta, initial_state, scale):
    check_inputs(q, k, v, g, beta, initial_state)
    B, T = q.shape[:2]
    group = NUM_V_HEADS // NUM_HEADS  # value head hv reads q/k head hv // group

    if initial_state is None:
        S = torch.zeros(B, NUM_V_HEADS, HEAD_DIM_K, HEAD_DIM_V, dtype=torch.float32, device=q.device)
    else:
        S = initial_state.float().clone()                    # [B, HV, K, V]
    o = torch.empty_like(v)  # each token's output is cast to v's dtype as it is written

    # The tokens of STEPS steps are brought to float32 at once, so no float32 copy of the whole batch is made.
    STEPS = 64
    for t0 in range(0, T, STEPS):
        block = slice(t0, min(t0 + STEPS, T))
        qs = q[:, block].float().repeat_interleave(group, dim=2) * scale   # [B, STEPS, HV, K]
        ks = k[:, block].float().repeat_interleave(group, dim=2)           # [B, STEPS, HV, K]
        vs = v[:, block].float()                                           # [B, STEPS, HV, V]
        decay = torch.exp(g[:, block].float())                             # [B, STEPS, HV, K]
        b_s = beta[:, block].float()                                       # [B, STEPS, HV]
        o_s = torch.empty_like(vs)
        for i in range(qs.shape[1]):
            k_t = ks[:, i]
            S = S * decay[:, i, :, :, None]                                  # decay each key row
            predicted = (k_t[:, :, None, :] @ S)[:, :, 0]                    # S^T k: [B, HV, V]
            S = S + k_t[..., None] * (b_s[:, i, :, None] * (vs[:, i] - predicted))[:, :, None, :]
            o_s[:, i] = (qs[:, i, :, None, :] @ S)[:, :, 0]                  # read the updated state
        o[:, block] = o_s.to(o.dtype)
    return o, S
