"""Adapters from the KDA "prefill" and "forward" families (docs/KDA_FAMILIES.md) onto our chunked Triton kernel.

`build_prefill(definition)` / `build_forward(definition)` read the options from the definition's tags (the
same reading as the recurrent adapters: `gate:`, `lower_bound:`, `beta:`, `qk_norm:`, `state_layout:`) and
return `run(**inputs) -> (o, final_state)` in the definition's output order.

The kernel module is imported on first build, not at import time, so that the caller has already chosen
compiled or interpreted Triton (`kda_trace.platform.ensure_triton_can_run`).
"""

from __future__ import annotations

from collections.abc import Callable

from kda_trace.solutions.ours_recurrent import forward_adapter, options_from_tags, prefill_adapter, stage_of


def _kernel():
    from kda_trace.kernels.chunk import kda_chunk

    return kda_chunk


def build_prefill(definition):
    """Packed varlen prefill: q [total_seq_len, H, K], cu_seqlens [N + 1] -> (o, final_state)."""
    return prefill_adapter(definition, _kernel(), check_cu_seqlens=False)


def build_forward(definition):
    """Dense forward (fla chunk_kda's interface): q [B, T, H, K], precomputed g -> (o, final_state)."""
    return forward_adapter(definition, _kernel())


BUILDERS = {"prefill": build_prefill, "forward": build_forward}


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
