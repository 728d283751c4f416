"""KDA fused decode: causal convolution + SiLU, one KDA step against a state pool, gated RMSNorm, in one op.

What an inference engine runs for one new token per request when the three parts are fused into one kernel
(FlashInfer's `fused_kda_decode`, flashinfer/kda_decode.py and flashinfer/kda_kernels/fused_kda_decode.py,
0.7.4). Per request i whose slot s = state_indices[i] is live (s > 0):

1. Depthwise causal convolution of width 4 over the packed row x[i] = q | k | v (each [H, D], H * D channels,
   in that order), without bias, then SiLU. Channel c of projection p (p = 0, 1, 2 for q, k, v) has the taps
   conv_weight[p, 0..3, c]; the slot's convolution window conv_state[s, p * H * D + c, 0..2] holds the three
   previous inputs, oldest first, and the new input takes tap 3:
       y = w0 * h0 + w1 * h1 + w2 * h2 + w3 * x;   mixed = y * sigmoid(y)
   computed in float32 and rounded to bfloat16 (the kernel rounds it; an unfused engine's convolution writes
   bf16 too). The window moves by one: new_conv_state[s] = [h1, h2, x] (bf16 copies, bit-exact).
2. The decode step on q, k, v = mixed split in three (the decode family's math, tools/kda_references/decode.py):
   q and k L2-normalised (x / sqrt(sum(x^2) + 1e-6)), the in-op gate from g_raw, A_log and dt_bias, beta =
   sigmoid(b), and on P = S^T ([V, K], K-last, the pool's layout), in float32:
       P = P diag(exp(g));   P = P + beta (v - P k) k^T;   o = P (scale q)
   The pool is float32 or bfloat16: the slot's state is read into float32 (exact) and rounded once, to nearest
   even, to the pool's dtype when it is stored. o is rounded to bfloat16 (the kernel rounds it before the norm,
   as the unfused decode returns it).
3. Gated RMSNorm per head over D, in float32: out = o / sqrt(mean(o^2) + NORM_EPS) * norm_weight *
   sigmoid(output_gate), rounded to bfloat16 (Kimi's FusedRMSNormGated with the sigmoid activation; the
   kernel's norm_eps defaults to 1e-5).

Slots: slot 0 of both pools is a null slot that no request owns (FlashInfer reserves it). A row whose slot is
not positive (-1, vLLM's PAD_SLOT_ID, or 0, the null slot) is a padding row of a CUDA-graph batch: its output
is zero and it writes nothing. Padding rows may sit anywhere in the batch; live slots are distinct and in
[1, pool_size). Both pools are returned as new tensors (the inputs are never modified): the live rows' slots
updated, every other slot (the null slot included) a bit-identical copy.

Choices where FlashInfer gives no input: `scale` is an input here (as in every family that reads q); FlashInfer
fixes it at 128^-0.5, which is what the workloads pass. NORM_EPS is a definition constant (FlashInfer's default
1e-5). dt_bias is [H, D] (FlashInfer's [H * D] viewed per head). FlashInfer's kernel evaluates sigmoid, exp and
rsqrt with approximate instructions; here they are exact float32 functions.
"""
import torch
import torch.nn.functional as F

# --- definition constants (tools/build_kda_dataset.py rewrites this block per definition) ---
NUM_HEADS = 12
HEAD_DIM = 128
CONV_WIDTH = 4
NORM_EPS = 1e-05
LOWER_BOUND = -5.0  # None: unbounded gate; a number: the "safe" lower-bound gate
# --- end of definition constants ---


def causal_conv_silu(x, conv_weight, window):
    """x [R, C], conv_weight [3, CONV_WIDTH, C / 3], window [R, C, CONV_WIDTH - 1] (oldest first)
    -> SiLU of the causal convolution, float32 [R, C] (not rounded)."""
    w = conv_weight.float().permute(0, 2, 1).reshape(-1, CONV_WIDTH)          # [C, CONV_WIDTH]: channel-major
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for j in range(CONV_WIDTH - 1):                                            # oldest tap first
        y = y + window[:, :, j].float() * w[:, j]
    y = y + x.float() * w[:, CONV_WIDTH - 1]                                   # the new input takes the last tap
    return y * torch.sigmoid(y)


