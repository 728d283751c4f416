"""KDA backward, packed variable-length batch (how training packs documents): gradients of fla chunk_kda's
forward with cu_seqlens (unit-norm q/k from the caller, precomputed g, beta a probability, [K, V] state).

Given the forward inputs and the incoming gradients `do` (of o) and `dht` (of each sequence's final state),
return the gradients of L = sum(o * do) + sum(final_state * dht) with respect to q, k, v, g, beta and the
initial states. They are obtained with torch.autograd through the float32 per-token recurrence
    S = diag(exp(g_t)) S;   S = S + beta_t k_t (v_t - S^T k_t)^T;   o_t = S^T (scale q_t)
run separately for every sequence (sequences never share state). To keep memory bounded, each sequence is
processed in segments: a first pass without autograd records the state at every segment start, then the
segments are differentiated last to first, each re-run from its recorded start state with the state
gradient flowing back from the next segment.
"""
import torch

# --- definition constants (tools/build_kda_dataset.py rewrites this block per definition) ---
NUM_HEADS = 32
NUM_V_HEADS = 32
HEAD_DIM_K = 128
HEAD_DIM_V = 128
# --- end of definition constants ---

SEGMENT = 64  # tokens re-run under autograd at a time (memory only: the result does not depend on it)


def check_inputs(q, k, v, g, beta, initial_state, cu_seqlens, do, dht):
    T = q.shape[0]
    N = cu_seqlens.shape[0] - 1
    assert NUM_V_HEADS % NUM_HEADS == 0
    assert q.shape == (T, NUM_HEADS, HEAD_DIM_K) and k.shape == q.shape, (q.shape, k.shape)
    assert v.shape == (T, NUM_V_HEADS, HEAD_DIM_V) and do.shape == v.shape, (v.shape, do.shape)
    assert g.shape == (T, NUM_V_HEADS, HEAD_DIM_K), g.shape
    assert beta.shape == (T, NUM_V_HEADS), beta.shape
    assert initial_state.shape == (N, NUM_V_HEADS, HEAD_DIM_K, HEAD_DIM_V), initial_state.shape
    assert dht.shape == initial_state.shape, dht.shape
    bounds = cu_seqlens.tolist()
    assert bounds[0] == 0 and bounds[-1] == T, bounds
    assert all(e > s for s, e in zip(bounds, bounds[1:])), "every sequence needs at least one token"


def recurrence(q, k, v, g, beta, S, scale):
    """The forward recurrence over a span of one sequence's tokens, float32. q, k [t, H, K]; v [t, HV, V];
    g [t, HV, K]; beta [t, HV]; S [HV, K, V]. Returns (o [t, HV, V], S at the end)."""
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
    """Gradients of one sequence's span inputs and its initial state, given do and dL/d(final state)."""
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


def run(q, k, v, g, beta, initial_state, cu_seqlens, scale, do, dht):
    check_inputs(q, k, v, g, beta, initial_state, cu_seqlens, do, dht)
    # autograd must work even when the caller runs under torch.no_grad() or torch.inference_mode()
    with torch.inference_mode(False), torch.enable_grad():
        inputs = [x.float().clone() for x in (q, k, v, g, beta)]  # clone: plain tensors, even from inference mode
        do32, dht32, h0 = do.float().clone(), dht.float().clone(), initial_state.float().clone()
        grads = [torch.zeros_like(x) for x in inputs]
        dh0 = torch.zeros_like(h0)
        bounds = cu_seqlens.tolist()
        for n, (s, e) in enumerate(zip(bounds, bounds[1:])):
            seq_grads, dh0[n] = sequence_gradients([x[s:e] for x in inputs], h0[n], do32[s:e], dht32[n], scale)
            for grad, d in zip(grads, seq_grads):
                grad[s:e] = d
    dq, dk, dv, dg, dbeta = grads
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dg, dbeta.to(beta.dtype), dh0
