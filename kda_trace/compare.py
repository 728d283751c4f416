"""Metrics and verdicts, one output tensor at a time.

Every output is measured in full (even when it passes): absolute / relative / RMS-relative error, cosine,
MSE, the fraction of elements within `atol + rtol * |ref|`, NaN/Inf counts, the five worst elements with
coordinates named by axis, and the error along the sequence axis. An output passes when every bound of
its tolerance holds (definition's tolerance, then command-line overrides, then DEFAULT_TOLERANCES for
its dtype) and it holds no NaN/Inf where the reference is finite.

Relative error is |ref - out| / max(|ref|, atol), so that references near zero do not explode it. For the
same reason, when the whole reference is below the absolute floor (RMS(ref) < atol) the two scale-free
bounds (RMS-relative error, cosine) would judge rounding noise: there they are replaced by RMS(ref - out)
<= atol. (Example: a log decay of -2e-9 against -0.0 from a kernel whose softplus underflows: both give
exp(g) = 1 in fp32.)
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import torch

from .schema import Definition, OutputMetrics, Tolerance, WorstElement

# The ONE table of default tolerances, by output dtype. A definition's per-output tolerance overrides
# field by field; `--tolerance` overrides both. bf16 bounds follow fla's own check (RMS-relative < 5e-3).
DEFAULT_TOLERANCES: Dict[str, Tolerance] = {
    "bfloat16": Tolerance(atol=1e-2, rtol=2e-2, min_matched_ratio=0.999, max_rms_rel_error=5e-3, min_cosine=0.9999),
    "float16": Tolerance(atol=2e-3, rtol=5e-3, min_matched_ratio=0.999, max_rms_rel_error=2e-3, min_cosine=0.99999),
    "float32": Tolerance(atol=1e-3, rtol=1e-3, min_matched_ratio=0.999, max_rms_rel_error=1e-3, min_cosine=0.99999),
    "float64": Tolerance(atol=1e-6, rtol=1e-6, min_matched_ratio=1.0, max_rms_rel_error=1e-6, min_cosine=0.999999),
}
# Integer and bool outputs must match exactly.
EXACT = Tolerance(atol=0.0, rtol=0.0, min_matched_ratio=1.0, max_rms_rel_error=0.0, min_cosine=None)

TOLERANCE_FIELDS = ("atol", "rtol", "min_matched_ratio", "max_rms_rel_error", "min_cosine")

# How coordinates along an axis read in messages ("token 417 of sequence 3, head 12, dim 77").
AXIS_WORDS = {
    "batch_size": "batch", "seq_len": "token", "total_seq_len": "token", "num_tokens": "token",
    "num_heads": "head", "num_v_heads": "head", "head_dim_k": "dim", "head_dim_v": "dim",
    "pool_size": "slot", "num_seqs": "sequence", "len_cu_seqlens": "offset",
}
TOP_WORST = 5
MAX_POSITION_BUCKETS = 64
METRIC_CHUNK_ELEMENTS = 1 << 24


class ToleranceSyntaxError(ValueError):
    """A malformed `--tolerance` argument."""


def parse_tolerance_override(text: str) -> tuple[str, Tolerance]:
    """Parse `OUTPUT=atol:1e-2,rtol:1e-3,...` (OUTPUT `*` = every output) into (output, Tolerance).

    Fields: atol, rtol, min_matched_ratio, max_rms_rel_error, min_cosine; `none` switches a bound off.
    """
    name, sep, body = text.partition("=")
    if not sep or not name.strip() or not body.strip():
        raise ToleranceSyntaxError(f"--tolerance {text!r}: expected OUTPUT=field:value[,field:value...]")
    values: Dict[str, Optional[float]] = {}
    for part in body.split(","):
        key, sep, value = part.partition(":")
        key = key.strip()
        if not sep or key not in TOLERANCE_FIELDS:
            raise ToleranceSyntaxError(f"--tolerance {text!r}: {part!r} is not field:value with field one of "
                                       f"{', '.join(TOLERANCE_FIELDS)}")
        try:
            values[key] = None if value.strip().lower() == "none" else float(value)
        except ValueError:
            raise ToleranceSyntaxError(f"--tolerance {text!r}: {value!r} is not a number") from None
    try:
        return name.strip(), Tolerance(**values)
    except ValueError as e:
        raise ToleranceSyntaxError(f"--tolerance {text!r}: {e}") from None


def tolerance_for(definition: Definition, output: str, overrides: Dict[str, Tolerance] | None = None) -> Tolerance:
    """The tolerance of one output: dtype default, then the definition's fields, then overrides."""
    spec = definition.outputs[output]
    dtype = spec.dtype.value
    merged = (DEFAULT_TOLERANCES.get(dtype) or EXACT).model_dump()
    layers: List[Optional[Tolerance]] = [spec.tolerance]
    for key in ("*", output):
        if overrides and key in overrides:
            layers.append(overrides[key])
    for layer in layers:
        if layer is None:
            continue
        for k, v in layer.model_dump(exclude_unset=True).items():
            merged[k] = v
    return Tolerance(**merged)


