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

import math
from typing import Any, Dict, List, Optional, Sequence

import torch

from .schema import Definition, OutputMetrics, Tolerance, WorstElement, WorstRow

# The ONE table of default tolerances, by output dtype. A definition's per-output tolerance overrides
# field by field; `--tolerance` overrides both. bf16 bounds follow fla's own check (RMS-relative < 5e-3).
# The per-row bound (Tolerance.max_row_rel_error) by output dtype. A wrong, zeroed, stale or neighbour's row
# has a row error of about 1 (1.4 for an uncorrelated row); honest kernels stay at or below 3e-2 on the GPU
# on the calibrated definitions (benchmarks/RESULTS.md, "Per-row bound"). Aggregate bounds cannot
# do this job: one row of 65536 tokens x 32 heads is 5e-7 of an output.
ROW_BOUNDS = {"bfloat16": 0.1, "float16": 0.1, "float32": 0.1, "float64": 1e-4}
DEFAULT_TOLERANCES: Dict[str, Tolerance] = {
    "bfloat16": Tolerance(atol=1e-2, rtol=2e-2, min_matched_ratio=0.999, max_rms_rel_error=5e-3, min_cosine=0.9999,
                          max_row_rel_error=ROW_BOUNDS["bfloat16"]),
    "float16": Tolerance(atol=2e-3, rtol=5e-3, min_matched_ratio=0.999, max_rms_rel_error=2e-3, min_cosine=0.99999,
                         max_row_rel_error=ROW_BOUNDS["float16"]),
    "float32": Tolerance(atol=1e-3, rtol=1e-3, min_matched_ratio=0.999, max_rms_rel_error=1e-3, min_cosine=0.99999,
                         max_row_rel_error=ROW_BOUNDS["float32"]),
    "float64": Tolerance(atol=1e-6, rtol=1e-6, min_matched_ratio=1.0, max_rms_rel_error=1e-6, min_cosine=0.999999,
                         max_row_rel_error=ROW_BOUNDS["float64"]),
}
# Integer and bool outputs must match exactly.
EXACT = Tolerance(atol=0.0, rtol=0.0, min_matched_ratio=1.0, max_rms_rel_error=0.0, min_cosine=None)

TOLERANCE_FIELDS = ("atol", "rtol", "min_matched_ratio", "max_rms_rel_error", "min_cosine", "max_row_rel_error",
                    "row_atol")

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

    Fields: TOLERANCE_FIELDS; `none` switches a bound off.
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


def cu_seqlens_input(definition: Definition) -> Optional[str]:
    """The name of the input generated as cu_seqlens (packed sequences), or None."""
    return next((n for n, s in definition.inputs.items() if s.generator is not None and s.generator.kind == "cu_seqlens"),
                None)


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


