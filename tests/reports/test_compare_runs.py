"""`kda-trace compare RUN_A RUN_B`: verdict changes, speed ratios against a noise threshold, exit status."""

import json

import pytest

from kda_trace.cli import main
from kda_trace.compare_runs import compare_runs
from kda_trace.report import load_traces

from .synthetic import record, write_run

D = "kda_prefill_x"


@pytest.fixture
def runs(tmp_path):
    a = write_run(tmp_path / "a", [
        record(D, "w-small", "triton", ms=1.0),
        record(D, "w-mid", "triton", ms=2.0),
        record(D, "w-big", "triton", ms=4.0),
        record(D, "w-small", "fla", ms=1.0),
        record(D, "w-mid", "fla", "INCORRECT_NUMERICAL"),
        record(D, "w-big", "fla", ms=8.0),
    ])
    return a, tmp_path


def verdicts(cmp):
    return {(r.workload, r.solution): r.verdict for r in cmp.rows}


def test_noise_faster_slower_fixed_and_new_failure(runs):
    a, tmp = runs
    b = write_run(tmp / "b", [
        record(D, "w-small", "triton", ms=1.05),    # within 10%: same
        record(D, "w-mid", "triton", ms=2.5),       # 1.25x: slower
        record(D, "w-big", "triton", ms=3.0),       # 0.75x: faster
        record(D, "w-small", "fla", "RUNTIME_ERROR"),  # passed before: new failure
        record(D, "w-mid", "fla", ms=3.0),          # failed before: fixed
        # w-big / fla missing in B
        record(D, "w-big", "mine", "TIMEOUT"),      # a new pair that fails: a new failure too
    ])
    cmp = compare_runs(load_traces([a]), load_traces([b]), threshold=0.1)
    assert verdicts(cmp) == {
        ("w-small", "triton"): "same", ("w-mid", "triton"): "slower", ("w-big", "triton"): "faster",
        ("w-small", "fla"): "new failure", ("w-mid", "fla"): "fixed", ("w-big", "fla"): "missing",
        ("w-big", "mine"): "new failure"}
    row = next(r for r in cmp.rows if (r.workload, r.solution) == ("w-mid", "triton"))
    assert row.ratio == pytest.approx(1.25) and row.size == "512 tokens · 1 sequence"
    assert {r.verdict for r in cmp.regressions} == {"slower", "new failure"}
    assert cmp.geomean_ratios()[(D, "triton")] == pytest.approx((1.05 * 1.25 * 0.75) ** (1 / 3))
    # a wider threshold absorbs the 1.25x slowdown (and the 0.75x speedup)
    wide = verdicts(compare_runs(load_traces([a]), load_traces([b]), threshold=0.5))
    assert wide[("w-mid", "triton")] == "same" and wide[("w-big", "triton")] == "same"


def test_exit_status_gates_on_regressions(runs, tmp_path, capsys):
    a, tmp = runs
    same = write_run(tmp / "same", [record(D, u, s, ms=m) for u, s, m in
                                    (("w-small", "triton", 1.02), ("w-mid", "triton", 1.9), ("w-big", "triton", 4.1),
                                     ("w-small", "fla", 1.0), ("w-big", "fla", 8.0))])
    # w-mid / fla passes now (fixed); nothing got worse
    assert main(["compare", str(a), str(same)]) == 0
    slow = write_run(tmp / "slow", [record(D, "w-big", "triton", ms=4.9)])
    out_json = tmp_path / "cmp.json"
    assert main(["compare", str(a), str(slow), "--json", str(out_json)]) == 1
    printed = capsys.readouterr().out
    assert "slower" in printed and "4,096 tokens · 2 sequences" in printed and "1.225" in printed
    rows = json.loads(out_json.read_text())["rows"]
    assert {(r["workload"], r["solution"], r["verdict"]) for r in rows} >= {("w-big", "triton", "slower")}
    assert main(["compare", str(a), str(slow), "--threshold", "0.3"]) == 0


def test_different_devices_are_said(runs):
    a, tmp = runs
    b = write_run(tmp / "b", [record(D, "w-small", "triton", ms=1.0, hardware="NVIDIA H200")])
    cmp = compare_runs(load_traces([a]), load_traces([b]))
    assert any("different devices" in w for w in cmp.warnings)


def test_usage_errors(runs, tmp_path, capsys):
    a, _ = runs
    assert main(["compare", str(a), str(tmp_path / "nowhere")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(a), str(tmp_path / "empty")]) == 2
    assert "no trace records" in capsys.readouterr().err
    assert main(["compare", str(a), str(a), "--threshold", "-1"]) == 2


def test_a_pair_that_became_skipped_or_supported(tmp_path):
    a = write_run(tmp_path / "a", [record(D, "w-small", "triton", ms=1.0), record(D, "w-mid", "triton", "UNSUPPORTED"),
                                   record(D, "w-big", "triton", "UNSUPPORTED")])
    b = write_run(tmp_path / "b", [record(D, "w-small", "triton", "UNSUPPORTED"), record(D, "w-mid", "triton", ms=1.0),
                                   record(D, "w-big", "triton", "UNSUPPORTED")])
    cmp = compare_runs(load_traces([a]), load_traces([b]))
    assert verdicts(cmp) == {("w-small", "triton"): "missing", ("w-mid", "triton"): "new",
                             ("w-big", "triton"): "same"}
    assert not cmp.regressions
