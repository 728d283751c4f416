"""Adapters from the KDA definition families (docs/KDA_FAMILIES.md) onto our token-by-token Triton kernel.

Each `build_<family>(definition)` reads the options from the definition's tags and returns
`run(**inputs) -> tuple` in the definition's output order. Decode and MTP update `state_pool` in place and
return it as `new_state_pool` (the definitions allow it: `"inplace": {"new_state_pool": "state_pool"}`).

The kernel module is imported on first build, not at import time, so that the caller has already chosen
compiled or interpreted Triton (`kda_trace.platform.ensure_triton_can_run`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from kda_trace.kernels.options import KDAOptions

# What each family means when a tag is absent (the family contracts in docs/KDA_FAMILIES.md).
_ENGINE_DEFAULTS = {"gate": "unbounded", "beta": "logits", "qk_norm": "l2", "state_layout": "vk"}
_FAMILY_DEFAULTS = {
    "decode": _ENGINE_DEFAULTS,
    "mtp": _ENGINE_DEFAULTS,
    "spec_verify": _ENGINE_DEFAULTS,
    "prefill_chunk_states": _ENGINE_DEFAULTS,
    "prefill": _ENGINE_DEFAULTS,
    "forward": {"gate": "precomputed", "beta": "prob", "qk_norm": "none", "state_layout": "kv"},
}


def stage_of(definition) -> str | None:
    """The family of a definition: its `stage:` tag, else the second word of its name (`kda_decode_...`)."""
    stage = definition.tag("stage")
    if stage is None:
        parts = definition.name.split("_")
        stage = parts[1] if len(parts) > 1 and parts[0] == "kda" else None
    if stage == "fwd":
        stage = "forward"
    return stage


def options_from_tags(definition, stage: str) -> KDAOptions:
    """KDAOptions from `gate:`, `lower_bound:`, `beta:`, `qk_norm:` and `state_layout:` tags (family defaults
    where a tag is absent; a name ending in `_safe_gate` means `gate:safe`)."""
    d = _FAMILY_DEFAULTS[stage]
    gate = definition.tag("gate") or ("safe" if definition.name.endswith("_safe_gate") else d["gate"])
    qk_norm = definition.tag("qk_norm", d["qk_norm"])
    if qk_norm not in ("l2", "none"):
        raise ValueError(f"{definition.name}: qk_norm:{qk_norm} is not supported (l2 or none)")
    return KDAOptions(
        use_qk_l2norm=qk_norm == "l2",
        gate=gate,
        lower_bound=float(definition.tag("lower_bound", "-5")),
        beta=definition.tag("beta", d["beta"]),
        state_layout=definition.tag("state_layout", d["state_layout"]),
    )


def _kernel():
    from kda_trace.kernels.recurrent import kda_recurrent

    return kda_recurrent


def _scaled(base: KDAOptions) -> Callable[[float | None], KDAOptions]:
    """Options for a given scale, memoised: runs pass the same scale every call, and building a frozen
    dataclass per decode step would cost more than the rest of the Python wrapper."""
    cache: dict = {}

    def get(scale):
        opts = cache.get(scale)
        if opts is None:
            opts = cache[scale] = dataclasses.replace(base, scale=None if scale is None else float(scale))
        return opts

    return get


def _check_layout(definition, opts: KDAOptions, state_name: str) -> None:
    """The state input's last two axes must agree with the layout the tags announce."""
    spec = definition.inputs.get(state_name)
    if spec is None or spec.shape is None:
        return
    want = ["head_dim_v", "head_dim_k"] if opts.state_layout == "vk" else ["head_dim_k", "head_dim_v"]
    if list(spec.shape[-2:]) != want:
        raise ValueError(f"{definition.name}: {state_name} axes {spec.shape[-2:]} disagree with "
                         f"state_layout:{opts.state_layout} (expected {want})")


def build_decode(definition):
    """One token per request against a state pool: q [B, H, K], state_pool [P, HV, ...] updated in place."""
    opts = options_from_tags(definition, "decode")
    _check_layout(definition, opts, "state_pool")
    kernel, with_scale = _kernel(), _scaled(opts)

    def run(q, k, v, g_raw, A_log, dt_bias, b, state_pool, state_indices, scale=None):
        o, _ = kernel(q[:, None], k[:, None], v[:, None], g_raw[:, None], b[:, None], with_scale(scale),
                      A_log=A_log, dt_bias=dt_bias, initial_state=state_pool, state_indices=state_indices,
                      inplace_state=True)
        return o[:, 0], state_pool

    return run