def row_layout(shape: Sequence[int], axes: Sequence[str]) -> tuple[int, List[int], List[str]]:
    """(elements per row, leading shape, leading axis names) of an output under the per-row bound.

    A row is the output's trailing `head_dim*` axes (one (token, head) of o, one (slot, head) of a state pool),
    or its last axis when it has none (one token's values over all heads of beta); a scalar is one row."""
    shape, axes = list(shape), list(axes)
    if not shape:
        return 1, [], []
    lead = len(shape)
    while lead > 0 and lead <= len(axes) and axes[lead - 1].startswith("head_dim"):
        lead -= 1
    if lead == len(shape):
        lead -= 1
    size = 1
    for n in shape[lead:]:
        size *= n
    return size, shape[:lead], axes[:lead]


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

    row_size, lead_shape, lead_axes = row_layout(ref.shape, axes)
    row_atol = tolerance.row_atol if tolerance.row_atol is not None else atol
    row_max = torch.full((), -1.0, dtype=torch.float64, device=ref.device)
    row_arg = torch.zeros((), dtype=torch.int64, device=ref.device)
    rows_over = torch.zeros((), dtype=torch.int64, device=ref.device)
    row_bound = tolerance.max_row_rel_error

    rf, of = ref.detach().reshape(-1), out.detach().reshape(-1)
    sums = torch.zeros(10, dtype=torch.float64, device=ref.device)
    # sum err, sum rel, sum err^2, sum ref^2, sum out^2, sum ref*out, within, NaN in out, Inf in out, non-finite ref
    err_max = torch.zeros((), dtype=torch.float64, device=ref.device)
    rel_max = torch.zeros((), dtype=torch.float64, device=ref.device)
    err_nan = torch.zeros((), dtype=torch.bool, device=ref.device)
    worst_values, worst_flat = [], []
    unit = row_size  # slices hold whole rows, and whole runs of one position when there is a curve to make
    if positions is not None:
        bucket, inner, n_buckets = positions
        unit = math.lcm(row_size, inner)
        e_sum = torch.zeros(n_buckets, dtype=torch.float64, device=ref.device)
        r_sum = torch.zeros(n_buckets, dtype=torch.float64, device=ref.device)
    step = max(unit, METRIC_CHUNK_ELEMENTS // unit * unit)
    for start in range(0, n, step):
        stop = min(start + step, n)
        r = rf[start:stop].to(torch.float64)
        o = of[start:stop].to(torch.float64)
        err = (r - o).abs()
        r_abs = r.abs()
        rel = err / r_abs.clamp_min(max(atol, 1e-30))
        within = err <= atol + rtol * r_abs  # NaN compares False: a NaN element is never within
        sums += torch.stack([err.sum(), rel.sum(), err.pow(2).sum(), r.pow(2).sum(), o.pow(2).sum(), (r * o).sum(),
                             within.sum(), torch.isnan(o).sum(), torch.isinf(o).sum(),
                             (~torch.isfinite(r)).sum()]).to(torch.float64)
        err_max = torch.maximum(err_max, torch.nan_to_num(err, nan=0.0, posinf=float("inf")).max())
        rel_max = torch.maximum(rel_max, torch.nan_to_num(rel, nan=0.0, posinf=float("inf")).max())
        err_nan |= torch.isnan(err).any()
        values, flat = torch.topk(torch.nan_to_num(err, nan=float("inf"), posinf=float("inf")), min(TOP_WORST, stop - start))
        worst_values.append(values)
        worst_flat.append(flat + start)
        row_err = _row_errors(err, r, row_size, row_atol)
        local = torch.argmax(row_err)
        better = row_err[local] > row_max  # kept on the device: no host sync per slice
        row_max = torch.where(better, row_err[local], row_max)
        row_arg = torch.where(better, local + start // row_size, row_arg)
        if row_bound is not None:
            rows_over += (row_err > row_bound).sum()
        if positions is not None:  # summed per run of `inner` elements first: few atomic adds into few buckets
            runs = torch.arange(start // inner, stop // inner, device=ref.device)
            b = bucket[runs % bucket.numel()]
            e_sum.index_add_(0, b, err.pow(2).view(-1, inner).sum(1))
            r_sum.index_add_(0, b, r.pow(2).view(-1, inner).sum(1))
    (sum_err, sum_rel, sum_e2, sum_r2, sum_o2, dot, within_count, nan_count, inf_count, ref_nonfinite) = sums.tolist()
    nan_count, inf_count = int(nan_count), int(inf_count)
    any_nan = bool(err_nan)

    rms_ref = (sum_r2 / n) ** 0.5
    rms_err = (sum_e2 / n) ** 0.5
    rms_rel = rms_err / rms_ref if rms_ref > 0 else (0.0 if rms_err == 0 else float("inf"))
    denom = sum_r2 ** 0.5 * sum_o2 ** 0.5
    cosine = dot / denom if denom > 0 else (1.0 if sum_r2 == sum_o2 else 0.0)
    matched = within_count / n

    reasons = []
    if ref_nonfinite:  # the runner calls this INVALID_REFERENCE first; here too nothing may match an Inf
        reasons.append(f"the reference has {int(ref_nonfinite)} NaN/Inf elements: no output matches them")
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

    row_max_value = float(row_max)
    worst_row = None
    if row_max_value > 0:
        lead_index = unravel(int(row_arg), lead_shape)
        r_row = rf[int(row_arg) * row_size:(int(row_arg) + 1) * row_size].to(torch.float64)
        o_row = of[int(row_arg) * row_size:(int(row_arg) + 1) * row_size].to(torch.float64)
        worst_row = WorstRow(index=lead_index, where=describe_index(lead_index, lead_axes, packed) or "the whole output",
                             row_rel_error=row_max_value, reference_rms=float(r_row.pow(2).mean().sqrt()),
                             error_rms=float((r_row - o_row).pow(2).mean().sqrt()))
    if row_bound is not None and not row_max_value <= row_bound:
        reasons.append(f"{int(rows_over)} row(s) of {row_size} elements over the per-row bound {row_bound:g}, the worst "
                       f"at {worst_row.where if worst_row else '?'}: RMS error / max(RMS reference, {row_atol:g}) = "
                       f"{row_max_value:.3e}")

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
        max_row_rel_error=row_max_value,
        rows_over_bound=int(rows_over) if row_bound is not None else None,
        worst_row=worst_row,
    )


def unravel(flat: int, shape: Sequence[int]) -> List[int]:
    """The index of element `flat` of a contiguous tensor of `shape` (torch.unravel_index's first call imports
    sympy: 3 s of a worker's start on the H200 machine)."""
    index = []
    for size in reversed(list(shape)):
        flat, i = divmod(flat, size)
        index.append(i)
    return index[::-1]


def _row_errors(err: torch.Tensor, ref: torch.Tensor, row_size: int, row_atol: float) -> torch.Tensor:
    """Per-row RMS(error) / max(RMS(ref), row_atol) of a slice holding whole rows; NaN rows (a NaN in the
    output, or a non-finite reference) count as Inf."""
    e = err.pow(2).view(-1, row_size).mean(1).sqrt()
    r = ref.pow(2).view(-1, row_size).mean(1).sqrt()
    return torch.nan_to_num(e / r.clamp_min(max(row_atol, 1e-30)), nan=float("inf"))


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
        index = unravel(int(f), shape)
        r, o = float(rf[f]), float(of[f])
        out.append(WorstElement(index=index, where=describe_index(index, axes, packed), reference=r, value=o,
                                abs_error=abs(r - o)))
    return out


def _position_buckets(shape, axes: List[str], sequence_axis: Optional[str], packed: Optional[tuple], device):
    """(the bucket of every position along the sequence axis, the elements of one position in a row of the flat
    output (the run of flat indices that share a position), number of buckets) for the error-by-position curve (at
    most MAX_POSITION_BUCKETS buckets); None when the output has no sequence axis. Flat index i is at position
    (i // run) % positions.

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
    return bucket, inner, n_buckets


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
