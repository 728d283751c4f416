"""The `flashinfer` solution: the KDA families whose interface a FlashInfer entry point serves, mapped onto
`flashinfer.recurrent_kda` (read in flashinfer-python 0.7.2.post1 and again in 0.7.4, the version
`kda-trace[flashinfer]` pins) and `flashinfer.fused_kda_decode` (0.7.4); docs/flashinfer_kda.md has what was read in the wheels
and what runs where.

Every family mapped here reads raw q/k (`qk_norm:l2` -> use_qk_l2norm_in_kernel=True), the raw gate with
A_log / dt_bias (`gate:unbounded` -> use_gate_in_kernel=True, lower_bound=None; `gate:safe` -> the same
with lower_bound from the `lower_bound:<x>` tag), beta logits (`beta:logits` -> beta_is_logit=True) and
K-last states [N, HV, V, K] (`state_layout:vk`, FlashInfer's only layout). dt_bias [HV, K] is passed
flattened to [HV * K]. FlashInfer takes A_log and dt_bias per q/k head ([H], [H * K]) where ours are per
value head, so only definitions without GVA (num_v_heads == num_heads) are served.

| family | FlashInfer call |
|---|---|
| decode (pool) | A bfloat16 pool (FlashInfer's state dtype, the `_bf16_state` definitions) is passed as it is, in place: `recurrent_kda` on [1, B, ...] with `cu_seqlens` = [0, 1, ..., B] (one token per sequence) and `ssm_state_indices` [B] int32, the form whose kernel reads and writes each slot itself (without `cu_seqlens` the wrapper gathers the slots into a copy and copies it back); -1 rows are padding (FlashInfer skips them and writes o = 0). A float32 pool is gathered into a bfloat16 copy of the batch's slots (FlashInfer's decode kernel keeps states in bfloat16), run in place, and written back to those slots as float32 |
| mtp (pool) | speculative decode, `num_spec_tokens = num_tokens - 1`. A bfloat16 pool in place: tokens packed [1, B * T, ...] with `cu_seqlens` [0, T, 2T, ...] and `ssm_state_indices` [B, T] naming request n's slot at every position: FlashInfer reads slot [n, 0] once, keeps the state in float32 registers and writes it after every token into slot [n, t], the last write (after token T - 1) being the state the slot keeps; padding rows (-1) are skipped. A float32 pool: a scratch pool of B * T bfloat16 slots and `ssm_state_indices` [B, T]: slot [n, 0] holds request n's state before its first token, and FlashInfer writes the state after token t into slot [n, t]; the last one goes back to the pool. num_tokens = 1 is the decode call |
| prefill (packed) | `recurrent_kda` on [1, T, ...] with `cu_seqlens` and `output_final_state=True`; the initial states are cloned first (FlashInfer updates `initial_state` in place, and the runner forbids changed inputs). FlashInfer ships prefill kernels for compute capability 10.0, 10.3 and 12.0 only: elsewhere this family is unsupported |
| fused_decode (pool) | `fused_kda_decode(x, conv_weight, conv_state, g_raw[None], b[None], A_log, dt_bias [H * D], state_indices, state_pool, output_gate, norm_weight, lower_bound, norm_eps)`: both pools passed as they are and updated in place by the kernel, float32 or bfloat16 state pool alike (the kernel takes either), the conv pool in its DS layout ([pool, qkv_dim, 3] contiguous: strides [slot, 3, 1]), int32 slots with -1 and 0 (the null slot) as padding rows (FlashInfer's "non-positive indices select the null path": zero output, nothing written); o is its output [1, B, H, D] viewed [B, H, D]. No conversion of any input. Served from flashinfer-python 0.7.4 (0.7.2.post1's kernel takes the SD conv layout only and 6 head counts); head dim 128, H in 8, 12, 16, 24, 32, 48, 64, 96, a negative lower bound; the query scale is FlashInfer's fixed 128^-0.5, so a call with another `scale` raises |

The decode and mtp calls take `backend="cute-dsl"` (the backend FlashInfer documents for decode on any
architecture its CuTe DSL supports), the prefill call `backend="auto"`; the environment variable
KDA_TRACE_FLASHINFER_BACKEND overrides these three (the GPU probe tries each). The fused decode call always takes
`backend="cute-dsl"`: fused_kda_decode's Cake routes read the SD conv layout only (run_fused_kda_decode selects
one only when the conv pool is not DS). Every conversion above (gather, bfloat16 casts, clones, write-back) is
inside the timed call; the bfloat16 pools and the fused decode have none (the int32 slots, cu_seqlens and the
[B, T] slot rows are built per call: a few hundred bytes).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from typing import Any, Callable, Dict, Optional

import torch

from ..schema import Definition
from .base import reference_constant

FAMILY_INPUTS = {
    "decode": {"q", "k", "v", "g_raw", "A_log", "dt_bias", "b", "state_pool", "state_indices", "scale"},
    "mtp": {"q", "k", "v", "g_raw", "A_log", "dt_bias", "b", "state_pool", "state_indices", "scale"},
    "prefill": {"q", "k", "v", "g_raw", "A_log", "dt_bias", "b", "initial_state", "cu_seqlens", "scale"},
    "fused_decode": {"x", "conv_weight", "conv_state", "g_raw", "A_log", "dt_bias", "b", "state_pool", "state_indices",
                     "output_gate", "norm_weight", "scale"},
}
NO_ENTRY_POINT = {
    "forward": "FlashInfer has no dense [B, T] KDA forward with a precomputed gate and a [K, V] state",
    "backward": "FlashInfer has no KDA backward",
    "gate": "FlashInfer has no stand-alone KDA gate op (the gate is fused into recurrent_kda)",
}
PREFILL_CAPABILITIES = {(10, 0), (10, 3), (12, 0)}
BACKEND_ENV = "KDA_TRACE_FLASHINFER_BACKEND"
# fused_kda_decode's limits (flashinfer/kda_kernels/fused_kda_decode.py of 0.7.4: _SUPPORTED_HEADS, _HEAD_DIM,
# _Q_SCALE, run_fused_kda_decode's checks); 0.7.2.post1 takes 6 head counts and only the SD conv layout.
FUSED_MIN_VERSION = (0, 7, 4)
FUSED_HEADS = (8, 12, 16, 24, 32, 48, 64, 96)
FUSED_HEAD_DIM = 128
FUSED_SCALE = FUSED_HEAD_DIM ** -0.5


def flashinfer_available() -> bool:
    """Whether flashinfer-python can be found here (not imported: importing it is slow)."""
    return importlib.util.find_spec("flashinfer") is not None


def flashinfer_version() -> Optional[str]:
    """The installed flashinfer-python's version (from its metadata, without importing it), or None."""
    try:
        return importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple:
    """(0, 7, 2) for "0.7.2.post1": the release numbers a version starts with."""
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])


