"""The `triton` solution: our own Triton kernels, routed by the definition's `stage:` tag.

| stage | builder |
|---|---|
| decode | `ours_recurrent.build_decode` |
| mtp | `ours_recurrent.build_mtp` |
| spec_verify | `ours_recurrent.build_spec_verify` |
| fused_decode | `ours_fused_decode.build_fused_decode` (kernels/fused_decode.py, one launch) |
| prefill_chunk_states | `ours_chunk.build_prefill_chunk_states` (token by token itself for batches of <= 64 tokens) |
| prefill | `ours_chunk.build_prefill`, else `ours_recurrent.build_prefill` |
| forward | `ours_chunk.build_forward`, else `ours_recurrent.build_forward` |
| backward | `ours_train.build_backward` (kernels/backward.py) |
| gate | `ours_train.build_gate` (kernels/gate.py) |

Inputs no longer than one chunk (`SHORT_TOKENS` tokens per sequence of a dense batch, or in a whole packed
batch) go to the token-by-token kernel even for prefill and forward: the chunked algorithm has nothing to
gain there, and under the CPU interpreter the chunked kernel costs several times more per token.

A builder is `build_X(definition) -> run` (or `build_X(definition, device)`). Builder modules are imported lazily; a missing module
or function makes the pair unsupported with the reason, never an error.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Callable, List, Optional, Tuple

from ..platform import ensure_triton_can_run
from ..schema import Definition

ROUTES = {
    "decode": [("ours_recurrent", "build_decode")],
    "mtp": [("ours_recurrent", "build_mtp")],
    "spec_verify": [("ours_recurrent", "build_spec_verify")],
    "fused_decode": [("ours_fused_decode", "build_fused_decode")],
    "prefill_chunk_states": [("ours_chunk", "build_prefill_chunk_states")],
    "prefill": [("ours_chunk", "build_prefill"), ("ours_recurrent", "build_prefill")],
    "forward": [("ours_chunk", "build_forward"), ("ours_recurrent", "build_forward")],
    "backward": [("ours_train", "build_backward")],
    "gate": [("ours_train", "build_gate")],
}


def find_builder(stage: Optional[str]) -> Tuple[Optional[Callable], List[str]]:
    """The first builder that exists for `stage`, and why each earlier candidate was not used."""
    why = []
    for module_name, fn_name in ROUTES.get(stage or "", []):
        try:
            module = importlib.import_module(f"kda_trace.solutions.{module_name}")
        except ImportError as e:
            why.append(f"{module_name}: {e}")
            continue
        fn = getattr(module, fn_name, None)
        if fn is None:
            why.append(f"{module_name} has no {fn_name}")
            continue
        return fn, why
    return None, why


SHORT_TOKENS = 64


def _with_short_route(definition: Definition, chunked: Callable) -> Callable:
    """Wrap a chunked prefill/forward run so that short inputs use the token-by-token kernel."""
    from . import ours_recurrent

    stage = definition.tag("stage")
    short = getattr(ours_recurrent, f"build_{stage}")(definition)
    # prefill: q is [total_seq_len, H, K]; forward: q is [batch, seq_len, H, K]
    token_dim = 0 if stage == "prefill" else 1

    def run(**inputs):
        if inputs["q"].shape[token_dim] <= SHORT_TOKENS:
            return short(**inputs)
        return chunked(**inputs)

    return run


class TritonSolution:
    """Our Triton KDA kernels (see the module docstring for the routing)."""

    name = "triton"

    def __init__(self, device: str = "cpu"):
        self.device = device

    def supports(self, definition: Definition) -> str | None:
        if definition.op_type != "kda":
            return f"op_type {definition.op_type!r} is not kda"
        stage = definition.tag("stage")
        if stage not in ROUTES:
            return f"no Triton kernel for stage {stage!r}"
        ensure_triton_can_run(self.device)
        builder, why = find_builder(stage)
        if builder is None:
            return f"no Triton builder for stage {stage!r} ({'; '.join(why)})"
        check = getattr(builder, "supports", None) or getattr(importlib.import_module(builder.__module__),
                                                             "supports", None)
        return check(definition) if callable(check) else None

    def build(self, definition: Definition, device: str):
        ensure_triton_can_run(device)
        builder, why = find_builder(definition.tag("stage"))
        if builder is None:
            raise RuntimeError(f"no Triton builder for {definition.name}: {'; '.join(why)}")
        # builders take (definition) and pick up the device from their inputs, or (definition, device)
        if len(inspect.signature(builder).parameters) >= 2:
            run = builder(definition, device)
        else:
            run = builder(definition)
        if builder.__module__.endswith("ours_chunk") and definition.tag("stage") in ("prefill", "forward"):
            run = _with_short_route(definition, run)
        return run
