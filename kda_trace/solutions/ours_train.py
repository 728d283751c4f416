"""Adapters from the KDA "gate" and "backward" families (docs/KDA_FAMILIES.md) onto our Triton kernels.

`build_gate(definition)` -> `run(g_raw, A_log, dt_bias) -> g` (kernels/gate.py); the gate kind and lower
bound come from the definition's `gate:` and `lower_bound:` tags.
`build_backward(definition)` -> the backward families' `run` (dense, packed, packed through the in-op gate,
L2 norm and beta logits; kernels/backward.py, kernels/autograd.py); options from the tags, read as the
forward family reads them.

Kernel modules are imported on first build, after the caller chose compiled or interpreted Triton.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kda_trace.solutions.ours_recurrent import options_from_tags, stage_of

_GATE_INPUTS = ("g_raw", "A_log", "dt_bias")
_BACKWARD_INPUTS = ("q", "k", "v", "g", "beta", "initial_state", "scale", "do", "dht")
_VARLEN_INPUTS = ("q", "k", "v", "g", "beta", "initial_state", "cu_seqlens", "scale", "do", "dht")
_FUSED_INPUTS = ("q", "k", "v", "g_raw", "A_log", "dt_bias", "b", "initial_state", "cu_seqlens", "scale", "do", "dht")


def gate_options(definition) -> tuple[str, float]:
    """(gate kind, lower bound) of a gate definition from its tags: `gate:unbounded`, or `gate:safe` with
    `lower_bound:<x>` (required: the bound is part of the math, so it is never guessed)."""
    gate = definition.tag("gate")
    if gate not in ("unbounded", "safe"):
        raise ValueError(f"{definition.name}: a gate definition needs a gate:unbounded or gate:safe tag, "
                         f"got gate:{gate}")
    lb = definition.tag("lower_bound")
    if gate == "safe":
        if lb is None:
            raise ValueError(f"{definition.name}: gate:safe needs a lower_bound:<value> tag")
        return gate, float(lb)
    if lb is not None:
        raise ValueError(f"{definition.name}: gate:unbounded with a lower_bound:{lb} tag is contradictory")
    return gate, 0.0


def build_gate(definition):
    """Raw gate -> log decay: g_raw [num_tokens, H, K], A_log [H], dt_bias [H, K] -> g fp32."""
    from kda_trace.kernels.gate import kda_gate

    gate, lb = gate_options(definition)

    def run(g_raw, A_log, dt_bias):
        return kda_gate(g_raw, A_log, dt_bias, gate, lb)

    return run


def build_backward(definition):
    """The backward families: the gradients of sum(o * do) + sum(final_state * dht).

    dense (`kda_bwd_*`: q [B, T, H, K], precomputed g, beta a probability) and packed (`kda_bwd_varlen_*`:
    q [total_seq_len, H, K] with cu_seqlens) go straight to the backward kernel; the packed backward through
    the in-op options (`kda_bwd_fused_*`: raw q/k, g_raw, A_log, dt_bias, beta logits) recomputes the
    element-wise norm, gate and sigmoid and applies their chain rule in Triton kernels around the backward kernel
    (kernels.autograd.kda_backward_raw, kernels/option_grads.py)."""
    from kda_trace.kernels.autograd import kda_backward_raw
    from kda_trace.kernels.backward import kda_backward

    opts = options_from_tags(definition, "forward")
    names = tuple(definition.inputs)
    if names == _BACKWARD_INPUTS:
        def run(q, k, v, g, beta, initial_state, scale, do, dht):
            o = dataclasses.replace(opts, scale=float(scale))
            grads = kda_backward(q, k, v, g, beta, do, o, initial_state=initial_state, dht=dht)
            return grads.dq, grads.dk, grads.dv, grads.dg, grads.dbeta, grads.dh0

        return run
    if names == _VARLEN_INPUTS:
        def run_varlen(q, k, v, g, beta, initial_state, cu_seqlens, scale, do, dht):
            o = dataclasses.replace(opts, scale=float(scale))
            gr = kda_backward(q[None], k[None], v[None], g[None], beta[None], do[None], o,
                              initial_state=initial_state, dht=dht, cu_seqlens=cu_seqlens)
            return gr.dq[0], gr.dk[0], gr.dv[0], gr.dg[0], gr.dbeta[0], gr.dh0

        return run_varlen

    def run_fused(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, scale, do, dht):
        o = dataclasses.replace(opts, scale=float(scale))
        gr = kda_backward_raw(q[None], k[None], v[None], g_raw[None], b[None], do[None], dht, o, A_log=A_log,
                              dt_bias=dt_bias, initial_state=initial_state, cu_seqlens=cu_seqlens)
        return (gr["q"][0], gr["k"][0], gr["v"][0], gr["g"][0], gr["A_log"], gr["dt_bias"], gr["beta"][0],
                gr["initial_state"])

    return run_fused


BUILDERS = {"gate": build_gate, "backward": build_backward}


def supports(definition) -> str | None:
    """None when a builder here serves `definition`, else why not."""
    stage = stage_of(definition)
    if stage not in BUILDERS:
        return f"ours_train serves {sorted(BUILDERS)}, not stage {stage!r}"
    names = tuple(getattr(definition, "inputs", {}) or {})
    try:
        if stage == "gate":
            if names and names != _GATE_INPUTS:
                return f"the gate family's inputs are {list(_GATE_INPUTS)}, got {list(names)}"
            gate_options(definition)
            return None
        families = (_BACKWARD_INPUTS, _VARLEN_INPUTS, _FUSED_INPUTS)
        if names not in families:
            return f"a backward family's inputs are one of {[list(f) for f in families]}, got {list(names)}"
        opts = options_from_tags(definition, "forward")
        fused = names == _FUSED_INPUTS
        if fused != (opts.gate != "precomputed") or fused != (opts.beta != "prob"):
            return f"tags gate:{opts.gate} beta:{opts.beta} disagree with the inputs {list(names)}"
        if opts.state_layout != "kv":
            return "the backward families' states are [K, V] (state_layout:kv)"
    except ValueError as e:
        return str(e)
    return None


def build(definition) -> Callable:
    """The run function for `definition`, by its family."""
    reason = supports(definition)
    if reason is not None:
        raise ValueError(f"{definition.name}: {reason}")
    return BUILDERS[stage_of(definition)](definition)