def norm_eps(d: Definition) -> Optional[float]:
    """The RMSNorm eps of a fused_decode definition: its reference's NORM_EPS constant (None when absent)."""
    eps = reference_constant(d, "NORM_EPS")
    return float(eps) if isinstance(eps, (int, float)) and not isinstance(eps, bool) else None


def options(d: Definition) -> Dict[str, Any]:
    """recurrent_kda keyword arguments implied by the definition's tags (the subset every family shares)."""
    gate = d.tag("gate", "precomputed")
    return {
        "use_qk_l2norm_in_kernel": True,
        "use_gate_in_kernel": True,
        "lower_bound": float(d.tag("lower_bound", "-5")) if gate == "safe" else None,
        "beta_is_logit": True,
    }


def unsupported_reason(d: Definition, capability: Optional[tuple], version: Optional[str] = None) -> Optional[str]:
    """Why FlashInfer cannot run `d` (None when it can), from the tags, shapes and dtypes alone.

    `capability` is the CUDA device's (major, minor), or None without CUDA; `version` the installed
    flashinfer-python's (None: not checked)."""
    if d.op_type != "kda":
        return f"op_type {d.op_type!r} is not kda"
    stage = d.tag("stage")
    if stage in NO_ENTRY_POINT:
        return NO_ENTRY_POINT[stage]
    if stage not in FAMILY_INPUTS:
        return f"no FlashInfer adapter for stage {stage!r}"
    missing = FAMILY_INPUTS[stage] - set(d.inputs)
    if missing:
        return f"inputs {sorted(missing)} of the {stage} family are missing"
    wanted = {"qk_norm": ("l2",), "gate": ("unbounded", "safe"), "beta": ("logits",), "state_layout": ("vk",)}
    api = "fused_kda_decode" if stage == "fused_decode" else "recurrent_kda"
    for key, allowed in wanted.items():
        if d.tag(key) not in allowed:
            return f"tag {key}:{d.tag(key)} has no {api} equivalent (it takes {key}:{'|'.join(allowed)})"
    if stage == "fused_decode":
        reason = _fused_reason(d, version)
        if reason is not None:
            return reason
        return None if capability is not None else "FlashInfer's KDA kernels need a CUDA device"
    axes = d.const_axes
    h, hv, dk, dv = (axes.get(a) for a in ("num_heads", "num_v_heads", "head_dim_k", "head_dim_v"))
    if dk != dv or dk not in (64, 128):
        return f"recurrent_kda needs head_dim_k == head_dim_v in (64, 128), got {dk} and {dv}"
    if not h or not hv or hv % h:
        return f"recurrent_kda needs num_v_heads a multiple of num_heads, got {h} and {hv}"
    if hv != h:
        return (f"recurrent_kda reads A_log [H] and dt_bias [H*K] per q/k head (its kernels index them by "
                f"hv // (HV/H)); our families give them per value head, so with GVA ({h} q/k heads, {hv} value "
                f"heads) the gates differ")
    for name in ("q", "k", "v", "g_raw", "b"):
        if d.inputs[name].dtype != "bfloat16":
            return f"recurrent_kda takes bfloat16 {name}, the definition has {d.inputs[name].dtype}"
    if capability is None:
        return "FlashInfer's KDA kernels need a CUDA device"
    if stage == "prefill" and tuple(capability) not in PREFILL_CAPABILITIES:
        return (f"FlashInfer 0.7.2.post1 has KDA prefill kernels for compute capability 10.0, 10.3 and 12.0 only "
                f"(this device: {capability[0]}.{capability[1]}); elsewhere recurrent_kda hands a packed prefill "
                f"to its decode kernel, which reads one token per sequence")
    return None


