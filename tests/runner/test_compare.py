"""Metrics, verdicts, tolerances and coordinates (compare.py), without worker processes."""

import json
import math
from pathlib import Path

import pytest
import torch

from kda_trace.compare import (
    DEFAULT_TOLERANCES,
    ToleranceSyntaxError,
    compare_output,
    describe_index,
    inplace_violations,
    parse_tolerance_override,
    tolerance_for,
)
from kda_trace.dataset import load_dataset

FIXTURES = Path(__file__).parent / "fixtures" / "ds"


@pytest.fixture(scope="module")
def ds():
    return load_dataset(FIXTURES)


def test_identical_output_passes_with_full_metrics(ds):
    d = ds.definitions["toy_scan"]
    ref = torch.randn(2, 6, 8)
    m = compare_output(d, "y", ref, ref.clone(), tolerance_for(d, "y"))
    assert m.passed and m.reason == ""
    assert m.max_abs_error == 0 and m.rms_rel_error == 0 and m.matched_ratio == 1.0
    assert m.cosine == pytest.approx(1.0) and m.nan_count == 0 and m.worst == []
    assert m.error_by_position is not None and len(m.error_by_position) == 6


def test_offset_fails_and_names_worst_elements(ds):
    d = ds.definitions["toy_scan"]
    ref = torch.randn(2, 6, 8)
    out = ref.clone()
    out[1, 4, 7] += 0.5
    m = compare_output(d, "y", ref, out, tolerance_for(d, "y"))
    assert not m.passed and "RMS-relative" in m.reason
    assert m.worst[0].index == [1, 4, 7]
    assert m.worst[0].where == "batch 1, token 4, dim 7"
    assert m.worst[0].abs_error == pytest.approx(0.5, rel=1e-6)
    assert m.error_by_position[4] > 0 and m.error_by_position[0] == 0


def test_nan_never_passes_even_with_loose_tolerance(ds):
    d = ds.definitions["toy_scan"]
    ref = torch.randn(2, 6, 8)
    out = ref.clone()
    out[0, 0, 0] = float("nan")
    loose = parse_tolerance_override("y=atol:1e9,rtol:1e9,min_matched_ratio:0,max_rms_rel_error:none,min_cosine:none")[1]
    m = compare_output(d, "y", ref, out, tolerance_for(d, "y", {"y": loose}))
    assert not m.passed and m.nan_count == 1
    assert m.worst[0].index == [0, 0, 0] and math.isnan(m.worst[0].value)


def test_packed_axis_is_named_by_sequence_and_token(ds):
    d = ds.definitions["toy_packed"]
    cu = torch.tensor([0, 3, 10, 12])
    assert describe_index([8, 2], ["total_seq_len", "dim"], ("total_seq_len", cu)) == "token 5 of sequence 1, dim 2"
    assert describe_index([3, 12, 77], ["total_seq_len", "num_v_heads", "head_dim_v"]) == "token 3, head 12, dim 77"
    state = ["pool_size", "num_v_heads", "head_dim_v", "head_dim_k"]
    assert describe_index([5, 1, 7, 9], state) == "slot 5, head 1, v-dim 7, k-dim 9"
    ref = torch.randn(12, 4)
    out = ref.clone()
    out[3, 0] += 1.0  # first token of sequence 1
    m = compare_output(d, "y", ref, out, tolerance_for(d, "y"), cu)
    assert m.worst[0].where == "token 0 of sequence 1, dim 0"
    # position is within the sequence: bucket 0 holds the error, later positions none
    assert m.error_by_position[0] > 0 and all(x == 0 for x in m.error_by_position[1:])


