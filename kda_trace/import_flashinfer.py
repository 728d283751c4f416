"""`kda-trace import-flashinfer DIR`: FlashInfer-Trace KDA files (what an engine dumps) as a kda-trace dataset.

What is read (docs/KDA_FAMILIES.md, "Importing FlashInfer-Trace files", has the whole mapping):
- definitions: every `*.json` under DIR whose `op_type` is `kda`, as FlashInfer's templates
  (flashinfer/trace/templates/kda.py) write them with FLASHINFER_TRACE_DUMP=1: `recurrent_kda_*`,
  `recurrent_kda_decode_*`, `packed_kda_decode_*` map onto our decode / mtp / prefill families; a decode or
  mtp call whose state pool is bfloat16 maps onto our `_bf16_state` definition of the same heads, head dim
  and gate, and is refused when the dataset has none; `fused_kda_decode_*` (causal conv + KDA + gated
  RMSNorm, one token per row) maps onto our fused_decode family, by the same rule for a bfloat16 pool;
  `packed_fused_kda_decode_*` (several tokens per sequence with per-token state checkpoints) is not imported;
- workloads: every `*.jsonl` under DIR, one FlashInfer-Bench workload a line, either a workload trace
  `{"definition": NAME, "workload": {uuid, axes, inputs}}` (what flashinfer-bench's tracing writes) or a bare
  workload `{uuid, axes, inputs}` in `<definition name>.jsonl`; inputs `random`, `scalar` or `safetensors`
  (path relative to DIR, or to the .jsonl file's folder).

What is written to `--out`: our family's definition (name, axes, tolerances and the reference our generator
embeds: tools/build_kda_dataset.py and tools/kda_references/), one workload per FlashInfer workload (same
uuid) and a safetensors file per workload holding the recorded tensors, reshaped to our layout. A file or
field that cannot be mapped is one problem naming the file, line and field; the others are still imported.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

SOURCE_TAG = "source:flashinfer-trace"
NO_FAMILY = {
    "packed_fused_kda_decode": "it runs up to num_tokens tokens per sequence (query_start_loc, num_accepted_tokens, "
                               "state_indices [num_sequences, num_tokens]: one state checkpoint slot per token, and a "
                               "conv_history of num_tokens + 2) around the causal convolution and the gated RMSNorm; "
                               "the fused_decode family is one token per request, and no family has that interface",
}
TEMPLATES = ("packed_fused_kda_decode", "packed_kda_decode", "fused_kda_decode", "recurrent_kda_decode", "recurrent_kda")
# recurrent_kda arguments our families have no equivalent of: importing a call that used one would be wrong.
UNMAPPABLE_TENSORS = ("initial_state_source", "initial_state_indices", "state_checkpoints", "checkpoint_cu_starts",
                      "correction_cache", "kg_cache")
SMOKE_TOKENS = 8  # imported workloads with at most this many tokens are tagged smoke (the CPU run's size)
BF16_STATE = "_bf16_state"  # name suffix of our decode / mtp / fused_decode definitions whose state pool is bfloat16
# fused_kda_decode (flashinfer/kda_decode.py and flashinfer/kda_kernels/fused_kda_decode.py of flashinfer-python
# 0.7.4): head dim 128 only, the query scale fixed at 128 ** -0.5 (_Q_SCALE), lower_bound -5.0 and norm_eps 1e-5 by
# default, conv width 4 with a history of 3.
FUSED_HEAD_DIM = 128
FUSED_DEFAULT_LOWER_BOUND = -5.0
FUSED_DEFAULT_NORM_EPS = 1e-5


class ImportProblem(ValueError):
    """One FlashInfer-Trace file, line or field that cannot be imported; the message names it."""

    def __init__(self, where: str, field_name: str, why: str):
        super().__init__(f"{where}: {field_name}: {why}" if field_name else f"{where}: {why}")


@dataclass
class Imported:
    """The result of an import: our definitions and workloads, and every problem met."""

    definitions: Dict[str, dict] = field(default_factory=dict)
    workloads: Dict[str, List[dict]] = field(default_factory=dict)
    blobs: Dict[str, Dict[str, torch.Tensor]] = field(default_factory=dict)  # relative path -> tensors
    problems: List[str] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)


# --------------------------------------------------------------------------- our definitions

@lru_cache(maxsize=None)
def _builder():
    """tools/build_kda_dataset.py of this checkout: the generator whose definitions and references we reuse."""
    path = Path(__file__).resolve().parent.parent / "tools" / "build_kda_dataset.py"
    if not path.is_file():
        raise ImportProblem(str(path), "", "the dataset generator is missing (import-flashinfer runs from a kda-trace checkout)")
    spec = importlib.util.spec_from_file_location("kda_trace_build_kda_dataset", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def definition_name(family: str, h: int, hv: int, d: int, lower_bound: Optional[float],
                    norm_eps: Optional[float] = None) -> str:
    """Our name for a family and its constants (the generator's scheme, with GVA, other bounds and, for
    fused_decode, an RMSNorm eps other than 1e-5 spelled out)."""
    heads = f"h{h}" if h == hv else f"qk{h}_v{hv}"
    gate = "" if lower_bound is None else "_safe_gate" + ("" if lower_bound == -5 else f"_lb{lower_bound:g}".replace("-", "m"))
    # eps as float32 keeps it (a recorded 1e-5 may be 9.9999997e-06): names compared in float32's 6 digits
    same = norm_eps is None or f"{norm_eps:.6g}" == f"{FUSED_DEFAULT_NORM_EPS:.6g}"
    eps = "" if same else f"_eps{norm_eps:.6g}".replace("-", "m")
    return f"kda_{family}_{heads}_d{d}_k_last{gate}{eps}"


@lru_cache(maxsize=None)
def bf16_state_definitions() -> Tuple[str, ...]:
    """The names of the generator's decode, mtp and fused_decode definitions with a bfloat16 state pool
    (definitions/kda/*_bf16_state.json)."""
    b = _builder()
    pools = [b.pool_definition(stage, model, text, gate, tp, h, bf16=True)["name"]
             for m, tp, h in b.BF16_POOL_SHAPES for model, text, gate, _ in [b.MODELS[m]] for stage in ("decode", "mtp")]
    fused = [b.fused_decode_definition(model, text, gate, tp, h, True)["name"]
             for m, tp, h, bf16 in b.FUSED_DECODE_SHAPES if bf16 for model, text, gate, _ in [b.MODELS[m]]]
    return tuple(sorted(pools + fused))


def _relabel(tags: List[str], lower_bound: Optional[float]) -> List[str]:
    """The generator's tags without its model and TP, with the imported gate's bound, plus the source tag."""
    tags = [t for t in tags if not t.startswith(("model:", "tp:", "lower_bound:"))]
    if lower_bound is not None:
        tags.insert(tags.index("gate:safe") + 1, f"lower_bound:{lower_bound:g}")
    return tags + [SOURCE_TAG]


def _gate_text(lower_bound: Optional[float]) -> str:
    return (f"g = {lower_bound:g} * sigmoid(exp(A_log) * (g_raw + dt_bias))" if lower_bound is not None
            else "g = -exp(A_log) * softplus(g_raw + dt_bias)")


def family_definition(family: str, h: int, hv: int, d: int, lower_bound: Optional[float], source: str,
                      bf16_state: bool = False) -> dict:
    """Our `family` definition for these constants (with a bfloat16 state pool if bf16_state), built by the dataset
    generator and re-labelled."""
    b = _builder()
    gate = "unbounded" if lower_bound is None else "safe"
    generator_d, b.D = b.D, d  # the generator's head dim is a module constant
    try:
        defn = (b.prefill_definition("x", "x", gate, 1, h) if family == "prefill"
                else b.pool_definition(family, "x", "x", gate, 1, h, bf16=bf16_state))
    finally:
        b.D = generator_d
    defn["name"] = definition_name(family, h, hv, d, lower_bound) + (BF16_STATE if bf16_state else "")
    defn["axes"]["num_v_heads"]["value"] = hv
    defn["reference"] = b.reference_source(family, NUM_HEADS=h, NUM_V_HEADS=hv, HEAD_DIM_K=d, HEAD_DIM_V=d,
                                           LOWER_BOUND=lower_bound)
    defn["tags"] = _relabel(defn["tags"], lower_bound)
    gate_text = _gate_text(lower_bound)
    states = ("a K-last bfloat16 state pool updated in float32 and rounded once at the store, int32 slots"
              if bf16_state else "K-last float32 states")
    defn["description"] = (
        f"The {family} family of docs/KDA_FAMILIES.md ({h} q/k heads, {hv} value heads, head dim {d}; raw q/k "
        f"L2-normalised in the op, {gate_text}, beta = sigmoid(b), {states}), imported by "
        f"`kda-trace import-flashinfer` from FlashInfer-Trace definition {source}. The recorded inputs are replayed "
        f"through this family's reference; A_log and dt_bias, which FlashInfer's KDA templates do not record, "
        f"come from the generators. Tolerances as the generated {family}{' bf16-state' if bf16_state else ''} "
        f"definitions.")
    return defn


def fused_definition(h: int, d: int, lower_bound: Optional[float], norm_eps: float, source: str,
                     bf16_state: bool = False) -> dict:
    """Our fused_decode definition for these constants (with a bfloat16 state pool if bf16_state), built by the
    dataset generator and re-labelled."""
    b = _builder()
    gate = "unbounded" if lower_bound is None else "safe"
    generator_d, b.D = b.D, d
    try:
        defn = b.fused_decode_definition("x", "x", gate, 1, h, bf16_state)
    finally:
        b.D = generator_d
    defn["name"] = definition_name("fused_decode", h, h, d, lower_bound, norm_eps) + (BF16_STATE if bf16_state else "")
    defn["reference"] = b.reference_source("fused_decode", NUM_HEADS=h, HEAD_DIM=d, CONV_WIDTH=b.CONV_WIDTH,
                                           NORM_EPS=norm_eps, LOWER_BOUND=lower_bound)
    defn["tags"] = _relabel(defn["tags"], lower_bound)
    pool = "a bfloat16" if bf16_state else "a float32"
    defn["description"] = (
        f"The fused_decode family of docs/KDA_FAMILIES.md ({h} heads, head dim {d}: the width-{b.CONV_WIDTH} causal "
        f"convolution + SiLU of the packed q | k | v row, the KDA step with {_gate_text(lower_bound)} and beta = "
        f"sigmoid(b) against {pool} K-last state pool, and the gated RMSNorm o / sqrt(mean(o^2) + {norm_eps:g}) * "
        f"norm_weight * sigmoid(output_gate); slot 0 is the null slot, rows with slot -1 or 0 are padding), imported "
        f"by `kda-trace import-flashinfer` from FlashInfer-Trace definition {source}. The recorded inputs are "
        f"replayed through this family's reference; scale is fused_kda_decode's fixed 128 ** -0.5. Tolerances as "
        f"the generated fused_decode{' bf16-state' if bf16_state else ''} definitions.")
    return defn


# --------------------------------------------------------------------------- reading FlashInfer-Trace files

class _Source:
    """The inputs of one FlashInfer workload: tensors from safetensors, scalars, or 'random' (not recorded)."""

    def __init__(self, where: str, inputs: dict, roots: List[Path], cache: Dict[Path, dict]):
        self.where, self.inputs, self.roots, self.cache = where, inputs, roots, cache

    def kind(self, name: str) -> str:
        spec = self.inputs.get(name)
        return "absent" if spec is None else str(spec.get("type", "?"))

    def tensor(self, name: str) -> Optional[torch.Tensor]:
        """The recorded tensor, or None when it was not recorded (absent or random)."""
        spec = self.inputs.get(name)
        if spec is None or spec.get("type") == "random":
            return None
        if spec.get("type") != "safetensors":
            raise ImportProblem(self.where, f"inputs.{name}", f"a tensor input recorded as {spec.get('type')!r}")
        rel = spec.get("path")
        key = spec.get("tensor_key")
        if not rel or not key:
            raise ImportProblem(self.where, f"inputs.{name}", "a safetensors input needs 'path' and 'tensor_key'")
        for root in self.roots:
            path = (root / rel).resolve()
            if path.is_file():
                break
        else:
            raise ImportProblem(self.where, f"inputs.{name}.path", f"file {rel!r} not found under {', '.join(map(str, self.roots))}")
        if path not in self.cache:
            from safetensors.torch import load_file

            self.cache[path] = load_file(str(path), device="cpu")
        if key not in self.cache[path]:
            raise ImportProblem(self.where, f"inputs.{name}.tensor_key", f"{rel!r} has no tensor {key!r}")
        return self.cache[path][key]

    def scalar(self, name: str, default: Any) -> Any:
        """A scalar argument's value; FlashInfer's default when it was not recorded."""
        spec = self.inputs.get(name)
        if spec is None or spec.get("type") == "random":
            return default
        if spec.get("type") == "scalar":
            return spec.get("value")
        t = self.tensor(name)
        if t.numel() != 1:
            raise ImportProblem(self.where, f"inputs.{name}", f"a scalar recorded as a tensor of shape {list(t.shape)}")
        return t.item()


def _const(defn: dict, where: str, axis: str) -> int:
    value = defn.get("axes", {}).get(axis, {}).get("value")
    if not isinstance(value, int):
        raise ImportProblem(where, f"axes.{axis}.value", "missing: FlashInfer writes it when the call passed the tensor that carries it")
    return value


def _template(defn: dict, where: str) -> str:
    name = str(defn.get("name", ""))
    for prefix in TEMPLATES:
        if name == prefix or name.startswith(prefix + "_"):
            return prefix
    raise ImportProblem(where, "name", f"{name!r} is not a KDA template of FlashInfer ({', '.join(TEMPLATES)})")


@dataclass
class _Mapped:
    """One FlashInfer workload in our family's terms."""

    family: str
    h: int
    hv: int
    d: int
    lower_bound: Optional[float]
    axes: Dict[str, int]
    tensors: Dict[str, torch.Tensor]          # our input name -> recorded tensor (our layout and dtype)
    generated: Dict[str, dict] = field(default_factory=dict)  # our input name -> {"type": "random", ...}
    scale: float = 0.0
    seq_lens: Optional[List[int]] = None
    norm_eps: Optional[float] = None          # fused_decode only


def _indices(t: torch.Tensor, where: str, name: str, pool: Optional[int]) -> torch.Tensor:
    idx = t.to(torch.int64)
    if (idx < 0).any():
        raise ImportProblem(where, f"inputs.{name}", "negative slots (FlashInfer's padding rows) have no equivalent in our pool families")
    if pool is not None and (idx >= pool).any():
        raise ImportProblem(where, f"inputs.{name}", f"a slot past the pool's {pool} slots")
    if idx.unique().numel() != idx.numel():
        raise ImportProblem(where, f"inputs.{name}", "repeated slots: our pool families take distinct slots")
    return idx


def _map_recurrent(defn: dict, src: _Source, axes: dict) -> _Mapped:
    """A recurrent_kda (or recurrent_kda_decode) call: decode, mtp or prefill by its shapes and scalars."""
    where = src.where
    h, hv, d = (_const(defn, where, a) for a in ("num_q_heads", "num_v_heads", "head_dim"))
    if not src.scalar("use_gate_in_kernel", False):
        raise ImportProblem(where, "inputs.use_gate_in_kernel",
                            "not 1 (or not recorded; FlashInfer's default is a precomputed gate): our decode, mtp and "
                            "prefill families take the raw gate with A_log and dt_bias")
    if not src.scalar("use_qk_l2norm_in_kernel", True):
        raise ImportProblem(where, "inputs.use_qk_l2norm_in_kernel", "0: our pool and packed families normalise q and k in the op")
    if not src.scalar("beta_is_logit", False):
        raise ImportProblem(where, "inputs.beta_is_logit",
                            "not 1 (or not recorded; FlashInfer's default is beta as a probability): our families take beta logits")
    if src.scalar("disable_state_update", 0):
        raise ImportProblem(where, "inputs.disable_state_update", "1 (frozen verify) has no kda-trace family")
    if src.scalar("checkpoint_every_n_tokens", 0):
        raise ImportProblem(where, "inputs.checkpoint_every_n_tokens", "state checkpoints have no kda-trace family")
    for name in UNMAPPABLE_TENSORS:
        if src.kind(name) == "safetensors":
            raise ImportProblem(where, f"inputs.{name}", "recorded, but our families have no equivalent input")
    lb = src.scalar("lower_bound", None)
    lb = None if lb is None else float(lb)
    spec = src.scalar("num_spec_tokens", None)
    scale = src.scalar("scale", None)
    scale = float(scale) if scale is not None else d ** -0.5

    q = src.tensor("q")
    B = int(q.shape[0]) if q is not None else axes.get("batch_size")
    T = int(q.shape[1]) if q is not None else axes.get("seq_len")
    if not isinstance(B, int) or not isinstance(T, int):
        raise ImportProblem(where, "axes.batch_size / axes.seq_len", "missing (and q was not recorded)")
    state = src.tensor("initial_state")
    ssi = src.tensor("ssm_state_indices")
    pool = int(state.shape[0]) if state is not None else axes.get("state_pool_size")
    renames = {"q": "q", "k": "k", "v": "v", "g": "g_raw", "beta": "b"}
    recorded = {ours: src.tensor(theirs) for theirs, ours in renames.items()}
    m = _Mapped(family="", h=h, hv=hv, d=d, lower_bound=lb, axes={}, tensors={}, scale=scale)

    if spec is not None or (T > 1 and ssi is not None and ssi.ndim == 2):
        if spec is None or int(spec) + 1 != T:
            raise ImportProblem(where, "inputs.num_spec_tokens", f"{spec} does not match seq_len {T} (speculative decode has 1 + num_spec_tokens tokens)")
        m.family = "mtp"
        m.tensors = {n: t for n, t in recorded.items() if t is not None}
        if ssi is not None:
            if ssi.ndim != 2 or tuple(ssi.shape) != (B, T):
                raise ImportProblem(where, "inputs.ssm_state_indices", f"shape {list(ssi.shape)}; speculative decode takes [{B}, {T}]")
            first = ssi[:, 0]  # the slot each request's state is read from (num_accepted_tokens is not recorded)
        else:
            first = torch.arange(B) * T  # FlashInfer's batched shim: slot n * T holds request n's state
        m.axes = {"batch_size": B, "num_tokens": T}
    elif T == 1:
        m.family = "decode"
        m.tensors = {n: t[:, 0] for n, t in recorded.items() if t is not None}
        m.axes = {"batch_size": B}
        first = ssi if ssi is not None else (torch.arange(B) if src.kind("ssm_state_indices") != "random" else None)
    else:
        m.family = "prefill"
        m.tensors = {n: t.reshape(B * T, *t.shape[2:]) for n, t in recorded.items() if t is not None}
        m.axes = {"total_seq_len": B * T, "num_seqs": B, "len_cu_seqlens": B + 1}
        m.seq_lens = [T] * B  # FlashInfer's template does not record cu_seqlens: each batch row is one sequence
        m.generated["cu_seqlens"] = {"type": "random"}
        if state is not None:
            rows = _indices(ssi, where, "ssm_state_indices", pool) if ssi is not None else torch.arange(B)
            if state.shape[0] < B and ssi is None:
                raise ImportProblem(where, "inputs.initial_state", f"{state.shape[0]} states for {B} sequences")
            m.tensors["initial_state"] = state[rows].float()
        elif src.kind("initial_state") == "random":
            m.generated["initial_state"] = {"type": "random"}
        else:
            m.generated["initial_state"] = {"type": "random", "generator": {"kind": "none"}}
        return m

    # decode and mtp: the pool as recorded (its dtype picks our definition) and one distinct slot per request
    if state is not None:
        m.tensors["state_pool"] = state
    elif src.kind("initial_state") == "random":
        m.generated["state_pool"] = {"type": "random"}
    else:  # FlashInfer starts from zeros: a pool of zero states, one per request
        pool = B * (T if m.family == "mtp" else 1)
        m.generated["state_pool"] = {"type": "random", "generator": {"kind": "constant", "value": 0.0}}
    if not isinstance(pool, int):
        raise ImportProblem(where, "axes.state_pool_size", "missing (and initial_state was not recorded)")
    m.axes["pool_size"] = pool
    if first is not None:
        m.tensors["state_indices"] = _indices(first, where, "ssm_state_indices", pool)
    else:
        m.generated["state_indices"] = {"type": "random"}
    return m


def _map_packed_decode(defn: dict, src: _Source, axes: dict) -> _Mapped:
    """packed_kda_decode: Kimi K3's T=1 decode from a packed post-convolution QKV row (fixed safe gate -5)."""
    where = src.where
    h, d = _const(defn, where, "num_heads"), _const(defn, where, "head_dim")
    m = _Mapped(family="decode", h=h, hv=h, d=d, lower_bound=-5.0, axes={}, tensors={}, scale=d ** -0.5)
    mixed = src.tensor("mixed_qkv")
    B = int(mixed.shape[0]) if mixed is not None else axes.get("batch_size")
    if not isinstance(B, int):
        raise ImportProblem(where, "axes.batch_size", "missing (and mixed_qkv was not recorded)")
    if mixed is not None:
        if tuple(mixed.shape) != (B, 3 * h * d):
            raise ImportProblem(where, "inputs.mixed_qkv", f"shape {list(mixed.shape)}, expected [{B}, {3 * h * d}]")
        for i, name in enumerate(("q", "k", "v")):
            m.tensors[name] = mixed[:, i * h * d:(i + 1) * h * d].reshape(B, h, d)
    for theirs, ours, shape in (("raw_gate", "g_raw", (B, h, d)), ("raw_beta", "b", (B, h)), ("A_log", "A_log", (h,)),
                                ("dt_bias", "dt_bias", (h, d))):
        t = src.tensor(theirs)
        if t is not None:
            m.tensors[ours] = t.reshape(shape)
    state = src.tensor("state")
    pool = int(state.shape[0]) if state is not None else axes.get("state_pool_size")
    if state is not None:
        m.tensors["state_pool"] = state
    else:
        m.generated["state_pool"] = {"type": "random"}
    if not isinstance(pool, int):
        raise ImportProblem(where, "axes.state_pool_size", "missing (and state was not recorded)")
    m.axes = {"batch_size": B, "pool_size": pool}
    idx = src.tensor("state_indices")
    if idx is not None:
        m.tensors["state_indices"] = _indices(idx, where, "state_indices", pool)
    else:
        m.generated["state_indices"] = {"type": "random"}
    return m


def _fused_slots(t: torch.Tensor, where: str, pool: int) -> torch.Tensor:
    """fused_kda_decode's slots as our fused_decode family takes them: non-positive (padding) rows kept as they are,
    live slots distinct and below the pool size."""
    if t.numel() and (int(t.min()) < -(2 ** 31) or int(t.max()) >= 2 ** 31):  # int32 would wrap it into a live slot
        raise ImportProblem(where, "inputs.state_indices", "a slot outside int32's range")
    live = t[t > 0]
    if (live >= pool).any():
        raise ImportProblem(where, "inputs.state_indices", f"a slot past the pools' {pool} slots")
    if live.unique().numel() != live.numel():
        raise ImportProblem(where, "inputs.state_indices", "repeated live slots (fused_kda_decode's "
                            "state_indices_mode 'repeated_positive'): our fused_decode family takes distinct slots")
    return t.to(torch.int32)


def _map_fused_decode(defn: dict, src: _Source, axes: dict) -> _Mapped:
    """fused_kda_decode: one token per row, causal conv + KDA step + gated RMSNorm (our fused_decode family)."""
    where = src.where
    h, d = _const(defn, where, "num_heads"), _const(defn, where, "head_dim")
    if d != FUSED_HEAD_DIM:
        raise ImportProblem(where, "axes.head_dim.value", f"{d}: fused_kda_decode has head dim {FUSED_HEAD_DIM} only")
    b = _builder()
    for axis, want in (("qkv_width", 3 * h * d), ("hidden_size", h * d), ("projection_groups", 3),
                       ("conv_width", b.CONV_WIDTH), ("conv_history", b.CONV_WIDTH - 1)):
        value = defn.get("axes", {}).get(axis, {}).get("value")
        if value is not None and value != want:
            raise ImportProblem(where, f"axes.{axis}.value", f"{value}; our fused_decode family has {want} "
                                f"(width-{b.CONV_WIDTH} convolution, {h} heads of {d})")
    bound = src.scalar("lower_bound", FUSED_DEFAULT_LOWER_BOUND)
    if bound is not None and (not isinstance(bound, (int, float)) or bound >= 0):
        raise ImportProblem(where, "inputs.lower_bound", f"{bound!r}: fused_kda_decode takes a negative bound, or "
                            "null for the unbounded softplus gate")
    eps = src.scalar("norm_eps", FUSED_DEFAULT_NORM_EPS)
    if not isinstance(eps, (int, float)) or eps < 0:
        raise ImportProblem(where, "inputs.norm_eps", f"{eps!r}: fused_kda_decode takes a non-negative eps")
    m = _Mapped(family="fused_decode", h=h, hv=h, d=d, lower_bound=None if bound is None else float(bound), axes={},
                tensors={}, scale=FUSED_HEAD_DIM ** -0.5,
                norm_eps=float(f"{float(eps):.6g}"))  # a float32 1e-5 is 9.9999997e-06: float32's digits
    recorded = {name: src.tensor(name) for name in ("x", "weight", "conv_state", "raw_gate", "raw_beta", "A_log",
                                                    "dt_bias", "state", "output_gate", "norm_weight", "state_indices")}
    B = next((int(recorded[n].shape[i]) for n, i in (("x", 0), ("raw_gate", 1), ("state_indices", 0))
              if recorded[n] is not None and recorded[n].ndim > i), axes.get("num_rows"))
    if not isinstance(B, int):
        raise ImportProblem(where, "axes.num_rows", "missing (and neither x, raw_gate nor state_indices was recorded)")
    pools = {n: int(recorded[n].shape[0]) for n in ("state", "conv_state") if recorded[n] is not None}
    if len(set(pools.values())) > 1:
        raise ImportProblem(where, "inputs.conv_state", f"{pools['conv_state']} slots, state has {pools['state']}: "
                            "fused_kda_decode takes pools of equal slot counts")
    pool = next(iter(pools.values()), axes.get("num_slots"))
    if not isinstance(pool, int):
        raise ImportProblem(where, "axes.num_slots", "missing (and neither state nor conv_state was recorded)")
    if pool < B + 1:
        raise ImportProblem(where, "axes.num_slots", f"{pool} slots for {B} rows: our fused_decode family's pools hold "
                            "the null slot 0 and one slot per row (pool_size >= batch_size + 1)")
    hd = h * d
    # FlashInfer's name -> (ours, the shapes FlashInfer takes, our shape)
    shapes = {"x": ("x", [(B, 3 * hd)], (B, 3 * hd)),
              "weight": ("conv_weight", [(3, b.CONV_WIDTH, hd)], (3, b.CONV_WIDTH, hd)),
              "conv_state": ("conv_state", [(pool, 3 * hd, b.CONV_WIDTH - 1)], (pool, 3 * hd, b.CONV_WIDTH - 1)),
              "raw_gate": ("g_raw", [(1, B, h, d)], (B, h, d)),
              "raw_beta": ("b", [(1, B, h)], (B, h)),
              "A_log": ("A_log", [(h,)], (h,)),
              "dt_bias": ("dt_bias", [(hd,)], (h, d)),
              "state": ("state_pool", [(pool, h, d, d)], (pool, h, d, d)),
              "output_gate": ("output_gate", [(B, h, d), (1, B, h, d)], (B, h, d)),
              "norm_weight": ("norm_weight", [(d,)], (d,))}
    for theirs, (ours, accepted, shape) in shapes.items():
        t = recorded[theirs]
        if t is None:
            m.generated[ours] = {"type": "random"}
            continue
        if tuple(t.shape) not in accepted:
            raise ImportProblem(where, f"inputs.{theirs}", f"shape {list(t.shape)}; fused_kda_decode takes "
                                + " or ".join(str(list(a)) for a in accepted))
        m.tensors[ours] = t.reshape(shape)
    if recorded["state_indices"] is not None:
        idx = recorded["state_indices"]
        if tuple(idx.shape) != (B,):
            raise ImportProblem(where, "inputs.state_indices", f"shape {list(idx.shape)}; fused_kda_decode takes [{B}]")
        m.tensors["state_indices"] = _fused_slots(idx, where, pool)
    else:
        m.generated["state_indices"] = {"type": "random"}
    m.axes = {"batch_size": B, "pool_size": pool}
    return m


def _workload_lines(path: Path) -> List[Tuple[int, dict]]:
    out = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                out.append((i, json.loads(line)))
            except json.JSONDecodeError as e:
                raise ImportProblem(f"{path}:{i}", "", f"not valid JSON: {e.msg}") from None
    return out


def read_flashinfer_trace(src_dir: Path) -> Imported:
    """Map every KDA definition and workload under `src_dir` onto our families (nothing is written)."""
    src_dir = Path(src_dir)
    result = Imported()
    if not src_dir.is_dir():
        result.problems.append(f"{src_dir}: not a directory")
        return result
    fi_defs: Dict[str, Tuple[Path, dict]] = {}
    for path in sorted(src_dir.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            result.problems.append(f"{path}: not valid JSON: {e}")
            continue
        if not isinstance(data, dict) or "op_type" not in data or "inputs" not in data:
            continue  # not a definition (e.g. a solution or a config file)
        if data["op_type"] != "kda":
            result.skipped.append(f"{path} (op_type {data['op_type']})")
            continue
        fi_defs[str(data.get("name"))] = (path, data)

    used = set()
    cache: Dict[Path, dict] = {}
    for path in sorted(src_dir.rglob("*.jsonl")):
        try:
            lines = _workload_lines(path)
        except (OSError, ImportProblem) as e:
            result.problems.append(str(e))
            continue
        for line_no, row in lines:
            where = f"{path}:{line_no}"
            wl = row.get("workload", row) if isinstance(row, dict) else None
            name = row.get("definition", path.stem) if isinstance(row, dict) else None
            if not isinstance(wl, dict) or not isinstance(wl.get("inputs"), dict):
                result.problems.append(f"{where}: not a FlashInfer-Bench workload (no 'inputs' object)")
                continue
            if name not in fi_defs:
                result.problems.append(f"{where}: definition: {name!r} is not among the KDA definitions under {src_dir}")
                continue
            def_path, defn = fi_defs[name]
            used.add(name)
            try:
                _import_workload(result, defn, def_path, wl, where, [src_dir, path.parent], cache)
            except ImportProblem as e:
                result.problems.append(str(e))
    for name, (path, defn) in fi_defs.items():
        try:
            template = _template(defn, str(path))
            if template in NO_FAMILY:
                raise ImportProblem(str(path), "name", f"{defn['name']!r}: {NO_FAMILY[template]}")
            if name in used:
                continue
            if template == "packed_kda_decode":  # its gate and layout are fixed: the definition alone maps
                h, d = _const(defn, str(path), "num_heads"), _const(defn, str(path), "head_dim")
                m = _Mapped(family="decode", h=h, hv=h, d=d, lower_bound=-5.0, axes={}, tensors={})
                _add_definition(result, _our_definition(m, defn, path, str(path)))
            elif template == "fused_kda_decode":
                raise ImportProblem(str(path), "workloads", "none found: FlashInfer's fused_kda_decode template "
                                    "records shapes and dtypes only; the gate (lower_bound: -5.0 when not passed, "
                                    "null for the unbounded gate) and norm_eps come from a workload's inputs")
            else:
                raise ImportProblem(str(path), "workloads", "none found: FlashInfer's recurrent_kda template records "
                                    "shapes only; the stage and gate form come from a workload's inputs "
                                    "(use_gate_in_kernel, lower_bound, beta_is_logit, num_spec_tokens)")
        except ImportProblem as e:
            result.problems.append(str(e))
    return result


def _add_definition(result: Imported, defn: dict) -> None:
    result.definitions.setdefault(defn["name"], defn)
    result.workloads.setdefault(defn["name"], [])


def _our_definition(m: _Mapped, defn: dict, def_path: Path, where: str) -> dict:
    """Our definition for a mapped call. decode, mtp and fused_decode follow the dtype of FlashInfer's state pool (the
    recorded tensor's, else the one its definition declares): bfloat16 -> the dataset's `_bf16_state` definition of
    the same family, heads, head dim and gate (and norm eps), an ImportProblem when there is none; any other (float32, "unknown" when the traced
    call passed no pool) -> the float32-pool definition."""
    source = f"{defn['name']!r} ({def_path.name})"
    if m.family == "prefill":
        return family_definition(m.family, m.h, m.hv, m.d, m.lower_bound, source)
    fused = m.family == "fused_decode"

    def build(bf16_state: bool) -> dict:
        if fused:
            return fused_definition(m.h, m.d, m.lower_bound, m.norm_eps, source, bf16_state)
        return family_definition(m.family, m.h, m.hv, m.d, m.lower_bound, source, bf16_state)

    fi_name = "initial_state" if _template(defn, str(def_path)) in ("recurrent_kda", "recurrent_kda_decode") else "state"
    recorded = m.tensors.get("state_pool")
    if recorded is not None:
        dtype, how = str(recorded.dtype).removeprefix("torch."), "the recorded tensor"
    else:
        dtype = str(defn.get("inputs", {}).get(fi_name, {}).get("dtype", "unknown"))
        how = f"not recorded; {def_path.name} declares it"
    if dtype != "bfloat16":
        return build(False)
    name = definition_name(m.family, m.h, m.hv, m.d, m.lower_bound, m.norm_eps) + BF16_STATE
    if name not in bf16_state_definitions():
        ours = [n for n in bf16_state_definitions() if n.startswith(f"kda_{m.family}_")]
        raise ImportProblem(where, f"inputs.{fi_name}",
                            f"a bfloat16 state pool ({how}), and the dataset has no {name}: its bfloat16-state "
                            f"{m.family} definitions are {', '.join(ours)}")
    return build(True)


def _import_workload(result: Imported, defn: dict, def_path: Path, wl: dict, where: str, roots, cache) -> None:
    template = _template(defn, str(def_path))
    if template in NO_FAMILY:
        raise ImportProblem(str(def_path), "name", f"{defn['name']!r}: {NO_FAMILY[template]}")
    uuid = wl.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        raise ImportProblem(where, "uuid", "missing")
    src = _Source(where, wl["inputs"], roots, cache)
    axes = wl.get("axes") or {}
    mapper = {"packed_kda_decode": _map_packed_decode, "fused_kda_decode": _map_fused_decode}.get(template, _map_recurrent)
    m = mapper(defn, src, axes)
    ours = _our_definition(m, defn, def_path, where)
    _add_definition(result, ours)
    ours = result.definitions[ours["name"]]
    blob = f"blob/kda/{ours['name']}/{uuid}.safetensors"
    inputs: Dict[str, dict] = {}
    tensors: Dict[str, torch.Tensor] = {}
    sizes = {**{a: v["value"] for a, v in ours["axes"].items() if v["type"] == "const"}, **m.axes}
    for name, spec in ours["inputs"].items():
        if name == "scale":
            inputs[name] = {"type": "scalar", "value": m.scale}
        elif name in m.tensors:
            t = m.tensors[name]
            want_shape = [sizes[a] for a in spec["shape"]]
            if list(t.shape) != want_shape:
                raise ImportProblem(where, f"inputs ({name} of our {m.family} family)",
                                    f"recorded shape {list(t.shape)} != {want_shape} (from the definition's axes)")
            want = spec["dtype"]
            t = t.to(getattr(torch, want)).contiguous()
            tensors[name] = t
            inputs[name] = {"type": "safetensors", "path": blob, "tensor_key": name}
        else:
            inputs[name] = m.generated.get(name, {"type": "random"})
    tokens = m.axes.get("total_seq_len", m.axes.get("batch_size", 0) * m.axes.get("num_tokens", 1))
    out = {"uuid": uuid, "axes": m.axes, "inputs": inputs}
    if m.seq_lens is not None:
        out["seq_lens"] = m.seq_lens
    out["tags"] = ["imported"] + (["smoke"] if tokens <= SMOKE_TOKENS else [])
    out["description"] = f"imported from {where} (FlashInfer-Trace definition {defn['name']!r})"
    if tensors:
        result.blobs[blob] = tensors
    result.workloads[ours["name"]].append(out)


def write_dataset(result: Imported, out_dir: Path) -> None:
    """Write (or add to) a dataset root: definitions, workloads (an existing uuid is not written twice), blobs."""
    from safetensors.torch import save_file

    ddir, wdir = out_dir / "definitions" / "kda", out_dir / "workloads" / "kda"
    ddir.mkdir(parents=True, exist_ok=True)
    wdir.mkdir(parents=True, exist_ok=True)
    for name, defn in result.definitions.items():
        path = ddir / f"{name}.json"
        if not path.exists():
            path.write_text(json.dumps(defn, indent=2) + "\n")
        wpath = wdir / f"{name}.jsonl"
        seen = {json.loads(line)["uuid"] for line in wpath.read_text().splitlines() if line.strip()} if wpath.exists() else set()
        new = [w for w in result.workloads.get(name, []) if w["uuid"] not in seen]
        with wpath.open("a") as f:
            f.writelines(json.dumps(w) + "\n" for w in new)
    for rel, tensors in result.blobs.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(path))


# --------------------------------------------------------------------------- command line

def configure_import_flashinfer(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="a folder of FlashInfer-Trace files (FLASHINFER_TRACE_DUMP_DIR, or a "
                        "flashinfer-bench trace set: definitions/, workloads/, blob/)")
    parser.add_argument("--out", type=Path, default=Path("flashinfer-import"),
                        help="dataset root to write (or add to); default ./flashinfer-import")


def command_import_flashinfer(args) -> int:
    """Import FlashInfer-Trace KDA definitions and workloads as a kda-trace dataset."""
    result = read_flashinfer_trace(args.dir)
    for p in result.problems:
        print(p, file=sys.stderr)
    for s in result.skipped:
        print(f"skipped {s}: not a KDA definition")
    if result.definitions:
        write_dataset(result, args.out)
        from .dataset import load_dataset

        ds = load_dataset(args.out)
        for p in ds.problems:
            print(f"written dataset: {p}", file=sys.stderr)
        result.problems.extend(str(p) for p in ds.problems)
    n = sum(len(w) for w in result.workloads.values())
    print(f"imported {len(result.definitions)} definitions and {n} workloads into {args.out}; "
          f"{len(result.problems)} problems")
    return 1 if result.problems else 0
