"""KDA you can train through: `kda_autograd(...)` returns (o, final_state) and `.backward()` works.

One `torch.autograd.Function` over the whole operator, in-kernel options included (q/k L2 norm, the gate from
g_raw, A_log and dt_bias, beta from logits), as Kimi Linear trains:
- forward: our chunked Triton kernel (kernels/chunk.py, bf16 intermediates as fla's chunk_kda) with every option
  applied inside it, for fp32/bf16/fp16 inputs; when every input is float64 (so that `torch.autograd.gradcheck`
  can compare finite differences with the backward), the options in PyTorch and the exact token-by-token forward
  of kernels/backward.py;
- backward: `kda_backward_raw` (kernels/backward.py's fp32 gradients of the recurrence, which recomputes the states
  from the saved raw inputs; the element-wise norm, gate and sigmoid recomputed and their chain rule applied by
  Triton kernels around it, kernels/option_grads.py). The forward keeps the raw inputs and, unless asked not to,
  its chunk matrices (P, A_qk, (I + A_kk)^-1 in fp32), which the backward's chunked mode would otherwise recompute;
  the backward frees each of them after its last reader.
Gradients reach q, k, v, g or g_raw, A_log, dt_bias, beta or its logits, and the initial state.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kda_trace.kernels.options import KDAOptions


class _KDA(torch.autograd.Function):
    """(q, k, v, g, beta, h0, A_log, dt_bias) -> (o, final_state) under `opts` (its output_final_state True)."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, h0, A_log, dt_bias, opts, cu_seqlens, keep):
        from kda_trace.kernels.backward import LAUNCH, kda_forward_exact
        from kda_trace.kernels.chunk import kda_chunk

        kept = {}
        keep = keep and any(ctx.needs_input_grad)  # no backward will come: nothing to keep for it
        if all(x.dtype == torch.float64 for x in (q, k, v, g, beta)):
            q_n, k_n, g_n, beta_n = _apply_options(q, k, g, beta, A_log, dt_bias, opts)
            o, ht = kda_forward_exact(q_n, k_n, v, g_n, beta_n, _core(opts), initial_state=h0, cu_seqlens=cu_seqlens)
        else:
            o, ht = kda_chunk(q, k, v, g, beta, opts, A_log=A_log, dt_bias=dt_bias, initial_state=h0,
                              cu_seqlens=cu_seqlens, saved=kept if keep else None,
                              save_states=bool(LAUNCH["keep_states"]) and q.element_size() <= 2)
        ctx.save_for_backward(q, k, v, g, beta, h0, A_log, dt_bias, cu_seqlens)
        # the forward's intermediates for the backward on ctx itself rather than as saved tensors (which live until
        # the backward returns): the backward takes them out and drops each after its last reader
        ctx.kept = kept or None
        ctx.opts = opts
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, g, beta, h0, A_log, dt_bias, cu_seqlens = ctx.saved_tensors
        if do is None:
            do = torch.zeros_like(v)
        mats, ctx.kept = ctx.kept, None  # a second backward (retain_graph) recomputes them
        gr = kda_backward_raw(q, k, v, g, beta, do, dht, ctx.opts, A_log=A_log, dt_bias=dt_bias, initial_state=h0,
                              cu_seqlens=cu_seqlens, chunk_matrices=mats, release_chunk_matrices=True)
        cast = lambda name, x: None if x is None or gr[name] is None else gr[name].to(x.dtype)  # noqa: E731
        return (cast("q", q), cast("k", k), cast("v", v), cast("g", g), cast("beta", beta),
                cast("initial_state", h0), cast("A_log", A_log), cast("dt_bias", dt_bias), None, None, None)


def _core(opts: KDAOptions) -> KDAOptions:
    """opts without the in-kernel options (what kernels/backward.py's core takes)."""
    import dataclasses

    return dataclasses.replace(opts, use_qk_l2norm=False, gate="precomputed", beta="prob")


