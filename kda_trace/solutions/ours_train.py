"""Adapters from the KDA "gate" and "backward" families (docs/KDA_FAMILIES.md) onto our Triton kernels.

`build_gate(definition)` -> `run(g_raw, A_log, dt_bias) -> g` (kernels/gate.py); the gate kind and lower
bound come from the definition's `gate:` and `lower_bound:` tags.
`build_backward(definition)` -> `run(q, k, v, g, beta, initial_state, scale, do, dht) -> (dq, dk, dv, dg,
dbeta, dh0)` (kernels/backward.py); the options come from the tags, read as the forward family reads them.

Kernel modules are imported on first build, after the caller chose compiled or interpreted Triton.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kda_trace.solutions.ours_recurrent import options_from_tags, stage_of

_GATE_INPUTS = ("g_raw", "A_log", "dt_bias")
_BACKWARD_INPUTS = ("q", "k", "v", "g", "beta", "initial_state", "scale", "do", "dht")


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
    """Dense backward of the forward family: the gradients of sum(o * do) + sum(final_state * dht)."""
    from kda_trace.kernels.backward import kda_backward

    opts = options_from_tags(definition, "forward")
    if opts.gate != "precomputed" or opts.beta != "prob" or opts.use_qk_l2norm:
        raise ValueError(f"{definition.name}: the backward family takes precomputed g, beta as a probability and "
                         f"q/k as given")

    def run(q, k, v, g, beta, initial_state, scale, do, dht):
        o = dataclasses.replace(opts, scale=float(scale))
        grads = kda_backward(q, k, v, g, beta, do, o, initial_state=initial_state, dht=dht)
        return grads.dq, grads.dk, grads.dv, grads.dg, grads.dbeta, grads.dh0

    return run


BUILDERS = {"gate": build_gate, "backward": build_backward}
_INPUTS = {"gate": _GATE_INPUTS, "backward": _BACKWARD_INPUTS}


def supports(definition) -> str | None:
    """None when a builder here serves `definition`, else why not."""
    stage = stage_of(definition)
    if stage not in BUILDERS:
        return f"ours_train serves {sorted(BUILDERS)}, not stage {stage!r}"
    names = tuple(getattr(definition, "inputs", {}) or {})
    if names and names != _INPUTS[stage]:
        return f"the {stage} family's inputs are {list(_INPUTS[stage])}, got {list(names)}"
    try:
        if stage == "gate":
            gate_options(definition)
        else:
            opts = options_from_tags(definition, "forward")
            if opts.gate != "precomputed" or opts.beta != "prob" or opts.use_qk_l2norm:
                return "the backward kernel adapter takes precomputed g, beta:prob and qk_norm:none"
            if opts.state_layout != "kv":
                return "the backward family's states are [K, V] (state_layout:kv)"
    except ValueError as e:
        return str(e)
    return None


def build(definition) -> Callable:
    """The run function for `definition`, by its family."""
    reason = supports(definition)
    if reason is not None:
        raise ValueError(f"{definition.name}: {reason}")
    return BUILDERS[stage_of(definition)](definition)
