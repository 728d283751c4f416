"""KDA gate alone: the raw gate input (a projection of the hidden state) to the per-channel log decay.

unbounded (Kimi Linear):      g = -exp(A_log) * softplus(g_raw + dt_bias)        (softplus(x) = x for x > 20)
safe / lower bound (K3, GLM): g = LOWER_BOUND * sigmoid(exp(A_log) * (g_raw + dt_bias)), in [LOWER_BOUND, 0]
computed in float32; A_log [H] is per head, dt_bias [H, K] per head and channel.
"""
import torch
import torch.nn.functional as F

# --- definition constants (tools/build_kda_dataset.py rewrites this block per definition) ---
NUM_HEADS = 32
HEAD_DIM_K = 128
LOWER_BOUND = None  # None: unbounded gate; a number: the "safe" lower-bound gate
# --- end of definition constants ---


def run(g_raw, A_log, dt_bias):
    assert g_raw.shape[1:] == (NUM_HEADS, HEAD_DIM_K), g_raw.shape
    assert A_log.shape == (NUM_HEADS,) and dt_bias.shape == (NUM_HEADS, HEAD_DIM_K)
    x = g_raw.float() + dt_bias.float()
    a = torch.exp(A_log.float())[:, None]        # [H, 1]
    if LOWER_BOUND is None:
        return -a * F.softplus(x)
    return LOWER_BOUND * torch.sigmoid(a * x)