def _apply_options(q, k, g, beta, A_log, dt_bias, opts: KDAOptions):
    """(q, k, g, beta) after the options of `opts` (L2 norm, gate, beta form), in PyTorch (differentiable)."""
    if opts.use_qk_l2norm:
        q, k = _l2norm(q), _l2norm(k)
    if opts.gate != "precomputed":
        g = gate_torch(g, A_log, dt_bias, opts.gate, opts.lower_bound)
    beta = {"prob": lambda b: b, "logits": torch.sigmoid, "logits_x2": lambda b: 2 * torch.sigmoid(b)}[opts.beta](beta)
    return q, k, g, beta


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    x = x.float() if x.dtype != torch.float64 else x
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def gate_torch(g_raw, A_log, dt_bias, gate: str, lower_bound: float = -5.0) -> torch.Tensor:
    """The log decay from a raw gate in PyTorch (differentiable in g_raw, A_log and dt_bias), fp32 (fp64 for
    fp64 inputs): unbounded -exp(A_log) softplus(g_raw + dt_bias), or safe lower_bound sigmoid(exp(A_log) x)."""
    HV, K = g_raw.shape[-2:]
    wide = g_raw.dtype == torch.float64
    f = (lambda t: t) if wide else (lambda t: t.float())
    x = f(g_raw) + f(dt_bias).reshape(HV, K)
    a = torch.exp(f(A_log)).reshape(HV, 1)
    if gate == "unbounded":
        return -a * F.softplus(x)  # torch's softplus: x for x > 20
    if gate == "safe":
        return lower_bound * torch.sigmoid(a * x)
    raise ValueError(f"gate must be unbounded or safe here, got {gate!r}")


