"""Where a run's time goes (run_profile.RunProfile, profile.json), the cost-weighted ETA and the console line
that names a slow workload."""

import json
from pathlib import Path

import pytest

from kda_trace import run_profile
from kda_trace.cli import main
from kda_trace.run_profile import Eta, RunProfile, category_of, estimate_seconds, family_of

DS = str(Path(__file__).parent / "fixtures" / "ds")


@pytest.mark.parametrize("name, family", [
    ("kda_bwd_fused_h96_d128_v_last_safe_gate", "kda_bwd_fused"),
    ("kda_decode_h8_d128_k_last", "kda_decode"),
    ("kda_fwd_qk16_v32_d128_v_last", "kda_fwd"),
    ("kda_prefill_h12_d128_k_last_safe_gate_chunk_states", "kda_prefill"),
    ("toy_scan", "toy_scan"),
])
def test_family_of(name, family):
    assert family_of(name) == family


def test_phases_fall_into_categories_and_the_first_call_per_definition_is_apart():
    assert category_of("reference") == "reference"
    assert category_of("judge: compare B") == "judge"
    assert category_of("inputs: checksums") == "inputs"
    p = RunProfile()
    p.charge("cuda:0", "kda_decode_h8_d128_k_last", "triton", "run", 5.0)   # compiles
    p.charge("cuda:0", "kda_decode_h8_d128_k_last", "triton", "run", 0.5)
    p.charge("cuda:0", "kda_decode_h16_d128_k_last", "triton", "run", 4.0)  # another definition: compiles too
    p.charge("cuda:0", "kda_decode_h8_d128_k_last", None, "idle", 100.0)     # not work
    assert p.seconds[("kda_decode", "first call", "triton")] == 9.0
    assert p.seconds[("kda_decode", "calls", "triton")] == 0.5
    assert sum(p.totals().values()) == 9.5


def test_the_eta_weighs_by_cost_and_learns_the_scale():
    # one expensive workload among many cheap ones: by count it would be 1% of the run, by cost it is half
    estimates = [100.0] + [1.0] * 100
    eta = Eta(sum(estimates), startup_s=0.0, prior_s=1.0)
    assert eta.remaining() == pytest.approx(200.0, rel=0.01)
    for i, e in enumerate(estimates[1:51]):
        eta.begin(i, e)
        eta.finish(i, e, 2 * e)  # everything takes twice its estimate
    # 150 estimated seconds left, at the learnt scale of about 2
    assert 2 * 150 * 0.9 < eta.remaining() < 2 * 150 * 1.1
    eta.begin("big", 100.0)
    assert eta.remaining() <= 2 * 150  # an evaluation in flight counts what it has spent


def test_the_eta_counts_the_start_up_until_the_first_evaluation_ends_and_splits_over_workers():
    eta = Eta(100.0, startup_s=30.0, workers=2)
    assert eta.remaining() == pytest.approx(80.0, abs=1.0)
    eta.begin(0, 10.0)
    eta.finish(0, 10.0, 10.0)
    assert eta.remaining() == pytest.approx(45.0, abs=1.0)


def test_the_precompile_pass_joins_the_start_up_allowance():
    eta = Eta(0.0, startup_s=30.0, workers=3)
    before = eta.remaining()
    eta.precompile(calls=560, processes=14, max_s=300.0, call_s=1.5)  # 60 s of compiling in 14 processes
    assert eta.remaining() == pytest.approx(before + 60.0, abs=1.0)
    eta.begin(0, 1.0)
    eta.finish(0, 1.0, 1.0)
    assert eta.remaining() == 0.0  # the allowance ends with the first evaluation
    one_process = Eta(0.0, startup_s=0.0)
    one_process.precompile(calls=542, processes=1, max_s=300.0)
    assert one_process.remaining() == pytest.approx(300.0, abs=1.0)  # the pass stops at its limit


def test_a_bigger_workload_is_estimated_to_cost_more():
    small = estimate_seconds(1e6, gpu=True, solutions=1)
    big = estimate_seconds(1e10, gpu=True, solutions=1)
    assert big > 10 * small
    assert estimate_seconds(1e6, True, 1, first=True, backward=True) > estimate_seconds(1e6, True, 1, first=True) > small
    # a second solution repeats its own part, not the reference's
    assert estimate_seconds(1e10, True, 1) < estimate_seconds(1e10, True, 2) < 2 * estimate_seconds(1e10, True, 1)
    # a workload that takes the GPU alone keeps the other workers waiting: it costs the run more worker-seconds
    assert estimate_seconds(3e9, True, 1, alone=True) > estimate_seconds(3e9, True, 1)
    assert estimate_seconds(3e9, False, 1, alone=True) == estimate_seconds(3e9, False, 1)  # no turns on the CPU


