"""The `fla` solution: each KDA family of docs/KDA_FAMILIES.md mapped onto fla-core's `fla.ops.kda`.

Options come from the definition's tags (docs/FORMAT.md): `qk_norm:l2` -> use_qk_l2norm_in_kernel,
`gate:unbounded` -> use_gate_in_kernel with A_log / dt_bias, `gate:safe` -> the same plus safe_gate and
lower_bound (tag `lower_bound:<x>`, default -5), `beta:logits` -> use_beta_sigmoid_in_kernel,
`state_layout:vk` -> state_v_first.

| family | fla call |
|---|---|
| prefill (packed, cu_seqlens) | `chunk_kda` on [1, T, ...] with cu_seqlens (GPU only) |
| prefill_chunk_states | the same with `return_intermediate_states=True` (under inference mode); fla's bf16 chunk-start states `[1, NT, HV, V, K]` converted to the definition's float32 (GPU only) |
| forward (dense) | `chunk_kda` (GPU only) |
| backward | `chunk_kda` + autograd (dense or packed, in-kernel gate / norm / beta logits), gradients of (o, final_state) against (do, dht) (GPU only) |
| decode (pool) | `fused_recurrent_kda_fwd` with `ssm_state_indices` and `inplace_final_state=True`: fla reads and writes each request's pool slot directly (the vLLM path) |
| mtp (pool) | gather the slots, `fused_recurrent_kda`, scatter the final states back: fla's in-place pool path indexes a different slot per token (it keeps every intermediate state), not one slot per request |
| decode and mtp with a bf16 pool (`feature:bf16_state`) | `fused_recurrent_kda_fwd` in place on the pool (vLLM's call): tokens packed with `cu_seqlens` where the -1 padding rows (after the real rows) have zero tokens, `ssm_state_indices` [B] (decode) or [B, T] naming the request's slot at every position (mtp: fla reads it once, keeps the state in float32 and writes it after every token, the last write staying); fla stores the bf16 state with Triton's conversion (round to nearest even compiled; truncation under TRITON_INTERPRET) |
| spec_verify (pool) | `fused_recurrent_kda_fwd` with a 2-D `ssm_state_indices`, `num_accepted_tokens` and `inplace_final_state=True`, tokens packed with `cu_seqlens` where padding rows have zero tokens (vLLM's call: fla skips zero-token sequences, so their -1 slots are never touched) |
| gate | `fused_kda_gate` (GPU only) |
| fused_decode (pool) | no fused kernel in fla, so composed as an engine without one runs the step: the width-4 causal convolution + SiLU in torch ops (float32, taps summed oldest first, rounded to bf16; the window moves by one in the conv pool, in place), `fused_recurrent_kda_fwd` in place on the float32 or bf16 pool (the bf16-pool decode call: zero-token sequences for padding rows), then the gated RMSNorm: fla's `rms_norm_gated(activation="sigmoid")` (FusedRMSNormGated's kernel) on a GPU, the same formula in torch ops on the CPU. Padding rows (slot -1, or the null slot 0) may sit anywhere: the rows are reordered live first by a stable sort on the device (no host synchronisation, so that the call can be captured in a CUDA graph) and put back after the norm; a padding row's convolution reads the null slot's window and writes it back unchanged, fla never reads or writes its slot, its output is zero |

On the CPU, `fused_recurrent_kda` runs under TRITON_INTERPRET=1; `chunk_kda` and the gate kernel are
autotuned and need a GPU driver, so those families are reported as unsupported there.

fused_decode, the parts not taken from fla: fla-core 0.6.0's `causal_conv1d_update` (ShortConvolution.step) keeps a
dense per-row cache [N, D, W] holding the full width and takes no slot indices, so a slot pool would need the same
gather and scatter around it plus a width-W copy; the torch form reads the pool's [pool, C, W - 1] windows directly.
fla's `rms_norm_gated` computes the reference's norm (x / sqrt(mean(x^2) + eps) * weight * sigmoid(gate), bf16 out)
but is autotuned, so it runs only where Triton has a GPU driver; on the CPU the same formula runs in torch ops.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable, Dict

import torch

from ..platform import ensure_triton_can_run
from ..schema import Definition
from .base import reference_constant

FAMILY_INPUTS = {
    "prefill": {"q", "k", "v", "cu_seqlens", "scale"},
    "prefill_chunk_states": {"q", "k", "v", "cu_seqlens", "scale"},
    "forward": {"q", "k", "v", "g", "beta", "scale"},
    "backward": {"q", "k", "v", "initial_state", "scale", "do", "dht"},
    "decode": {"q", "k", "v", "state_pool", "state_indices", "scale"},
    "mtp": {"q", "k", "v", "state_pool", "state_indices", "scale"},
    "spec_verify": {"q", "k", "v", "state_pool", "state_indices", "num_accepted_tokens", "scale"},
    "gate": {"g_raw", "A_log", "dt_bias"},
    "fused_decode": {"x", "conv_weight", "conv_state", "g_raw", "A_log", "dt_bias", "b", "state_pool", "state_indices",
                     "output_gate", "norm_weight", "scale"},
}
GPU_ONLY = {"prefill", "prefill_chunk_states", "forward", "backward", "gate"}


def fla_available() -> bool:
    """Whether fla-core can be imported here."""
    return importlib.util.find_spec("fla") is not None


def _options(d: Definition) -> Dict[str, Any]:
    """fla keyword arguments implied by the definition's tags."""
    gate = d.tag("gate", "precomputed")
    opts: Dict[str, Any] = {
        "use_qk_l2norm_in_kernel": d.tag("qk_norm", "none") == "l2",
        "use_gate_in_kernel": gate in ("unbounded", "safe"),
        "use_beta_sigmoid_in_kernel": d.tag("beta", "prob") in ("logits", "logits_x2"),
        "allow_neg_eigval": d.tag("beta", "prob") == "logits_x2",
        "state_v_first": d.tag("state_layout", "kv") == "vk",
        "lower_bound": float(d.tag("lower_bound", "-5")) if gate == "safe" else None,
    }
    return opts