def test_tolerance_layers_and_syntax(ds):
    d = ds.definitions["toy_scan"]
    assert tolerance_for(d, "y") == DEFAULT_TOLERANCES["float32"]
    name, tol = parse_tolerance_override("y=atol:0.5,rtol:0")
    assert name == "y" and tol.atol == 0.5
    merged = tolerance_for(d, "y", {"y": tol, "*": parse_tolerance_override("*=min_cosine:0.5")[1]})
    assert merged.atol == 0.5 and merged.rtol == 0 and merged.min_cosine == 0.5
    assert merged.max_rms_rel_error == DEFAULT_TOLERANCES["float32"].max_rms_rel_error
    for bad in ("y", "y=", "y=atol", "y=speed:1", "y=atol:abc", "y=atol:-1"):
        with pytest.raises(ToleranceSyntaxError):
            parse_tolerance_override(bad)


def test_inplace_violations_count_changed_untouched_elements():
    pool = torch.randn(4, 3)
    ref = pool.clone()
    ref[1] += 1  # the reference writes slot 1 only
    out = ref.clone()
    assert inplace_violations(pool, ref, out) == 0
    # one ulp in a slot the reference left alone (adding 1e-7 vanished by rounding when |x| > ~1.7: flaky)
    out[2, 0] = torch.nextafter(out[2, 0], torch.tensor(10.0))
    assert inplace_violations(pool, ref, out) == 1


def test_inplace_written_slot_may_differ_by_rounding():
    pool = torch.randn(4, 3)
    ref = pool.clone()
    ref[1, :2] += 1  # the reference writes slot 1, but element [1, 2] keeps its bits (rounding)
    out = ref.clone()
    out[1, 2] = torch.nextafter(out[1, 2], torch.tensor(10.0))  # a solution one ulp away there
    assert inplace_violations(pool, ref, out) == 0


def test_reference_below_the_absolute_floor_is_judged_by_absolute_rms(ds):
    # the gate workload with g_raw ~ N(-25, 1): the reference log decay is ~-2e-9, a kernel whose softplus
    # underflows returns -0.0; RMS-relative error 1 and cosine 0 there would only measure rounding noise
    d = ds.definitions["toy_scan"]
    tight = parse_tolerance_override("y=atol:1e-5,rtol:1e-5,min_matched_ratio:1,max_rms_rel_error:1e-5,min_cosine:0.999999")[1]
    tol = tolerance_for(d, "y", {"y": tight})
    ref = -2.2e-9 * (1 + 0.1 * torch.rand(2, 6, 8))
    m = compare_output(d, "y", ref, torch.zeros_like(ref) * -1.0, tol)
    assert m.passed, m.reason
    assert m.rms_rel_error == pytest.approx(1.0) and m.cosine == 0.0  # still measured and reported
    # an error above the floor still fails, now named against atol
    m = compare_output(d, "y", ref, ref + 3e-5, tol)
    assert not m.passed and "RMS error" in m.reason and "below atol" in m.reason
    # a reference above the floor keeps the relative bounds: a 1% error on every element fails on RMS
    ref = torch.randn(2, 6, 8)
    m = compare_output(d, "y", ref, ref * 1.01, tol)
    assert not m.passed and "RMS-relative" in m.reason


@pytest.mark.parametrize("name, output", [("toy_scan", "y"), ("toy_packed", "y")])
def test_metrics_do_not_depend_on_the_chunk_size(ds, monkeypatch, name, output):
    """compare_output accumulates over slices (bounded memory for stress outputs): slicing an output into
    tiny chunks must give the metrics of one whole-tensor pass, NaN, Inf and worst elements included."""
    from kda_trace import compare

    d = ds.definitions[name]
    shape, cu = ((3, 10, 8), None) if name == "toy_scan" else ((13, 8), torch.tensor([0, 4, 5, 13], dtype=torch.int32))
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(shape, generator=gen)
    out = ref + 1e-3 * torch.randn(shape, generator=gen)
    out.view(-1)[[7, 50]] = torch.tensor([float("nan"), float("inf")])
    out.view(-1)[33] += 0.25
    tol = tolerance_for(d, output)
    whole = compare_output(d, output, ref, out, tol, cu)
    monkeypatch.setattr(compare, "METRIC_CHUNK_ELEMENTS", 7)
    sliced = compare_output(d, output, ref, out, tol, cu)
    a, b = whole.model_dump(), sliced.model_dump()
    for key in ("max_abs_error", "max_rel_error"):
        assert math.isnan(a.pop(key)) and math.isnan(b.pop(key))
    for key in ("mean_abs_error", "mean_rel_error", "rms_rel_error", "mse"):  # NaN or Inf in the sums
        assert not math.isfinite(a.pop(key)) and not math.isfinite(b.pop(key))
    for key in ("cosine",):
        x, y = a.pop(key), b.pop(key)
        assert x == y or (math.isnan(x) and math.isnan(y))
    assert a.pop("error_by_position") == pytest.approx(b.pop("error_by_position"), nan_ok=True)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN-aware equality (worst elements)
    assert whole.nan_count == 1 and whole.inf_count == 1 and not whole.passed
    assert [w.index for w in whole.worst][:2] in ([list(torch.unravel_index(torch.tensor(i), shape)) for i in (7, 50)],
                                                  [list(torch.unravel_index(torch.tensor(i), shape)) for i in (50, 7)])
    assert len(whole.worst) == 5 and whole.error_by_position is not None