def kda_autograd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    use_qk_l2norm: bool = False,
    gate: str = "precomputed",
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    lower_bound: float = -5.0,
    beta_kind: str = "prob",
    state_layout: str = "kv",
    keep_chunk_matrices: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Differentiable KDA (dense or packed varlen), forward by our Triton kernels, backward by ours.

    Args:
        q, k: `[B, T, H, K]`; v: `[B, T, HV, V]` (HV a multiple of H).
        g: `[B, T, HV, K]`: the log decay (gate "precomputed") or the raw gate g_raw ("unbounded": g =
            -exp(A_log) softplus(g_raw + dt_bias); "safe": g = lower_bound sigmoid(exp(A_log) (g_raw + dt_bias))).
        beta: `[B, T, HV]`: a probability (beta_kind "prob") or logits ("logits": sigmoid(b); "logits_x2":
            2 sigmoid(b)).
        scale: query scale (None: K ** -0.5).
        initial_state: `[N, HV, K, V]` ("kv") or `[N, HV, V, K]` ("vk") fp32 (fp64 for checks), or None.
        cu_seqlens: `[N + 1]` cumulative lengths of a packed batch (B = 1), or None.
        use_qk_l2norm: L2-normalise q and k (x / sqrt(sum x^2 + 1e-6)) first.
        A_log `[HV]`, dt_bias `[HV, K]`: the gate's parameters (needed unless gate is "precomputed").
        keep_chunk_matrices: where some input requires grad, the forward keeps its chunk matrices (P, A_qk and
            (I + A_kk)^-1, fp32, 48 KiB per 64 tokens and value head: 384 MiB at 32 heads x 16384 tokens) until the
            backward, which then does not recompute them (fla's chunk_kda keeps its A_qk and A_kk the same way);
            with 2-byte q/k/v and the "kv" state layout also its fp32 state before every chunk and V_new
            (backward.LAUNCH["keep_states"]; K V + 64 V fp32 values per 64 tokens and value head, 96 KiB at
            K = V = 128: 768 MiB at 32 heads x 16384 tokens) and its bf16 W and k exp(G_last - G) (2 K values
            per token and value head, 256 MiB more there), so that the backward runs one recursion, not two, and
            computes neither.
            False: recomputed (the least memory).

    Returns:
        o `[B, T, HV, V]` (v's dtype) and the final state (initial_state's layout, fp32 / fp64). Both take
        part in autograd; gradients reach every tensor argument that requires grad (not cu_seqlens).
    """
    opts = KDAOptions(scale=scale, use_qk_l2norm=use_qk_l2norm, gate=gate, lower_bound=lower_bound,
                      beta=beta_kind, state_layout=state_layout, output_final_state=True)
    if gate != "precomputed" and (A_log is None or dt_bias is None):
        raise ValueError(f"gate {gate!r} needs A_log and dt_bias")
    return _KDA.apply(q, k, v, g, beta, initial_state, A_log, dt_bias, opts, cu_seqlens, keep_chunk_matrices)


def kda_backward_raw(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    do: torch.Tensor,
    dht: torch.Tensor | None,
    opts: KDAOptions,
    *,
    A_log: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    chunk_matrices: dict | None = None,
    release_chunk_matrices: bool = False,
) -> dict[str, torch.Tensor | None]:
    """Gradients of sum(o * do) + sum(final_state * dht) with respect to the raw inputs of a KDA call with
    in-op options (`opts`: L2 norm, gate kind and bound, beta form, state layout, scale): the core by
    kernels/backward.py, the element-wise norm / gate / sigmoid and their chain rule by kernels/option_grads.py
    and kernels/gate.py around it (no torch.autograd: works under torch.no_grad and inference mode). Returns
    {"q", "k", "v", "g" (of g or g_raw), "A_log", "dt_bias", "beta" (of beta or its logits), "initial_state"},
    each in its input's dtype (None where not given). chunk_matrices: the forward's, as kernels/backward.py
    `kda_backward` takes them (kept by `kda_chunk(..., saved=...)`; with the L2 norm also its "rq" and "rk"
    factors, used instead of recomputing them), or None. release_chunk_matrices: chunk_matrices is the caller's to
    give away (kernels/backward.py `kda_backward`'s): emptied as the backward takes its tensors, each freed after its
    last reader.

    Where the backward's workspace would pass its limit (kernels/backward.py `head_groups`), groups of heads run
    one after the other, the element-wise part included: its float32 gate (and, where the core takes no norm
    factors, float32 normalised q and k) take as much memory as the backward's own buffers at 96 heads x 65536
    tokens."""
    from kda_trace.kernels.backward import _heads, head_groups
    from kda_trace.kernels.chunk import _sequence_tables

    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    n_chunks = _sequence_tables(cu_seqlens, B, T, q.device)[3]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    groups = head_groups((B, T, H, HV, K, V, N), n_chunks, acc, q.device)
    args = dict(q=q, k=k, v=v, g=g, beta=beta, do=do, dht=dht, A_log=A_log, dt_bias=dt_bias,
                initial_state=initial_state)
    if len(groups) == 1:
        return _backward_raw_heads(opts, cu_seqlens, chunk_matrices, release_chunk_matrices, **args)
    # the heads each argument and gradient has, and where: q, k on dim 2 by q/k heads; the rest by value heads
    value_dim = dict(v=2, g=2, beta=2, do=2, dht=1, initial_state=1, A_log=0, dt_bias=0)
    shaped = dict(A_log=(HV,), dt_bias=(HV, K))  # any shape of HV (HV x K) elements
    out = {}
    for qk, vh in groups:
        sub = {}
        for n, x in args.items():
            if x is not None:
                x = x.reshape(shaped[n]) if n in shaped else x
                sub[n] = x.narrow(2, qk.start, qk.stop - qk.start) if n in ("q", "k") else \
                    x.narrow(value_dim[n], vh.start, vh.stop - vh.start)
        mats = None if chunk_matrices is None else {n: _heads(m, vh) for n, m in chunk_matrices.items()}
        part = _backward_raw_heads(opts, cu_seqlens, mats, True, **{n: sub.get(n) for n in args})
        for n, d in part.items():
            if d is None:
                out.setdefault(n, None)
                continue
            given = args["initial_state"] if n == "initial_state" else args[n]
            if n not in out:
                out[n] = torch.empty(shaped.get(n, given.shape), dtype=d.dtype, device=d.device)
            dim, heads = (2, qk) if n in ("q", "k") else (value_dim[n], vh)
            out[n].narrow(dim, heads.start, heads.stop - heads.start).copy_(d)
        del part
    for n in shaped:
        if out.get(n) is not None:
            out[n] = out[n].reshape(args[n].shape)
    return out


def _backward_raw_heads(opts, cu_seqlens, chunk_matrices, release, *, q, k, v, g, beta, do, dht, A_log, dt_bias,
                        initial_state):
    """`kda_backward_raw` on all the heads it is given at once: the options' results recomputed (q's and k's
    L2-norm factors, which the core reads with q and k (LAUNCH["qk_norm_factors"]; else normalised fp32 copies;
    the forward's when chunk_matrices has them, "rq" and "rk"), and the gate in Triton kernels, beta's sigmoid in
    PyTorch), the core backward, then the chain rule back to the raw inputs (kernels/option_grads.py)."""
    from kda_trace.kernels import option_grads
    from kda_trace.kernels.backward import LAUNCH, kda_backward
    from kda_trace.kernels.gate import kda_gate

    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    l2 = opts.use_qk_l2norm
    q_n, k_n, norms = q, k, None
    kept_norms = None
    if chunk_matrices is not None and "rq" in chunk_matrices:  # the forward's factors, [B * T, value heads]
        if not release:
            chunk_matrices = dict(chunk_matrices)
        kept_norms = (chunk_matrices.pop("rq"), chunk_matrices.pop("rk"))
    if l2 and LAUNCH["qk_norm_factors"]:  # the core reads q, k with their norm factors
        if kept_norms is not None:  # a q/k head's factor is the same for each of its value heads: take the first
            B, T, H = q.shape[:3]
            norms = tuple(r.reshape(B, T, H, -1)[..., 0].to(acc) for r in kept_norms)
        else:
            norms = (option_grads.l2_factors(q, acc), option_grads.l2_factors(k, acc))
    elif l2:
        q_n, k_n = option_grads.l2_normalize(q, acc), option_grads.l2_normalize(k, acc)
    g_n = g if opts.gate == "precomputed" else kda_gate(g, A_log, dt_bias, opts.gate, opts.lower_bound)
    s = None if opts.beta == "prob" else torch.sigmoid(beta.to(acc))
    beta_n = {"prob": beta, "logits": s, "logits_x2": None if s is None else 2 * s}[opts.beta]
    gr = kda_backward(q_n, k_n, v, g_n, beta_n, do, _core(opts), initial_state=initial_state, dht=dht,
                      cu_seqlens=cu_seqlens, chunk_matrices=chunk_matrices, release_chunk_matrices=release,
                      gate_bound=float(opts.lower_bound) if opts.gate == "safe" else None, qk_norms=norms,
                      strong_gates=opts.gate == "unbounded")
    del q_n, k_n, g_n, beta_n, norms
    out = {"v": gr.dv, "initial_state": gr.dh0, "A_log": None, "dt_bias": None}
    for name, x, d in (("q", q, gr.dq), ("k", k, gr.dk)):
        out[name] = option_grads.l2_normalize_backward(x, d.to(acc)) if l2 else d.to(x.dtype)
    if opts.gate == "precomputed":
        out["g"] = gr.dg.to(g.dtype)
    else:
        out["g"], out["A_log"], out["dt_bias"] = option_grads.gate_backward(g, A_log, dt_bias, gr.dg.to(acc),
                                                                            opts.gate, opts.lower_bound)
    dbeta = gr.dbeta if s is None else gr.dbeta.to(acc) * s * (1 - s) * (2 if opts.beta == "logits_x2" else 1)
    out["beta"] = dbeta.to(beta.dtype)
    return out