def _gate_and_beta(inputs: Dict[str, Any], opts: Dict[str, Any]):
    """(g, beta, gate kwargs) from a family's inputs: raw gate + A_log/dt_bias, or a precomputed g."""
    g = inputs["g_raw"] if opts["use_gate_in_kernel"] else inputs["g"]
    beta = inputs["b"] if "b" in inputs else inputs["beta"]
    extra = {}
    if opts["use_gate_in_kernel"]:
        extra["A_log"] = inputs.get("A_log")
        dt_bias = inputs.get("dt_bias")
        extra["dt_bias"] = dt_bias.reshape(-1) if dt_bias is not None else None
    return g, beta, extra


class FlaSolution:
    """Adapters from each KDA family onto fla.ops.kda (see the module docstring)."""

    name = "fla"

    def __init__(self, device: str = "cpu"):
        self.device = device

    def supports(self, definition: Definition) -> str | None:
        if not fla_available():
            return "fla-core is not installed (pip install fla-core)"
        if definition.op_type != "kda":
            return f"op_type {definition.op_type!r} is not kda"
        stage = definition.tag("stage")
        if stage not in FAMILY_INPUTS:
            return f"no fla adapter for stage {stage!r}"
        missing = FAMILY_INPUTS[stage] - set(definition.inputs)
        if missing:
            return f"inputs {sorted(missing)} of the {stage} family are missing"
        if stage in GPU_ONLY and not self.device.startswith("cuda"):
            return f"fla's {stage} kernels are autotuned and need a GPU driver (not under TRITON_INTERPRET on the CPU)"
        if stage == "gate" and definition.tag("gate") == "precomputed":
            return "a gate definition needs gate:unbounded or gate:safe"
        if stage == "fused_decode":
            return _fused_decode_reason(definition)
        return None

    def build(self, definition: Definition, device: str) -> Callable[..., Any]:
        ensure_triton_can_run(device)
        stage = definition.tag("stage")
        opts = _options(definition)
        return {"prefill": _prefill, "prefill_chunk_states": _prefill_chunk_states, "forward": _forward, "backward": _backward, "decode": _decode,
                "mtp": _mtp, "spec_verify": _spec_verify, "gate": _gate,
                "fused_decode": _fused_decode}[stage](definition, opts)