def l2_normalize(x):
    """x / sqrt(sum(x^2) + 1e-6) along the last (head) dimension."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def kda_gate(g_raw, A_log, dt_bias):
    """Raw gate [..., H, D] -> log decay g <= 0, float32."""
    x = g_raw.float() + dt_bias.float()
    a = torch.exp(A_log.float())[:, None]
    if LOWER_BOUND is None:
        return -a * F.softplus(x)                # softplus(x) = x for x > 20
    return LOWER_BOUND * torch.sigmoid(a * x)    # in [LOWER_BOUND, 0]


def kda_step(q, k, v, g_raw, A_log, dt_bias, b, P, scale):
    """One token per row, float32: q, k, v [R, H, D] (raw), P [R, H, V, K] float32 -> (o [R, H, V], new P)."""
    q_t = l2_normalize(q.float()) * scale
    k_t = l2_normalize(k.float())
    decay = torch.exp(kda_gate(g_raw, A_log, dt_bias))                      # [R, H, K]
    beta = torch.sigmoid(b.float())                                         # [R, H]
    P = P * decay[:, :, None, :]                                            # decay each key column
    predicted = (P @ k_t[..., None])[..., 0]                                # S^T k: [R, H, V]
    P = P + (beta[..., None] * (v.float() - predicted))[..., None] * k_t[:, :, None, :]  # delta-rule write
    return (P @ q_t[..., None])[..., 0], P                                  # read the updated state


def gated_rms_norm(o, output_gate, norm_weight):
    """o, output_gate [R, H, D] -> o / sqrt(mean(o^2) + NORM_EPS) * norm_weight * sigmoid(output_gate), float32."""
    o = o.float()
    inv_rms = torch.rsqrt((o * o).mean(-1, keepdim=True) + NORM_EPS)
    return o * inv_rms * norm_weight.float() * torch.sigmoid(output_gate.float())


def live_rows(slots, pool_size):
    """Indices of the rows with a positive slot; their slots must be distinct and below pool_size."""
    live = [i for i, s in enumerate(slots) if s > 0]
    owned = [slots[i] for i in live]
    if len(set(owned)) != len(owned) or (owned and max(owned) >= pool_size):
        raise ValueError(f"live rows of state_indices (> 0) must name distinct slots in [1, {pool_size})")
    return live


def check_inputs(x, conv_weight, conv_state, g_raw, A_log, dt_bias, b, state_pool, state_indices,
                 output_gate, norm_weight):
    B, H, D = x.shape[0], NUM_HEADS, HEAD_DIM
    assert x.shape == (B, 3 * H * D), x.shape
    assert conv_weight.shape == (3, CONV_WIDTH, H * D), conv_weight.shape
    assert conv_state.shape[1:] == (3 * H * D, CONV_WIDTH - 1), conv_state.shape
    assert g_raw.shape == (B, H, D) and b.shape == (B, H), (g_raw.shape, b.shape)
    assert A_log.shape == (H,) and dt_bias.shape == (H, D), (A_log.shape, dt_bias.shape)
    assert state_pool.shape[1:] == (H, D, D) and state_pool.shape[0] == conv_state.shape[0], state_pool.shape
    assert state_indices.shape == (B,), state_indices.shape
    assert output_gate.shape == (B, H, D) and norm_weight.shape == (D,), (output_gate.shape, norm_weight.shape)
    return live_rows(state_indices.tolist(), state_pool.shape[0])


def run(x, conv_weight, conv_state, g_raw, A_log, dt_bias, b, state_pool, state_indices, output_gate,
        norm_weight, scale):
    live = check_inputs(x, conv_weight, conv_state, g_raw, A_log, dt_bias, b, state_pool, state_indices,
                        output_gate, norm_weight)
    B, H, D = x.shape[0], NUM_HEADS, HEAD_DIM
    out = torch.zeros((B, H, D), dtype=torch.bfloat16, device=x.device)   # padding rows keep zeros
    new_conv_state = conv_state.clone()
    new_state_pool = state_pool.clone()
    if not live:
        return out, new_conv_state, new_state_pool

    rows = torch.tensor(live, dtype=torch.long, device=x.device)
    slots = state_indices[rows].long()
    window = conv_state[slots]                                              # [R, 3 * H * D, CONV_WIDTH - 1]
    # 1. convolution + SiLU, rounded to bf16; the window moves by one (bit-exact copies)
    mixed = causal_conv_silu(x[rows], conv_weight, window).to(torch.bfloat16).float()
    new_conv_state[slots] = torch.cat([window[:, :, 1:], x[rows][:, :, None].to(conv_state.dtype)], dim=2)
    q, k, v = mixed.reshape(len(live), 3, H, D).unbind(1)
    # 2. the decode step from the slot's stored state, one rounding to the pool dtype at the store
    o, P = kda_step(q, k, v, g_raw[rows], A_log, dt_bias, b[rows], state_pool[slots].float(), scale)
    new_state_pool[slots] = P.to(state_pool.dtype)
    o = o.to(torch.bfloat16)                                                # the recurrent output, as decode returns it
    # 3. gated RMSNorm, rounded to bf16
    out[rows] = gated_rms_norm(o, output_gate[rows], norm_weight).to(torch.bfloat16)
    return out, new_conv_state, new_state_pool