def packed_axis(definition: Definition) -> Optional[tuple[str, str]]:
    """(token axis, cu_seqlens input name) when the definition packs sequences with cu_seqlens."""
    for name, spec in definition.inputs.items():
        gen = spec.generator
        if gen is not None and gen.kind == "cu_seqlens":
            axis = gen.total_axis
            if axis is None:  # fall back to a recurrent output's sequence axis
                axis = next((o.sequence_axis for o in definition.outputs.values() if o.sequence_axis), None)
            if axis:
                return axis, name
    return None


def describe_index(index: Sequence[int], axes: Sequence[str], packed: Optional[tuple[str, Any]] = None) -> str:
    """Coordinates named by axis; a packed token axis is named as token t of sequence s."""
    parts = []
    both_dims = "head_dim_k" in axes and "head_dim_v" in axes  # a state: say which dim is which
    for i, axis in zip(index, axes):
        if packed is not None and axis == packed[0] and packed[1] is not None:
            cu = packed[1]
            seq = max(0, int(torch.searchsorted(cu, torch.tensor([i]), right=True).item()) - 1)
            parts.append(f"token {i - int(cu[seq])} of sequence {seq}")
        elif both_dims and axis in ("head_dim_k", "head_dim_v"):
            parts.append(f"{axis[-1]}-dim {i}")
        else:
            parts.append(f"{AXIS_WORDS.get(axis, axis)} {i}")
    return ", ".join(parts)