def _prefill(d: Definition, opts):
    from fla.ops.kda import chunk_kda

    def run(**inputs):
        g, beta, extra = _gate_and_beta(inputs, opts)
        o, ht = chunk_kda(
            inputs["q"][None], inputs["k"][None], inputs["v"][None], g[None], beta[None],
            scale=float(inputs["scale"]), initial_state=inputs.get("initial_state"), output_final_state=True,
            use_qk_l2norm_in_kernel=opts["use_qk_l2norm_in_kernel"], use_gate_in_kernel=opts["use_gate_in_kernel"],
            use_beta_sigmoid_in_kernel=opts["use_beta_sigmoid_in_kernel"], allow_neg_eigval=opts["allow_neg_eigval"],
            safe_gate=opts["lower_bound"] is not None, lower_bound=opts["lower_bound"],
            state_v_first=opts["state_v_first"], cu_seqlens=inputs["cu_seqlens"], **extra)
        return o[0], ht

    return run


def _prefill_chunk_states(d: Definition, opts):
    from fla.ops.kda import chunk_kda

    def run(**inputs):
        g, beta, extra = _gate_and_beta(inputs, opts)
        with torch.inference_mode():  # fla returns the intermediate states only in inference mode
            o, ht, h = chunk_kda(
                inputs["q"][None], inputs["k"][None], inputs["v"][None], g[None], beta[None],
                scale=float(inputs["scale"]), initial_state=inputs.get("initial_state"), output_final_state=True,
                use_qk_l2norm_in_kernel=opts["use_qk_l2norm_in_kernel"], use_gate_in_kernel=opts["use_gate_in_kernel"],
                use_beta_sigmoid_in_kernel=opts["use_beta_sigmoid_in_kernel"], allow_neg_eigval=opts["allow_neg_eigval"],
                safe_gate=opts["lower_bound"] is not None, lower_bound=opts["lower_bound"],
                state_v_first=opts["state_v_first"], cu_seqlens=inputs["cu_seqlens"],
                return_intermediate_states=True, **extra)
        # h: [1, NT, HV, K, V] bf16, or [1, NT, HV, V, K] with state_v_first (asserted: a layout mix-up fails here)
        spec_shape = (d.outputs["chunk_states"].shape or [])[-2:]
        want_vk = spec_shape == ["head_dim_v", "head_dim_k"]
        if want_vk != opts["state_v_first"]:
            raise ValueError(f"{d.name}: chunk_states layout {spec_shape} disagrees with the state_layout tag")
        return o[0], ht, h[0].float()

    return run


def _forward(d: Definition, opts):
    from fla.ops.kda import chunk_kda

    def run(**inputs):
        g, beta, extra = _gate_and_beta(inputs, opts)
        return chunk_kda(
            inputs["q"], inputs["k"], inputs["v"], g, beta, scale=float(inputs["scale"]),
            initial_state=inputs.get("initial_state"), output_final_state=True,
            use_qk_l2norm_in_kernel=opts["use_qk_l2norm_in_kernel"], use_gate_in_kernel=opts["use_gate_in_kernel"],
            use_beta_sigmoid_in_kernel=opts["use_beta_sigmoid_in_kernel"],
            safe_gate=opts["lower_bound"] is not None, lower_bound=opts["lower_bound"],
            state_v_first=opts["state_v_first"], **extra)

    return run