def build_mtp(definition):
    """num_tokens tokens per request against a state pool: q [B, T, H, K]; the final state goes back in place."""
    opts = options_from_tags(definition, "mtp")
    _check_layout(definition, opts, "state_pool")
    kernel, with_scale = _kernel(), _scaled(opts)

    def run(q, k, v, g_raw, A_log, dt_bias, b, state_pool, state_indices, scale=None):
        o, _ = kernel(q, k, v, g_raw, b, with_scale(scale), A_log=A_log, dt_bias=dt_bias,
                      initial_state=state_pool, state_indices=state_indices, inplace_state=True)
        return o, state_pool

    return run


def build_spec_verify(definition):
    """Speculative verify (vLLM's fused_recurrent_kda_fwd call): q [B, T, H, K], state_indices [B, T] (rows of
    -1 pad the batch), num_accepted_tokens [B]; the state after every token goes to its slot, in place."""
    opts = options_from_tags(definition, "spec_verify")
    _check_layout(definition, opts, "state_pool")
    kernel, with_scale = _kernel(), _scaled(opts)

    def run(q, k, v, g_raw, A_log, dt_bias, b, state_pool, state_indices, num_accepted_tokens, scale=None):
        out = torch.zeros_like(v)  # padding rows are skipped by the kernel: their o stays zero
        o, _ = kernel(q, k, v, g_raw, b, with_scale(scale), A_log=A_log, dt_bias=dt_bias,
                      initial_state=state_pool, state_indices=state_indices, inplace_state=True,
                      num_accepted_tokens=num_accepted_tokens, out=out)
        return o, state_pool

    return run


def prefill_adapter(definition, kernel, check_cu_seqlens=True):
    """run() of the packed varlen prefill family on `kernel` (ours: recurrent or chunked; same signature):
    q [total_seq_len, H, K], cu_seqlens [N + 1] -> (o, final_state). `check_cu_seqlens=False` for a kernel
    that checks cu_seqlens itself (the chunked one, which reads it once per tensor anyway)."""
    opts = dataclasses.replace(options_from_tags(definition, "prefill"), output_final_state=True)
    _check_layout(definition, opts, "initial_state")
    with_scale = _scaled(opts)

    def run(q, k, v, g_raw, A_log, dt_bias, b, initial_state, cu_seqlens, scale=None):
        if check_cu_seqlens:
            _check_cu_seqlens(cu_seqlens, q.shape[0])
        o, final_state = kernel(q[None], k[None], v[None], g_raw[None], b[None], with_scale(scale),
                                A_log=A_log, dt_bias=dt_bias, initial_state=initial_state,
                                cu_seqlens=cu_seqlens)
        return o[0], final_state

    return run


def forward_adapter(definition, kernel):
    """run() of the dense forward family (fla chunk_kda's interface) on `kernel`:
    q [B, T, H, K], precomputed g -> (o, final_state)."""
    opts = dataclasses.replace(options_from_tags(definition, "forward"), output_final_state=True)
    _check_layout(definition, opts, "initial_state")
    if opts.gate != "precomputed":
        raise ValueError(f"{definition.name}: the forward family takes a precomputed g, not gate:{opts.gate}")
    with_scale = _scaled(opts)

    def run(q, k, v, g, beta, initial_state=None, scale=None):
        return kernel(q, k, v, g, beta, with_scale(scale), initial_state=initial_state)

    return run


def build_prefill(definition):
    """Packed varlen prefill, token by token."""
    return prefill_adapter(definition, _kernel())


def build_forward(definition):
    """Dense forward, token by token."""
    return forward_adapter(definition, _kernel())


BUILDERS = {"decode": build_decode, "mtp": build_mtp, "prefill": build_prefill, "forward": build_forward,
            "spec_verify": build_spec_verify}


def supports(definition) -> str | None:
    """None when a builder here serves `definition`, else why not."""
    stage = stage_of(definition)
    if stage not in BUILDERS:
        return f"the recurrent kernel serves {sorted(BUILDERS)}, not stage {stage!r}"
    try:
        options_from_tags(definition, stage)
    except ValueError as e:
        return str(e)
    return None


def build(definition) -> Callable:
    """The run function for `definition`, by its family."""
    reason = supports(definition)
    if reason is not None:
        raise ValueError(f"{definition.name}: {reason}")
    return BUILDERS[stage_of(definition)](definition)


def _check_cu_seqlens(cu_seqlens, total: int) -> None:
    """Reject zero-length sequences and offsets that do not cover the packed tokens (one host sync: fine
    for prefill, which is why this check lives here and not in the kernel wrapper decode also uses)."""
    from kda_trace.kernels.common import sequence_lengths

    sequence_lengths(cu_seqlens.tolist(), total)