def compare_output(definition: Definition, output: str, ref: torch.Tensor, out: torch.Tensor,
                   tolerance: Tolerance, cu_seqlens: Optional[torch.Tensor] = None) -> OutputMetrics:
    """Full metrics and the verdict for one output. `ref` and `out` must have the same shape.

    The metrics are accumulated in float64 over slices of at most METRIC_CHUNK_ELEMENTS elements, so the
    temporaries stay small whatever the output's size (a stress workload's output has over 2^31 elements)."""
    spec = definition.outputs[output]
    axes = list(spec.shape or [])
    atol = tolerance.atol or 0.0
    rtol = tolerance.rtol or 0.0
    n = ref.numel()
    if n == 0:
        return OutputMetrics(passed=True, max_abs_error=0.0, mean_abs_error=0.0, max_rel_error=0.0, mean_rel_error=0.0,
                             rms_rel_error=0.0, cosine=1.0, mse=0.0, matched_ratio=1.0, nan_count=0, inf_count=0,
                             tolerance=tolerance)
    packed = None
    pk = packed_axis(definition)
    if pk is not None and pk[0] in axes and cu_seqlens is not None:
        packed = (pk[0], cu_seqlens.detach().to("cpu", torch.int64))
    positions = _position_buckets(ref.shape, axes, spec.sequence_axis, packed, ref.device)

    rf, of = ref.detach().reshape(-1), out.detach().reshape(-1)
    sums = torch.zeros(9, dtype=torch.float64, device=ref.device)
    # sum err, sum rel, sum err^2, sum ref^2, sum out^2, sum ref*out, within, NaN in out, Inf in out
    err_max = torch.zeros((), dtype=torch.float64, device=ref.device)
    rel_max = torch.zeros((), dtype=torch.float64, device=ref.device)
    err_nan = torch.zeros((), dtype=torch.bool, device=ref.device)
    worst_values, worst_flat = [], []
    if positions is not None:
        bucket_of_index, n_buckets = positions
        e_sum = torch.zeros(n_buckets, dtype=torch.float64, device=ref.device)
        r_sum = torch.zeros(n_buckets, dtype=torch.float64, device=ref.device)
    for start in range(0, n, METRIC_CHUNK_ELEMENTS):
        stop = min(start + METRIC_CHUNK_ELEMENTS, n)
        r = rf[start:stop].to(torch.float64)
        o = of[start:stop].to(torch.float64)
        err = (r - o).abs()
        r_abs = r.abs()
        rel = err / r_abs.clamp_min(max(atol, 1e-30))
        within = err <= atol + rtol * r_abs  # NaN compares False: a NaN element is never within
        sums += torch.stack([err.sum(), rel.sum(), err.pow(2).sum(), r.pow(2).sum(), o.pow(2).sum(), (r * o).sum(),
                             within.sum(), torch.isnan(o).sum(), torch.isinf(o).sum()]).to(torch.float64)
        err_max = torch.maximum(err_max, torch.nan_to_num(err, nan=0.0, posinf=float("inf")).max())
        rel_max = torch.maximum(rel_max, torch.nan_to_num(rel, nan=0.0, posinf=float("inf")).max())
        err_nan |= torch.isnan(err).any()
        values, flat = torch.topk(torch.nan_to_num(err, nan=float("inf"), posinf=float("inf")), min(TOP_WORST, stop - start))
        worst_values.append(values)
        worst_flat.append(flat + start)
        if positions is not None:
            b = bucket_of_index(torch.arange(start, stop, device=ref.device))
            e_sum.index_add_(0, b, err.pow(2))
            r_sum.index_add_(0, b, r.pow(2))
    (sum_err, sum_rel, sum_e2, sum_r2, sum_o2, dot, within_count, nan_count, inf_count) = sums.tolist()
    nan_count, inf_count = int(nan_count), int(inf_count)
    any_nan = bool(err_nan)

    rms_ref = (sum_r2 / n) ** 0.5
    rms_err = (sum_e2 / n) ** 0.5
    rms_rel = rms_err / rms_ref if rms_ref > 0 else (0.0 if rms_err == 0 else float("inf"))
    denom = sum_r2 ** 0.5 * sum_o2 ** 0.5
    cosine = dot / denom if denom > 0 else (1.0 if sum_r2 == sum_o2 else 0.0)
    matched = within_count / n

    reasons = []
    if nan_count or inf_count:
        reasons.append(f"{nan_count} NaN and {inf_count} Inf elements")
    if tolerance.min_matched_ratio is not None and not matched >= tolerance.min_matched_ratio:
        reasons.append(f"{matched:.6f} of elements within atol {atol:g} + rtol {rtol:g}*|ref| "
                       f"(needs {tolerance.min_matched_ratio:g})")
    relative_bounds = tolerance.max_rms_rel_error is not None or tolerance.min_cosine is not None
    if relative_bounds and rms_ref < atol:
        if not rms_err <= atol:
            reasons.append(f"RMS error {rms_err:.3e} > atol {atol:g} (the reference's RMS {rms_ref:.3e} is below "
                           f"atol, so RMS-relative error and cosine are not used)")
    else:
        if tolerance.max_rms_rel_error is not None and not rms_rel <= tolerance.max_rms_rel_error:
            reasons.append(f"RMS-relative error {rms_rel:.3e} > {tolerance.max_rms_rel_error:g}")
        if tolerance.min_cosine is not None and not cosine >= tolerance.min_cosine:
            reasons.append(f"cosine {cosine:.7f} < {tolerance.min_cosine:g}")

    by_position = None
    if positions is not None:
        by_position = [float(x) for x in (e_sum / r_sum.clamp_min(torch.finfo(torch.float64).tiny)).sqrt().tolist()]
    return OutputMetrics(
        passed=not reasons,
        reason="; ".join(reasons),
        max_abs_error=float("nan") if any_nan else float(err_max),
        mean_abs_error=sum_err / n,
        max_rel_error=float("nan") if any_nan else float(rel_max),
        mean_rel_error=sum_rel / n,
        rms_rel_error=rms_rel,
        cosine=cosine,
        mse=sum_e2 / n,
        matched_ratio=matched,
        nan_count=nan_count,
        inf_count=inf_count,
        tolerance=tolerance,
        worst=worst_elements(rf, of, torch.cat(worst_values), torch.cat(worst_flat), ref.shape, axes, packed),
        error_by_position=by_position,
    )