def _fused_reason(d: Definition, version: Optional[str]) -> Optional[str]:
    """Why fused_kda_decode cannot run the fused_decode definition `d` (None when it can)."""
    if version is not None and _release(version) < FUSED_MIN_VERSION:
        return (f"flashinfer-python {version}'s fused_kda_decode takes the conv pool in the SD layout only (strides "
                f"[slot, 1, qkv_dim]), this family's is DS ([pool, qkv_dim, 3] contiguous), which it takes from 0.7.4")
    axes = d.const_axes
    h, hv, dk, dv = (axes.get(a) for a in ("num_heads", "num_v_heads", "head_dim_k", "head_dim_v"))
    if dk != FUSED_HEAD_DIM or dv != FUSED_HEAD_DIM:
        return f"fused_kda_decode has one head dim, {FUSED_HEAD_DIM}; the definition has {dk} and {dv}"
    if h not in FUSED_HEADS:
        return f"fused_kda_decode takes {', '.join(map(str, FUSED_HEADS))} heads, not {h}"
    if hv != h:
        return f"fused_kda_decode has no GVA ({h} q/k heads, {hv} value heads)"
    if axes.get("conv_width") != 4 or axes.get("conv_history") != 3:
        return f"fused_kda_decode's convolution has width 4 (history 3), the definition's {axes.get('conv_width')}"
    bound = options(d)["lower_bound"]
    if bound is not None and bound >= 0:
        return f"fused_kda_decode takes a negative lower_bound, the definition's is {bound:g}"
    if norm_eps(d) is None:
        return "the definition's reference has no NORM_EPS constant (fused_kda_decode's norm_eps)"
    wanted = {"x": ("bfloat16",), "conv_state": ("bfloat16",), "g_raw": ("bfloat16",), "b": ("bfloat16",),
              "output_gate": ("bfloat16",), "conv_weight": ("float32",), "A_log": ("float32",),
              "dt_bias": ("float32",), "norm_weight": ("float32",), "state_pool": ("float32", "bfloat16"),
              "state_indices": ("int32", "int64")}
    for name, dtypes in wanted.items():
        if d.inputs[name].dtype not in dtypes:
            return f"fused_kda_decode takes {' or '.join(dtypes)} {name}, the definition has {d.inputs[name].dtype}"
    return None


