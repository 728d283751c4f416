"""KDA backward through the in-op gate, q/k L2 norm and beta logits, packed variable-length batch: what
Kimi Linear's training differentiates (fla chunk_kda with use_qk_l2norm_in_kernel, use_gate_in_kernel and
use_beta_sigmoid_in_kernel, cu_seqlens, [K, V] state).

Forward, per sequence, in float32: q, k = l2_normalize(q, k); the log decay
    unbounded (Kimi Linear):      g = -exp(A_log) * softplus(g_raw + dt_bias)       (softplus(x) = x for x > 20)
    safe / lower bound (K3, GLM): g = LOWER_BOUND * sigmoid(exp(A_log) * (g_raw + dt_bias))
beta = sigmoid(b), then the recurrence
    S = diag(exp(g_t)) S;   S = S + beta_t k_t (v_t - S^T k_t)^T;   o_t = S^T (scale q_t)
Given `do` (gradient of o) and `dht` (of each sequence's final state), return the gradients of
L = sum(o * do) + sum(final_state * dht) with respect to the raw inputs q, k, v, g_raw, A_log, dt_bias, b and
the initial states, by torch.autograd: first through the recurrence (per sequence, in segments re-run from
recorded states, to bound memory) to the normalised q, k, the decay g and beta, then through the element-wise
norm, gate and sigmoid to the raw inputs. dA_log and ddt_bias sum over every token of every sequence.
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

SEGMENT = 64  # tokens re-run under autograd at a time (memory only: the result does not depend on it)


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


def recurrence(q, k, v, g, beta, S, scale):
    """The forward recurrence over a span of one sequence's tokens, float32. q, k [t, H, K] (normalised);
    v [t, HV, V]; g [t, HV, K]; beta [t, HV]; S [HV, K, V]. Returns (o [t, HV, V], S at the end)."""
    group = NUM_V_HEADS // NUM_HEADS  # value head hv reads q/k head hv // group
    qs = q.repeat_interleave(group, dim=1) * scale
    ks = k.repeat_interleave(group, dim=1)
    decay = torch.exp(g)
    outputs = []
    for t in range(q.shape[0]):
        k_t = ks[t]
        S = S * decay[t, :, :, None]                                         # decay each key row
        predicted = (k_t[:, None, :] @ S)[:, 0]                              # S^T k: [HV, V]
        S = S + k_t[..., None] * (beta[t, :, None] * (v[t] - predicted))[:, None, :]
        outputs.append((qs[t, :, None, :] @ S)[:, 0])                        # read the updated state
    return torch.stack(outputs), S


def sequence_gradients(inputs, S0, do, dS, scale):
    """Gradients of one sequence's recurrence inputs and its initial state, given do and dL/d(final state)."""
    T = inputs[0].shape[0]
    bounds = list(range(0, T, SEGMENT)) + [T]
    starts = [S0]
    with torch.no_grad():
        for a, b in zip(bounds[:-2], bounds[1:-1]):
            starts.append(recurrence(*[x[a:b] for x in inputs], starts[-1], scale)[1])
    grads = [torch.zeros_like(x) for x in inputs]
    for i in reversed(range(len(bounds) - 1)):
        a, b = bounds[i], bounds[i + 1]
        span = [x[a:b].detach().requires_grad_() for x in inputs]
        start = starts[i].detach().requires_grad_()
        o, S_end = recurrence(*span, start, scale)
        *d_span, dS = torch.autograd.grad((o, S_end), (*span, start), (do[a:b], dS))
        for grad, d in zip(grads, d_span):
            grad[a:b] = d
    return grads, dS


def run(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, scale, do, dht):
    check_inputs(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, do, dht)
    # autograd must work even when the caller runs under torch.no_grad() or torch.inference_mode()
    with torch.inference_mode(False), torch.enable_grad():
        # clone: plain tensors, even from inference mode
        raw = [x.float().clone().requires_grad_() for x in (q, k, g_raw, A_log, dt_bias, b)]
        q32, k32, g_raw32, A_log32, dt_bias32, b32 = raw
        # the element-wise part, recorded by autograd once for the whole batch
        mid = [l2_normalize(q32), l2_normalize(k32), kda_gate(g_raw32, A_log32, dt_bias32), torch.sigmoid(b32)]
        q_n, k_n, g, beta = [x.detach() for x in mid]
        v32, do32 = v.float().clone(), do.float().clone()
        dht32, h0 = dht.float().clone(), initial_state.float().clone()
        grads = [torch.zeros_like(x) for x in (q_n, k_n, v32, g, beta)]
        dh0 = torch.zeros_like(h0)
        bounds = cu_seqlens.tolist()
        for n, (s, e) in enumerate(zip(bounds, bounds[1:])):
            span = [x[s:e] for x in (q_n, k_n, v32, g, beta)]
            seq_grads, dh0[n] = sequence_gradients(span, h0[n], do32[s:e], dht32[n], scale)
            for grad, d in zip(grads, seq_grads):
                grad[s:e] = d
        dq_n, dk_n, dv, dg, dbeta = grads
        dq, dk, dg_raw, dA_log, ddt_bias, db = torch.autograd.grad(mid, raw, (dq_n, dk_n, dg, dbeta))
    return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dg_raw.to(g_raw.dtype), dA_log, ddt_bias,
            db.to(b.dtype), dh0)