def worst_elements(rf: torch.Tensor, of: torch.Tensor, values: torch.Tensor, flat: torch.Tensor, shape,
                   axes: List[str], packed: Optional[tuple]) -> List[WorstElement]:
    """The TOP_WORST elements with the largest absolute error (NaN counts as the worst), from the candidates
    (`values` at flat indices `flat` of the flattened reference `rf` and output `of`)."""
    # largest error first, ties (NaN and Inf both rank as Inf) by position, so the slicing never shows
    ranked = sorted(zip(values.tolist(), flat.tolist()), key=lambda vf: (-vf[0], vf[1]))[:TOP_WORST]
    out = []
    for v, f in ranked:
        if v == 0:
            break
        index = [int(i) for i in torch.unravel_index(torch.tensor(f), tuple(shape))] if len(shape) else []
        r, o = float(rf[f]), float(of[f])
        out.append(WorstElement(index=index, where=describe_index(index, axes, packed), reference=r, value=o,
                                abs_error=abs(r - o)))
    return out


def _position_buckets(shape, axes: List[str], sequence_axis: Optional[str], packed: Optional[tuple], device):
    """(flat element index -> bucket of positions along the sequence axis, number of buckets) for the
    error-by-position curve (at most MAX_POSITION_BUCKETS buckets); None when the output has no sequence axis.

    On a packed token axis the position is the token's index within its own sequence, so the curve shows
    error growth along sequences rather than along the packed buffer."""
    if not sequence_axis or sequence_axis not in axes:
        return None
    dim = axes.index(sequence_axis)
    n = shape[dim]
    if n == 0:
        return None
    if packed is not None and packed[0] == sequence_axis:
        cu = packed[1]
        tokens = torch.arange(n)
        seq = (torch.searchsorted(cu, tokens, right=True) - 1).clamp_min(0)
        positions = tokens - cu[seq]
    else:
        positions = torch.arange(n)
    length = int(positions.max()) + 1
    n_buckets = min(MAX_POSITION_BUCKETS, length)
    bucket = ((positions * n_buckets) // length).to(device)
    inner = 1
    for size in shape[dim + 1:]:
        inner *= size
    return (lambda index: bucket[(index // inner) % n]), n_buckets


def nonfinite_counts(t: torch.Tensor) -> tuple[int, int]:
    """(NaN count, Inf count) of a tensor (0, 0 for integer tensors)."""
    if not t.is_floating_point():
        return 0, 0
    return int(torch.isnan(t).sum()), int(torch.isinf(t).sum())


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise bit equality (NaN payloads included) of two same-shape, same-dtype tensors."""
    if a.dtype.is_floating_point and a.element_size() in (2, 4, 8):
        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return a.contiguous().view(view) == b.contiguous().view(view)
    return a == b


def inplace_violations(original: torch.Tensor, ref_out: torch.Tensor, out: torch.Tensor) -> int:
    """Elements of slots that the reference left bit-identical to the in-place input but the solution changed.

    A slot is an index along the first axis (a state-pool entry): the reference leaves it alone when every
    element of it is bit-identical to the input. Slots the reference writes are judged by the numerical
    tolerance instead: one of their elements may keep its bits in the reference by rounding (a decay of
    ~1 and a tiny update) and change by an ulp in a correct solution.
    """
    keep = bits_equal(ref_out, original)
    if keep.dim() > 1:
        slot_kept = keep.flatten(1).all(dim=1)
        keep = slot_kept.view(-1, *([1] * (keep.dim() - 1))).expand_as(keep)
    changed = ~bits_equal(out, original)
    return int((keep & changed).sum())
