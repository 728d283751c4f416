"""Adapters from the KDA "prefill" and "forward" families (docs/KDA_FAMILIES.md) onto our chunked Triton kernel.

`build_prefill(definition)` / `build_forward(definition)` read the options from the definition's tags (the
same reading as the recurrent adapters: `gate:`, `lower_bound:`, `beta:`, `qk_norm:`, `state_layout:`) and
return `run(**inputs) -> (o, final_state)` in the definition's output order.

The kernel module is imported on first build, not at import time, so that the caller has already chosen
compiled or interpreted Triton (`kda_trace.platform.ensure_triton_can_run`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from kda_trace.solutions.ours_recurrent import (
    _check_cu_seqlens,
    _check_layout,
    _kernel as _recurrent_kernel,
    _scaled,
    forward_adapter,
    options_from_tags,
    prefill_adapter,
    stage_of,
)

SHORT_TOKENS = 64  # a packed batch this short goes token by token (as triton_kda.SHORT_TOKENS)


def _kernel():
    from kda_trace.kernels.chunk import kda_chunk

    return kda_chunk


def build_prefill(definition):
    """Packed varlen prefill: q [total_seq_len, H, K], cu_seqlens [N + 1] -> (o, final_state)."""
    return prefill_adapter(definition, _kernel(), check_cu_seqlens=False)


def build_forward(definition):
    """Dense forward (fla chunk_kda's interface): q [B, T, H, K], precomputed g -> (o, final_state)."""
    return forward_adapter(definition, _kernel())


def build_prefill_chunk_states(definition):
    """Packed varlen prefill that also returns the state before every 64-token chunk of every sequence:
    (o, final_state, chunk_states). A batch of at most 64 tokens runs token by token: each of its sequences
    then has exactly one chunk, whose state is the initial state."""
    opts = dataclasses.replace(options_from_tags(definition, "prefill"), output_final_state=True)
    _check_layout(definition, opts, "initial_state")
    with_scale = _scaled(opts)
    chunked, recurrent = _kernel(), _recurrent_kernel()

    def run(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, scale=None):
        args = (q[None], k[None], v[None], g_raw[None], b[None], with_scale(scale))
        kw = dict(A_log=A_log, dt_bias=dt_bias, initial_state=initial_state, cu_seqlens=cu_seqlens)
        if q.shape[0] > SHORT_TOKENS:
            o, final_state, chunk_states = chunked(*args, **kw, output_chunk_states=True)
            return o[0], final_state, chunk_states
        _check_cu_seqlens(cu_seqlens, q.shape[0])
        o, final_state = recurrent(*args, **kw)
        chunk_states = initial_state.clone() if initial_state is not None else torch.zeros_like(final_state)
        return o[0], final_state, chunk_states

    return run


BUILDERS = {"prefill": build_prefill, "forward": build_forward, "prefill_chunk_states": build_prefill_chunk_states}


def supports(definition) -> str | None:
    """None when a builder here serves `definition`, else why not."""
    stage = stage_of(definition)
    if stage not in BUILDERS:
        return f"the chunked kernel serves {sorted(BUILDERS)}, not stage {stage!r}"
    try:
        opts = options_from_tags(definition, stage)
    except ValueError as e:
        return str(e)
    if stage == "forward" and opts.gate != "precomputed":
        return f"the forward family takes a precomputed g, not gate:{opts.gate}"
    const_axes = getattr(definition, "const_axes", None) or {}
    dims = {a: const_axes.get(a) for a in ("head_dim_k", "head_dim_v")}
    if any(d is not None and d > 256 for d in dims.values()):
        return f"head dims up to 256 are supported, got {dims}"
    return None


def build(definition) -> Callable:
    """The run function for `definition`, by its family."""
    reason = supports(definition)
    if reason is not None:
        raise ValueError(f"{definition.name}: {reason}")
    return BUILDERS[stage_of(definition)](definition)
