"""The fused_decode family (docs/KDA_FAMILIES.md) on our one-launch fused kernel, `kernels/fused_decode.py`.

`build_fused_decode(definition)` reads the gate from the tags (the decode family's tags and defaults), the RMSNorm
epsilon from the reference's `NORM_EPS` constant, and returns `run(**inputs) -> (o, new_conv_state,
new_state_pool)`; both pools are updated in place and returned (the definitions allow it: `"inplace":
{"new_conv_state": "conv_state", "new_state_pool": "state_pool"}`). The kernel module is imported on first
build, after the caller chose compiled or interpreted Triton.
"""

from __future__ import annotations

from collections.abc import Callable

from kda_trace.solutions.base import reference_constant
from kda_trace.solutions.ours_recurrent import _check_layout, options_from_tags, stage_of

NORM_EPS_DEFAULT = 1e-5  # FlashInfer's norm_eps, the family's value when a reference does not set NORM_EPS


def supports(definition) -> str | None:
    """None when the fused kernel serves `definition`, else why not."""
    if stage_of(definition) != "fused_decode":
        return f"the fused decode kernel serves stage 'fused_decode', not {stage_of(definition)!r}"
    try:
        opts = options_from_tags(definition, "decode")  # the fused family's tags mean what decode's do
        _check_layout(definition, opts, "state_pool")
    except ValueError as e:
        return str(e)
    axes = definition.const_axes
    wants = {"gate:unbounded or gate:safe": opts.gate in ("unbounded", "safe"), "beta:logits": opts.beta == "logits",
             "qk_norm:l2": opts.use_qk_l2norm, "state_layout:vk": opts.state_layout == "vk",
             "num_v_heads == num_heads": axes.get("num_v_heads", axes.get("num_heads")) == axes.get("num_heads"),
             "head_dim_v == head_dim_k": axes.get("head_dim_v", axes.get("head_dim_k")) == axes.get("head_dim_k")}
    missing = [w for w, ok in wants.items() if not ok]
    return f"{definition.name}: the fused decode kernel needs {', '.join(missing)}" if missing else None


def build_fused_decode(definition) -> Callable:
    """Convolution + SiLU, one KDA step against the pool, gated RMSNorm: one kernel launch per call."""
    reason = supports(definition)
    if reason is not None:
        raise ValueError(reason)
    opts = options_from_tags(definition, "decode")
    norm_eps = float(reference_constant(definition, "NORM_EPS", NORM_EPS_DEFAULT))
    from kda_trace.kernels.fused_decode import fused_decode

    def run(x, conv_weight, conv_state, g_raw, A_log, dt_bias, b, state_pool, state_indices, output_gate,
            norm_weight, scale=None):
        o = fused_decode(x, conv_weight, conv_state, g_raw, A_log, dt_bias, b, state_pool, state_indices,
                         output_gate, norm_weight, scale=g_raw.shape[-1] ** -0.5 if scale is None else float(scale),
                         gate=opts.gate, lower_bound=opts.lower_bound, norm_eps=norm_eps)
        return o, conv_state, state_pool

    return run