class FlashInferSolution:
    """Adapters from the decode, mtp and prefill families onto flashinfer.recurrent_kda (module docstring)."""

    name = "flashinfer"

    def __init__(self, device: str = "cpu"):
        self.device = device

    def _capability(self) -> Optional[tuple]:
        if not self.device.startswith("cuda") or not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_capability(torch.device(self.device))

    def supports(self, definition: Definition) -> str | None:
        if not flashinfer_available():
            return "flashinfer-python is not installed (pip install 'kda-trace[flashinfer]')"
        return unsupported_reason(definition, self._capability(), flashinfer_version())

    def build(self, definition: Definition, device: str) -> Callable[..., Any]:
        use_writable_workspace()
        import flashinfer

        stage = definition.tag("stage")
        if stage == "fused_decode":
            opts = {"lower_bound": options(definition)["lower_bound"], "norm_eps": norm_eps(definition)}
            return lambda **inputs: fused_decode(flashinfer, inputs, opts, "cute-dsl")
        opts = options(definition)
        default = "auto" if stage == "prefill" else "cute-dsl"
        backend = os.environ.get(BACKEND_ENV, default)
        call = {"decode": decode, "mtp": mtp, "prefill": prefill}[stage]
        return lambda **inputs: call(flashinfer, inputs, opts, backend)


WORKSPACE_ENV = "FLASHINFER_WORKSPACE_BASE"


def use_writable_workspace() -> None:
    """Point FlashInfer's JIT workspace (its log and the kernels it compiles, under $FLASHINFER_WORKSPACE_BASE/.cache,
    by default the home directory) at this process's temporary directory when the default cannot be written: in the
    runner's sandbox the home directory is read-only, and `import flashinfer` then fails opening its JIT log
    (OSError, read-only file system). The kernels are compiled per process there (about 2 s each on an H200); a cache
    that solutions' processes share would let one plant code for another. Before `import flashinfer`, which reads
    the variable once; a value already set is kept."""
    if os.environ.get(WORKSPACE_ENV):
        return
    home = os.path.expanduser("~")
    target = os.path.join(home, ".cache", "flashinfer")
    while not os.path.exists(target):
        target = os.path.dirname(target)
    if not os.access(target, os.W_OK):
        import tempfile

        os.environ[WORKSPACE_ENV] = tempfile.gettempdir()


def _common(inputs: Dict[str, Any], opts: Dict[str, Any], backend: str) -> Dict[str, Any]:
    return {"A_log": inputs["A_log"], "dt_bias": inputs["dt_bias"].reshape(-1), "scale": float(inputs["scale"]),
            "backend": backend, **opts}


def _int32(t: torch.Tensor) -> torch.Tensor:
    """int32 as FlashInfer takes slots and offsets, 16-byte aligned as its CuTe DSL kernels require (the tensor
    itself when it already is; a view into a larger tensor may not be: fused_kda_decode refused a one-row slice on an
    H200 with "Misaligned Tensor data on argument #7")."""
    if t.dtype == torch.int32 and t.data_ptr() % 16 == 0:
        return t
    return torch.empty(t.shape, dtype=torch.int32, device=t.device).copy_(t)


def decode(fi, inputs: Dict[str, Any], opts: Dict[str, Any], backend: str):
    """One token per request against the pool; returns (o [B, HV, V], the pool, updated in place)."""
    pool, idx = inputs["state_pool"], inputs["state_indices"]
    if pool.dtype == torch.bfloat16:  # FlashInfer's own state dtype: its kernel updates the slots in place
        B = idx.shape[0]
        seq = {n: inputs[n][None] for n in ("q", "k", "v", "g_raw", "b")}  # [1, B, ...]: one token per sequence
        cu = torch.arange(B + 1, dtype=torch.int32, device=idx.device)
        o, _ = fi.recurrent_kda(seq["q"], seq["k"], seq["v"], seq["g_raw"], seq["b"], initial_state=pool,
                                cu_seqlens=cu, ssm_state_indices=_int32(idx), output_final_state=False,
                                **_common(inputs, opts, backend))
        return o[0], pool
    seq = {n: inputs[n][:, None] for n in ("q", "k", "v", "g_raw", "b")}  # [B, 1, ...]
    states = pool[idx].to(torch.bfloat16).contiguous()  # [B, HV, V, K]: FlashInfer's decode state dtype
    o, _ = fi.recurrent_kda(seq["q"], seq["k"], seq["v"], seq["g_raw"], seq["b"], initial_state=states,
                            output_final_state=False, **_common(inputs, opts, backend))
    pool[idx] = states.to(pool.dtype)
    return o[:, 0], pool