def test_a_run_writes_its_profile_and_names_a_slow_workload(tmp_path, monkeypatch, capsys):
    import kda_trace.runner as runner

    monkeypatch.setattr(runner, "SLOW_EVALUATION_S", 0.0)  # every workload counts as slow
    out = tmp_path / "out"
    assert main(["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--out", str(out),
                 "--solution", "reference"]) == 0
    err = capsys.readouterr().err
    assert "still evaluating toy_scan / " in err
    assert "wall time" in err and "profile.json" in err
    profile = json.loads((out / "profile.json").read_text())
    assert profile["categories"] == list(run_profile.CATEGORIES)
    spent = {row["category"] for row in profile["phases"] if row["seconds"] > 0}
    assert {"start-up", "inputs", "reference", "first call", "calls", "judge"} <= spent
    assert all(row["family"] in ("-", "toy_scan") for row in profile["phases"])
    assert len(profile["evaluations"]) >= 1 and all(e["seconds"] > 0 for e in profile["evaluations"])
    for e in profile["evaluations"]:  # each evaluation's own seconds per category, within its wall time
        assert {"reference", "calls"} <= set(e["categories"]) <= set(run_profile.CATEGORIES)
        assert sum(e["categories"].values()) <= e["seconds"] * 1.05 + 0.05
    assert sum(row["seconds"] for row in profile["phases"]) <= profile["wall_s"] * 1.05


def test_two_devices_given_the_largest_first_finish_within_15_percent_of_each_other():
    from kda_trace.run_profile import simulate_queue, spread_by_cost

    # the main job's shape on a GPU: families of many small workloads, each ending with a few large ones
    record = Path(__file__).parents[2] / "benchmarks/results/2026-11-29-h200/runner-main-job-240-of-587.json"
    costs = [e["seconds"] for e in json.loads(record.read_text())["evaluations"]]
    as_listed = simulate_queue(costs, 2)
    spread = simulate_queue(spread_by_cost(costs, costs), 2)
    assert max(spread) / min(spread) <= 1.15
    assert max(spread) <= max(as_listed)
    assert sorted(spread_by_cost(["a", "b", "c"], [1.0, 3.0, 1.0])) == ["a", "b", "c"]
    assert spread_by_cost(["a", "b", "c"], [1.0, 3.0, 1.0]) == ["b", "a", "c"]  # ties in the dataset's order


def test_the_eta_is_checked_against_the_real_remaining_time():
    from kda_trace.run_profile import eta_accuracy

    # a run of 300 s: right at 60 s, twice too long at 120 s, ignored before the first minute and in the last 30 s
    profile = {"wall_s": 300.0, "eta": [[10.0, 900.0], [60.0, 240.0], [120.0, 360.0], [280.0, 100.0]]}
    low, high, n = eta_accuracy(profile)
    assert (low, high, n) == (1.0, 2.0, 2)
    assert eta_accuracy({"wall_s": 50.0, "eta": [[10.0, 40.0]]}) is None


def test_tasks_that_take_the_gpu_alone_go_first_largest_first():
    from kda_trace.run_profile import spread_by_cost

    # "c" and "d" cannot share the GPU: they follow each other at the start, then the others largest first
    order = spread_by_cost(["a", "b", "c", "d", "e"], [5.0, 1.0, 2.0, 3.0, 4.0], [False, False, True, True, False])
    assert order == ["d", "c", "a", "e", "b"]


def test_each_solutions_first_use_is_reported_apart():
    profile = RunProfile()
    assert profile.first_use_line() == ""
    profile.charge("precompile", "kda_decode_h32_d128_k_last", "fla", "precompile", 300.0)
    profile.charge("w0", "kda_decode_h32_d128_k_last", "fla", "run", 40.0)  # its first call there: autotuning
    profile.charge("w0", "kda_decode_h32_d128_k_last", "fla", "run", 1.0)  # a later call
    profile.charge("precompile", "kda_decode_h32_d128_k_last", "triton", "precompile", 12.0)
    profile.charge("w0", "kda_decode_h32_d128_k_last", None, "reference", 2.0)
    profile.charge("w1", "kda_gate_h32_d128", "mine", "run", 3.0)  # no precompile pass (the CPU)
    line = profile.first_use_line()
    assert line == ("first use (compiling, autotuning): fla 5 min 00 s of precompile calls over the pass's processes "
                    "and 40 s of first calls; mine 3 s of first calls; triton 12 s of precompile calls over the pass's "
                    "processes and 0 s of first calls")


def test_first_use_in_wall_time_from_the_pass_order():
    """With the pass's per-solution ends, each solution's share of its wall time (from the previous one's end) and
    the run's wall time less each one's first use (that share and its first calls, which have the GPU alone)."""
    from kda_trace.run_profile import first_use_line, pass_shares

    assert pass_shares({"fla": 435.0, "triton": 69.0}) == {"triton": 69.0, "fla": 366.0}
    profile = RunProfile()
    profile.charge("precompile", "kda_decode_h32_d128_k_last", "fla", "precompile", 3000.0)
    profile.charge("precompile", "kda_decode_h32_d128_k_last", "triton", "precompile", 900.0)
    profile.charge("w0", "kda_decode_h32_d128_k_last", "fla", "run", 178.0)
    profile.charge("w0", "kda_decode_h32_d128_k_last", "triton", "run", 10.0)
    profile.precompiled(435.0, {"triton": 69.0, "fla": 435.0})
    line = profile.first_use_line(1800.0)
    assert line == ("first use (compiling, autotuning): fla 6 min 06 s of the precompile pass's wall time (50 min 00 s "
                    "of calls over its processes) and 2 min 58 s of first calls; triton 1 min 09 s of the precompile "
                    "pass's wall time (15 min 00 s of calls over its processes) and 10 s of first calls\n"
                    "the run's wall time less each one's first use: less fla's, 20 min 56 s; less triton's, "
                    "28 min 41 s")
    saved = json.loads(json.dumps(profile.to_json(1800.0, 3, "cuda")))  # as profile.json holds it
    assert first_use_line(saved, saved["wall_s"]) == line