def _backward(d: Definition, opts):
    """Dense (q [B, T, H, K]) or packed (q [T, H, K] with cu_seqlens); precomputed g and beta, or the raw gate,
    A_log, dt_bias and beta logits (in fla's kernel); gradients of every input named by an output d<name>
    (dh0: initial_state), in output order."""
    from fla.ops.kda import chunk_kda

    names = ["initial_state" if out == "dh0" else out[1:] for out in d.outputs]

    def run(**inputs):
        packed = inputs.get("cu_seqlens") is not None
        lift = (lambda t: t[None]) if packed else (lambda t: t)
        with torch.enable_grad():
            leaves = {n: inputs[n].detach().clone().requires_grad_(True) for n in names}
            g, beta, extra = _gate_and_beta({**inputs, **leaves}, opts)
            o, ht = chunk_kda(lift(leaves["q"]), lift(leaves["k"]), lift(leaves["v"]), lift(g), lift(beta),
                              scale=float(inputs["scale"]), initial_state=leaves["initial_state"],
                              output_final_state=True, state_v_first=opts["state_v_first"],
                              use_qk_l2norm_in_kernel=opts["use_qk_l2norm_in_kernel"],
                              use_gate_in_kernel=opts["use_gate_in_kernel"],
                              use_beta_sigmoid_in_kernel=opts["use_beta_sigmoid_in_kernel"],
                              safe_gate=opts["lower_bound"] is not None, lower_bound=opts["lower_bound"],
                              cu_seqlens=inputs.get("cu_seqlens"), **extra)
            grads = torch.autograd.grad((o, ht), [leaves[n] for n in names], (lift(inputs["do"]), inputs["dht"]))
        return tuple(grads)

    return run


def _bf16_pool(d: Definition, opts, mtp: bool):
    """decode / mtp on a bf16 pool with -1 padding rows after the real ones, in place (see the module docstring)."""
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    def run(**inputs):
        g, beta, extra = _gate_and_beta(inputs, opts)
        pool, idx = inputs["state_pool"], inputs["state_indices"]
        B = idx.shape[0]
        T = inputs["q"].shape[1] if mtp else 1
        flat = lambda t: t.reshape(1, B * T, *t.shape[(2 if mtp else 1):])  # noqa: E731
        lens = (idx >= 0).to(torch.int32) * T  # padding rows: zero-token sequences, which fla skips
        cu_seqlens = torch.nn.functional.pad(torch.cumsum(lens, 0, dtype=torch.int32), (1, 0))
        slots = idx[:, None].expand(B, T).contiguous() if mtp else idx
        out = torch.zeros_like(flat(inputs["v"]))  # padding rows' o stays zero
        fused_recurrent_kda_fwd(
            q=flat(inputs["q"]), k=flat(inputs["k"]), v=flat(inputs["v"]), g=flat(g), beta=flat(beta),
            scale=float(inputs["scale"]), initial_state=pool, inplace_final_state=True, cu_seqlens=cu_seqlens,
            ssm_state_indices=slots, out=out, use_qk_l2norm_in_kernel=opts["use_qk_l2norm_in_kernel"],
            use_gate_in_kernel=opts["use_gate_in_kernel"], use_beta_sigmoid_in_kernel=opts["use_beta_sigmoid_in_kernel"],
            allow_neg_eigval=opts["allow_neg_eigval"], lower_bound=opts["lower_bound"],
            state_v_first=opts["state_v_first"], **extra)
        return out.reshape(inputs["v"].shape), pool

    return run


def _bf16_state(d: Definition) -> bool:
    return "bf16_state" in d.tag_values.get("feature", [])


def _decode(d: Definition, opts):
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    if _bf16_state(d):
        return _bf16_pool(d, opts, mtp=False)

    def run(**inputs):
        g, beta, extra = _gate_and_beta(inputs, opts)
        pool = inputs["state_pool"]
        o, _ = fused_recurrent_kda_fwd(
            q=inputs["q"][:, None], k=inputs["k"][:, None], v=inputs["v"][:, None], g=g[:, None],
            beta=beta[:, None], scale=float(inputs["scale"]), initial_state=pool, inplace_final_state=True,
            ssm_state_indices=inputs["state_indices"], use_qk_l2norm_in_kernel=opts["use_qk_l2norm_in_kernel"],
            use_gate_in_kernel=opts["use_gate_in_kernel"], use_beta_sigmoid_in_kernel=opts["use_beta_sigmoid_in_kernel"],
            allow_neg_eigval=opts["allow_neg_eigval"], lower_bound=opts["lower_bound"],
            state_v_first=opts["state_v_first"], **extra)
        return o[:, 0], pool

    return run


