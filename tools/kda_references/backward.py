"""KDA backward, dense batch: gradients of the forward op (fla chunk_kda defaults, [K, V] state).

Given the forward inputs and the incoming gradients `do` (of o) and `dht` (of the final state), return
the gradients of L = sum(o * do) + sum(final_state * dht) with respect to q, k, v, g, beta and the
initial state. They are obtained with torch.autograd through the float32 per-token recurrence
    S = diag(exp(g_t)) S;   S = S + beta_t k_t (v_t - S^T k_t)^T;   o_t = S^T (scale q_t)
To keep memory bounded on long sequences, the tokens are processed in segments: a first pass without
autograd records the state at every segment start, then segments are differentiated last to first,
each re-run from its recorded start state with the state gradient flowing back from the next segment.
"""
import torch

# --- definition constants (tools/build_kda_dataset.py rewrites this block per definition) ---
NUM_HEADS = 32
NUM_V_HEADS = 32
HEAD_DIM_K = 128
HEAD_DIM_V = 128
# --- end of definition constants ---

SEGMENT = 64  # tokens re-run under autograd at a time (memory only: the result does not depend on it)


def check_inputs(q, k, v, g, beta, initial_state, do, dht):
    B, T = q.shape[:2]
    assert NUM_V_HEADS % NUM_HEADS == 0
    assert q.shape == (B, T, NUM_HEADS, HEAD_DIM_K) and k.shape == q.shape, (q.shape, k.shape)
    assert v.shape == (B, T, NUM_V_HEADS, HEAD_DIM_V) and do.shape == v.shape, (v.shape, do.shape)
    assert g.shape == (B, T, NUM_V_HEADS, HEAD_DIM_K), g.shape
    assert beta.shape == (B, T, NUM_V_HEADS), beta.shape
    assert initial_state.shape == (B, NUM_V_HEADS, HEAD_DIM_K, HEAD_DIM_V), initial_state.shape
    assert dht.shape == initial_state.shape, dht.shape


def recurrence(q, k, v, g, beta, S, scale):
    """The forward recurrence over a span of tokens, float32. q, k [B, t, H, K]; v [B, t, HV, V];
    g [B, t, HV, K]; beta [B, t, HV]; S [B, HV, K, V]. Returns (o [B, t, HV, V], S at the end)."""
    group = NUM_V_HEADS // NUM_HEADS  # value head hv reads q/k head hv // group
    qs = q.repeat_interleave(group, dim=2) * scale
    ks = k.repeat_interleave(group, dim=2)
    decay = torch.exp(g)
    outputs = []
    for t in range(q.shape[1]):
        k_t = ks[:, t]
        S = S * decay[:, t, :, :, None]                                      # decay each key row
        predicted = (k_t[:, :, None, :] @ S)[:, :, 0]                        # S^T k: [B, HV, V]
        S = S + k_t[..., None] * (beta[:, t, :, None] * (v[:, t] - predicted))[:, :, None, :]
        outputs.append((qs[:, t, :, None, :] @ S)[:, :, 0])                  # read the updated state
    return torch.stack(outputs, dim=1), S


def run(q, k, v, g, beta, initial_state, scale, do, dht):
    check_inputs(q, k, v, g, beta, initial_state, do, dht)
    # autograd must work even when the caller runs under torch.no_grad() or torch.inference_mode()
    with torch.inference_mode(False), torch.enable_grad():
        return gradients(q, k, v, g, beta, initial_state, scale, do, dht)


def gradients(q, k, v, g, beta, initial_state, scale, do, dht):
    T = q.shape[1]
    inputs = [x.float().clone() for x in (q, k, v, g, beta)]  # clone: plain tensors, even from inference mode
    do, dht = do.float().clone(), dht.float().clone()
    bounds = list(range(0, T, SEGMENT)) + [T]

    # Pass 1 (no autograd): the state at the start of every segment.
    starts = [initial_state.float().clone()]
    with torch.no_grad():
        for a, b in zip(bounds[:-2], bounds[1:-1]):
            starts.append(recurrence(*[x[:, a:b] for x in inputs], starts[-1], scale)[1])

    # Pass 2: differentiate segments from last to first; dS carries dL/d(state at the segment's end).
    grads = [torch.zeros_like(x) for x in inputs]
    dS = dht
    for i in reversed(range(len(bounds) - 1)):
        a, b = bounds[i], bounds[i + 1]
        span = [x[:, a:b].detach().requires_grad_() for x in inputs]
        S0 = starts[i].detach().requires_grad_()
        o, S_end = recurrence(*span, S0, scale)
        *d_span, dS = torch.autograd.grad((o, S_end), (*span, S0), (do[:, a:b], dS))
        for grad, d in zip(grads, d_span):
            grad[:, a:b] = d
    dq, dk, dv, dg, dbeta = grads
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dg, dbeta.to(beta.dtype), dS
