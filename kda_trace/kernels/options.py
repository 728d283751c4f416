"""Options shared by our KDA kernels (recurrent and chunked): one frozen bundle, hashable so it can key caches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GateKind = Literal["precomputed", "unbounded", "safe"]
BetaKind = Literal["prob", "logits", "logits_x2"]
StateLayout = Literal["kv", "vk"]


@dataclass(frozen=True)
class KDAOptions:
    """How a KDA kernel reads its inputs and what it returns.

    scale: multiplier on q (None = head_dim_k ** -0.5).
    use_qk_l2norm: L2-normalise q and k in the kernel, x / sqrt(sum(x^2) + 1e-6).
    gate: "precomputed" (g is the log decay), "unbounded" (g = -exp(A_log) * softplus(g_raw + dt_bias))
        or "safe" (g = lower_bound * sigmoid(exp(A_log) * (g_raw + dt_bias))).
    lower_bound: the bound of the "safe" gate.
    beta: "prob" (beta used as given), "logits" (sigmoid(b)) or "logits_x2" (2 * sigmoid(b)).
    state_layout: "kv" = state [..., K, V] (fla default), "vk" = [..., V, K] ("K-last", engines).
    output_final_state: return the state after the last token.
    """

    scale: float | None = None
    use_qk_l2norm: bool = False
    gate: GateKind = "precomputed"
    lower_bound: float = -5.0
    beta: BetaKind = "prob"
    state_layout: StateLayout = "kv"
    output_final_state: bool = False

    def __post_init__(self) -> None:
        if self.gate not in ("precomputed", "unbounded", "safe"):
            raise ValueError(f"gate must be precomputed|unbounded|safe, got {self.gate!r}")
        if self.beta not in ("prob", "logits", "logits_x2"):
            raise ValueError(f"beta must be prob|logits|logits_x2, got {self.beta!r}")
        if self.state_layout not in ("kv", "vk"):
            raise ValueError(f"state_layout must be kv|vk, got {self.state_layout!r}")

    def resolved_scale(self, head_dim_k: int) -> float:
        """The scale to use for a head dim of `head_dim_k`."""
        return float(head_dim_k) ** -0.5 if self.scale is None else float(self.scale)