def test_chunked_metrics_match_a_direct_computation(ds, monkeypatch):
    from kda_trace import compare

    d = ds.definitions["toy_scan"]
    gen = torch.Generator().manual_seed(1)
    ref = torch.randn(2, 6, 8, generator=gen, dtype=torch.float64)
    out = ref + 0.01 * torch.randn(2, 6, 8, generator=gen, dtype=torch.float64)
    monkeypatch.setattr(compare, "METRIC_CHUNK_ELEMENTS", 5)
    m = compare_output(d, "y", ref, out, tolerance_for(d, "y"))
    err = (ref - out).abs()
    assert m.max_abs_error == pytest.approx(float(err.max()), rel=1e-12)
    assert m.rms_rel_error == pytest.approx(float(err.pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()), rel=1e-12)
    assert m.cosine == pytest.approx(float(torch.nn.functional.cosine_similarity(ref.flatten(), out.flatten(), dim=0)),
                                     rel=1e-12)
    per_token = (err.pow(2).sum(dim=(0, 2)) / ref.pow(2).sum(dim=(0, 2))).sqrt()
    assert m.error_by_position == pytest.approx(per_token.tolist(), rel=1e-12)
    assert m.worst[0].abs_error == pytest.approx(float(err.max()), rel=1e-12)


def test_row_layout_takes_the_trailing_head_dim_axes_or_the_last_axis():
    from kda_trace.compare import row_layout

    assert row_layout([5, 3, 8], ["total_seq_len", "num_v_heads", "head_dim_v"]) == (8, [5, 3], ["total_seq_len", "num_v_heads"])
    assert row_layout([2, 3, 4, 6], ["num_seqs", "num_v_heads", "head_dim_v", "head_dim_k"])[:2] == (24, [2, 3])
    assert row_layout([2, 7, 3], ["batch_size", "seq_len", "num_v_heads"])[:2] == (3, [2, 7])
    assert row_layout([], []) == (1, [], [])


@pytest.mark.parametrize("tokens", [8192, 65536, pytest.param(1 << 20, marks=pytest.mark.slow)])
def test_one_wrong_row_fails_at_any_size_and_is_named(tokens):
    """A (token, head) row zeroed, or copied from its neighbour, among up to 1M tokens (the aggregate
    bounds alone pass both at these sizes)."""
    d = load_dataset(Path(__file__).parents[2]).definitions["kda_prefill_h8_d128_k_last"]
    torch.manual_seed(0)
    ref = (torch.randn(tokens, 1, 16) * 0.03).bfloat16()
    honest = (ref.float() * (1 + 2e-3 * torch.randn(tokens, 1, 16))).bfloat16()
    tol = tolerance_for(d, "o")
    m = compare_output(d, "o", ref, honest, tol)
    assert m.passed and m.max_row_rel_error < 0.01
    for defect in ("zeroed", "neighbour"):
        out = honest.clone()
        out[tokens - 3, 0] = 0 if defect == "zeroed" else out[tokens - 4, 0]
        m = compare_output(d, "o", ref, out, tol)
        assert not m.passed and m.rows_over_bound == 1
        assert m.worst_row.index == [tokens - 3, 0] and m.worst_row.where == f"token {tokens - 3}, head 0"
        assert "per-row bound" in m.reason and m.max_row_rel_error > 0.5