def _mtp(d: Definition, opts):
    from fla.ops.kda import fused_recurrent_kda

    if _bf16_state(d):
        return _bf16_pool(d, opts, mtp=True)

    def run(**inputs):
        g, beta, extra = _gate_and_beta(inputs, opts)
        pool, idx = inputs["state_pool"], inputs["state_indices"]
        o, ht = fused_recurrent_kda(
            inputs["q"], inputs["k"], inputs["v"], g, beta, scale=float(inputs["scale"]),
            initial_state=pool[idx].contiguous(), output_final_state=True,
            use_qk_l2norm_in_kernel=opts["use_qk_l2norm_in_kernel"], use_gate_in_kernel=opts["use_gate_in_kernel"],
            use_beta_sigmoid_in_kernel=opts["use_beta_sigmoid_in_kernel"], allow_neg_eigval=opts["allow_neg_eigval"],
            lower_bound=opts["lower_bound"], state_v_first=opts["state_v_first"], **extra)
        pool[idx] = ht
        return o, pool

    return run


def _spec_verify(d: Definition, opts):
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    def run(**inputs):
        g, beta, extra = _gate_and_beta(inputs, opts)
        pool, idx = inputs["state_pool"], inputs["state_indices"]
        B, T = idx.shape
        # vLLM packs the verify tokens with spec_query_start_loc; a padding row (indices -1, after the real
        # rows) is a sequence of zero tokens, which fla's kernel returns from before reading an index.
        lens = (idx[:, 0] >= 0).to(torch.int32) * T
        cu_seqlens = torch.nn.functional.pad(torch.cumsum(lens, 0, dtype=torch.int32), (1, 0))
        flat = lambda t: t.reshape(1, B * T, *t.shape[2:])  # noqa: E731
        out = torch.zeros_like(flat(inputs["v"]))  # vLLM's output buffer: padding tokens keep zeros
        fused_recurrent_kda_fwd(
            q=flat(inputs["q"]), k=flat(inputs["k"]), v=flat(inputs["v"]), g=flat(g), beta=flat(beta),
            scale=float(inputs["scale"]), initial_state=pool, inplace_final_state=True, cu_seqlens=cu_seqlens,
            ssm_state_indices=idx, num_accepted_tokens=inputs["num_accepted_tokens"], out=out,
            use_qk_l2norm_in_kernel=opts["use_qk_l2norm_in_kernel"], use_gate_in_kernel=opts["use_gate_in_kernel"],
            use_beta_sigmoid_in_kernel=opts["use_beta_sigmoid_in_kernel"], allow_neg_eigval=opts["allow_neg_eigval"],
            lower_bound=opts["lower_bound"], state_v_first=opts["state_v_first"], **extra)
        return out.reshape(inputs["v"].shape), pool

    return run


def _gate(d: Definition, opts):
    from fla.ops.kda.gate import fused_kda_gate

    def run(**inputs):
        return fused_kda_gate(inputs["g_raw"], inputs["A_log"], inputs["dt_bias"].reshape(-1),
                              lower_bound=opts["lower_bound"], output_dtype=torch.float32)

    return run


NORM_EPS_DEFAULT = 1e-5  # the fused decode's RMSNorm eps when a reference does not set NORM_EPS (FlashInfer's default)


def _fused_decode_reason(d: Definition) -> str | None:
    """Why the composed fused decode cannot serve `d` (None when it can)."""
    axes = d.const_axes
    h, hv, dk, dv = (axes.get(a) for a in ("num_heads", "num_v_heads", "head_dim_k", "head_dim_v"))
    if d.tag("gate", "precomputed") not in ("unbounded", "safe"):
        return "the fused decode takes the raw gate (gate:unbounded or gate:safe)"
    if hv != h or dk != dv:
        return f"the fused decode splits x into q | k | v of one shape: {h} / {hv} heads, head dims {dk} / {dv}"
    if d.inputs["state_pool"].dtype not in ("float32", "bfloat16"):
        return f"fla stores a float32 or bfloat16 pool, not {d.inputs['state_pool'].dtype}"
    if axes.get("conv_width", 4) < 2:
        return f"the convolution needs a width of at least 2, the definition's is {axes.get('conv_width')}"
    return None