def mtp(fi, inputs: Dict[str, Any], opts: Dict[str, Any], backend: str):
    """num_tokens tokens per request as one speculative-decode call; returns (o [B, T, HV, V], the pool)."""
    q = inputs["q"]
    B, T = q.shape[:2]
    if T == 1:
        o, pool = decode(fi, {**inputs, **{n: inputs[n][:, 0] for n in ("q", "k", "v", "g_raw", "b")}}, opts, backend)
        return o[:, None], pool
    pool, idx = inputs["state_pool"], inputs["state_indices"]
    if pool.dtype == torch.bfloat16:  # in place: every position of row n names the request's slot
        flat = {n: inputs[n].reshape(1, B * T, *inputs[n].shape[2:]) for n in ("q", "k", "v", "g_raw", "b")}
        cu = torch.arange(0, B * T + 1, T, dtype=torch.int32, device=idx.device)
        slots = _int32(idx)[:, None].expand(B, T).contiguous()
        o, _ = fi.recurrent_kda(flat["q"], flat["k"], flat["v"], flat["g_raw"], flat["b"], initial_state=pool,
                                cu_seqlens=cu, ssm_state_indices=slots, num_spec_tokens=T - 1,
                                output_final_state=False, **_common(inputs, opts, backend))
        return o.reshape(B, T, *o.shape[-2:]), pool
    scratch = torch.zeros(B * T, *pool.shape[1:], dtype=torch.bfloat16, device=pool.device)
    slots = torch.arange(B * T, dtype=torch.int32, device=pool.device).reshape(B, T)
    scratch[slots[:, 0].long()] = pool[idx].to(torch.bfloat16)  # slot [n, 0]: the state before token 0
    o, _ = fi.recurrent_kda(q, inputs["k"], inputs["v"], inputs["g_raw"], inputs["b"], initial_state=scratch,
                            ssm_state_indices=slots, num_spec_tokens=T - 1, output_final_state=False,
                            **_common(inputs, opts, backend))
    pool[idx] = scratch[slots[:, T - 1].long()].to(pool.dtype)  # slot [n, T-1]: the state after the last token
    return o.reshape(B, T, *o.shape[-2:]), pool


def prefill(fi, inputs: Dict[str, Any], opts: Dict[str, Any], backend: str):
    """A packed varlen batch; returns (o [T, HV, V], final_state [N, HV, V, K] float32)."""
    init = inputs.get("initial_state")
    cu = inputs["cu_seqlens"]
    if init is not None:
        init = init.clone()  # FlashInfer updates initial_state in place
    seq = {n: inputs[n][None] for n in ("q", "k", "v", "g_raw", "b")}  # [1, T, ...]
    o, final = fi.recurrent_kda(seq["q"], seq["k"], seq["v"], seq["g_raw"], seq["b"], initial_state=init,
                                cu_seqlens=cu, output_final_state=True, **_common(inputs, opts, backend))
    if final is None:  # some backends update initial_state and return it only through the argument
        final = init
    return o[0], final.float()


def fused_decode(fi, inputs: Dict[str, Any], opts: Dict[str, Any], backend: str):
    """Conv + KDA step + gated RMSNorm in one fused_kda_decode call; returns (o [B, H, D], the conv pool, the state
    pool), both pools updated in place by FlashInfer."""
    scale = float(inputs["scale"])
    if abs(scale - FUSED_SCALE) > 1e-6 * FUSED_SCALE:  # a float32 scalar of 128 ** -0.5 is within 3e-8
        raise ValueError(f"fused_kda_decode fixes the query scale at {FUSED_HEAD_DIM} ** -0.5 (_Q_SCALE in "
                         f"flashinfer/kda_kernels/fused_kda_decode.py); this call's scale is {scale!r}")
    conv_state, pool = inputs["conv_state"], inputs["state_pool"]
    out = fi.fused_kda_decode(inputs["x"], inputs["conv_weight"], conv_state, inputs["g_raw"][None],
                              inputs["b"][None], inputs["A_log"], inputs["dt_bias"].reshape(-1),
                              _int32(inputs["state_indices"]), pool, inputs["output_gate"], inputs["norm_weight"],
                              lower_bound=opts["lower_bound"], norm_eps=opts["norm_eps"], backend=backend)
    return out[0], conv_state, pool