def test_every_per_row_bound_fails_a_wrong_row():
    """A zeroed, stale or neighbour's row scores 1.0 to 1.4: no output of the dataset may allow that (the widest
    bound, dg_raw through the safe gate, is 0.5; tools/build_kda_dataset.py says why)."""
    dataset = load_dataset(Path(__file__).parents[2])
    bounds = {(d.name, o): tolerance_for(d, o).max_row_rel_error for d in dataset.definitions.values() for o in d.outputs}
    assert bounds and all(b is not None and b <= 0.5 for b in bounds.values()), \
        {k: b for k, b in bounds.items() if b is None or b > 0.5}


def test_safe_gate_backward_still_fails_a_wrong_gate_gradient():
    """kda_bwd_fused_h96's looser gate bounds (dg_raw's per-row 0.5; dA_log and ddt_bias judged as sums, without
    the element-wise matched ratio) still fail one zeroed row of dg_raw, one zeroed head of ddt_bias, and one
    zeroed head of dA_log of typical size."""
    d = load_dataset(Path(__file__).parents[2]).definitions["kda_bwd_fused_h96_d128_v_last_safe_gate"]
    torch.manual_seed(0)
    dA_log = torch.randn(96) * 15
    typical = int((dA_log.abs() - dA_log.pow(2).mean().sqrt()).abs().argmin())  # |dA_log[h]| closest to the RMS
    cases = {"dg_raw": ((torch.randn(64, 96, 128) * 0.05).bfloat16(), (40, 7)),
             "ddt_bias": (torch.randn(96, 128), (12,)),
             "dA_log": (dA_log, (typical,))}
    for name, (ref, row) in cases.items():
        honest = (ref.float() * (1 + 2e-3 * torch.randn(ref.shape))).to(ref.dtype)
        tol = tolerance_for(d, name)
        assert compare_output(d, name, ref, honest, tol).passed, name
        wrong = honest.clone()
        wrong[row] = 0
        m = compare_output(d, name, ref, wrong, tol)
        assert not m.passed, name
    # a neighbour's dg_raw row (uncorrelated values) also fails the per-row bound of 0.5
    ref = cases["dg_raw"][0]
    wrong = ref.clone()
    wrong[40, 7] = ref[39, 7]
    m = compare_output(d, "dg_raw", ref, wrong, tolerance_for(d, "dg_raw"))
    assert not m.passed and "per-row bound" in m.reason


def test_rows_near_zero_use_the_absolute_floor(ds):
    d = ds.definitions["toy_scan"]
    ref = torch.randn(2, 6, 8)
    ref[1, 2] = 1e-9  # a row of (almost) zeros: relative error would explode
    out = ref.clone()
    out[1, 2] = 1e-5  # far below atol: not a wrong row
    m = compare_output(d, "y", ref, out, tolerance_for(d, "y"))
    assert m.passed and m.max_row_rel_error < 0.1


def test_an_inf_in_the_reference_is_never_matched(ds):
    d = ds.definitions["toy_scan"]
    ref = torch.randn(2, 6, 8)
    ref[0, 1, 2] = float("inf")
    for value in (float("inf"), 1e30):
        out = ref.clone()
        out[0, 1, 2] = value
        loose = parse_tolerance_override("y=atol:1e9,rtol:1e9,min_matched_ratio:0,max_rms_rel_error:none,"
                                         "min_cosine:none,max_row_rel_error:none")[1]
        m = compare_output(d, "y", ref, out, tolerance_for(d, "y", {"y": loose}))
        assert not m.passed and "reference has 1 NaN/Inf" in m.reason