def _conv_silu_step(x, conv_weight, conv_state, slots, live):
    """The causal convolution + SiLU of rows x [B, C] against their slots' windows, in torch ops: float32 taps
    summed oldest first, the new input last, then y * sigmoid(y), rounded to bf16. Live rows' windows move by one
    in `conv_state` (in place); a padding row (slot <= 0) reads the null slot 0 and writes its window back unchanged."""
    W = conv_weight.shape[1]
    w = conv_weight.float().permute(0, 2, 1).reshape(-1, W)  # [C, W]: channel c = p * H * D + i of projection p
    s = slots.clamp(min=0)
    window = conv_state[s]  # [B, C, W - 1], oldest first
    y = window[:, :, 0].float() * w[:, 0]
    for j in range(1, W - 1):
        y = y + window[:, :, j].float() * w[:, j]
    y = y + x.float() * w[:, W - 1]
    moved = torch.cat([window[:, :, 1:], x[:, :, None].to(conv_state.dtype)], dim=2)
    conv_state[s] = torch.where(live[:, None, None], moved, window)
    return (y * torch.sigmoid(y)).to(torch.bfloat16)


def _fla_norm_runs(t: torch.Tensor) -> bool:
    """Whether fla's autotuned norm kernel can run on `t` (Triton on a GPU; not under the CPU interpreter)."""
    return t.is_cuda


def _gated_rms_norm(o, gate, weight, eps):
    """o, gate [B, H, D] bf16 -> o / sqrt(mean(o^2) + eps) * weight * sigmoid(gate) per head, in float32, bf16 out."""
    if _fla_norm_runs(o):
        from fla.modules.norm.fused_norm_gate import rms_norm_gated

        return rms_norm_gated(o, gate, weight, None, activation="sigmoid", eps=eps)
    of = o.float()
    y = of * torch.rsqrt((of * of).mean(-1, keepdim=True) + eps) * weight.float() * torch.sigmoid(gate.float())
    return y.to(torch.bfloat16)


def _fused_decode(d: Definition, opts):
    """Convolution + SiLU (torch), fla's in-place pool step, gated RMSNorm (fla on a GPU); see the module docstring.
    Returns (o, conv_state, state_pool), both pools updated in place."""
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    H, D = d.const_axes["num_heads"], d.const_axes["head_dim_k"]
    eps = float(reference_constant(d, "NORM_EPS", NORM_EPS_DEFAULT))

    def run(x, conv_weight, conv_state, g_raw, A_log, dt_bias, b, state_pool, state_indices, output_gate,
            norm_weight, scale=None):
        B = x.shape[0]
        scale = D ** -0.5 if scale is None else float(scale)
        live = state_indices > 0
        perm = torch.argsort((~live).to(torch.int32), stable=True)  # live rows first, in batch order
        live_p, slots = live[perm], state_indices[perm]
        mixed = _conv_silu_step(x[perm], conv_weight, conv_state, slots, live_p)  # [B, 3 * H * D] bf16
        # fla indexes q, k, v as contiguous [1, B, H, D]
        q, k, v = (t.contiguous() for t in mixed.reshape(1, B, 3, H, D).unbind(2))
        cu_seqlens = torch.nn.functional.pad(torch.cumsum(live_p.to(torch.int32), 0, dtype=torch.int32), (1, 0))
        o = torch.zeros((1, B, H, D), dtype=torch.bfloat16, device=x.device)  # padding rows' o stays zero
        fused_recurrent_kda_fwd(
            q=q, k=k, v=v, g=g_raw[perm][None], beta=b[perm][None], A_log=A_log, dt_bias=dt_bias.reshape(-1),
            scale=scale, initial_state=state_pool, inplace_final_state=True, cu_seqlens=cu_seqlens,
            ssm_state_indices=slots, out=o, use_qk_l2norm_in_kernel=opts["use_qk_l2norm_in_kernel"],
            use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=opts["use_beta_sigmoid_in_kernel"],
            allow_neg_eigval=opts["allow_neg_eigval"], lower_bound=opts["lower_bound"],
            state_v_first=opts["state_v_first"])
        y = _gated_rms_norm(o[0], output_gate[perm], norm_weight, eps)
        y = torch.where(live_p[:, None, None], y, torch.zeros((), dtype=y.dtype, device=y.device))
        out = torch.empty_like(y)
        out[perm] = y
        return out, conv_state, state_pool

    return run
