"""Red-team attempts on the runner's verdict (tests/runner/redteam.py, issue 15), on the CPU.

An attempt that still gets PASSED, or a time it does not deserve, is an open hole: its test asserts what the
runner should do and is marked xfail(strict=True), so the suite stays green today and turns red (XPASS) the
day the hole is closed, when the mark must go. Attempts that are caught have plain tests.

Three `kda-trace run`s on toy_scan: the timing attempts (with an honest control, each honest computation made
DELAY_S long so a fake time is plain), then each sabotage attempt with an honest solution evaluated before it.
"""

import json
from pathlib import Path

import pytest

from kda_trace.cli import main

HERE = Path(__file__).parent
DS = str(HERE / "fixtures" / "ds")
REDTEAM = str(HERE / "redteam.py")
DELAY_S = 0.01
MAX_REPS = "20"  # more than DIGESTED_REPS + 1, as on a GPU (10..200 repetitions)

TIME_HOLES = {
    "rewrites_times": "the timing loop's `times` list is reachable from the solution's frame and rewritten",
    "self_removing_timer_patch": "kda_trace.timing._perf_counter is replaced during a repetition and put back "
                                 "before the fingerprint is compared (only after the whole loop)",
    "skips_undrawn_reps": "the set of digested repetitions (`drawn`) is readable in the timing loop's frame",
    "clears_digests": "the digests list is emptied in the solution's process and the judge reads 'no digest' "
                      "as 'a single timed repetition'",
    "zero_digested_reps": "timing.DIGESTED_REPS is a module constant the fingerprint does not cover (only "
                          "callables and modules): set to 0, no repetition is digested",
    "precomputes_all_reps": "every repetition's inputs are reachable (restore.rep_inputs, final_inputs): all "
                            "answers are computed in one repetition and the median hides it",
}


def statuses(out: Path):
    got = {}
    for path in (out / "traces").glob("*/*.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            got.setdefault(r["solution"].split("::")[-1], []).append(r["evaluation"])
    return got


@pytest.fixture(scope="module")
def timing_run(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("CHEATS_HONEST_DELAY_S", str(DELAY_S))
    out = tmp_path_factory.mktemp("redteam_timing")
    argv = ["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--max-reps", MAX_REPS,
            "--out", str(out)]
    for name in (*TIME_HOLES, "forked_writer", "mutates_input_and_hides_it", "honest"):
        argv += ["--solution", f"{REDTEAM}::{name}"]
    try:
        main(argv)
    finally:
        mp.undo()
    return statuses(out)


def test_the_honest_control_passes_with_its_real_time(timing_run):
    ev = timing_run["honest"][0]
    assert ev["status"] == "PASSED", ev["log"]
    assert ev["performance"]["latency_ms"] >= 0.9 * DELAY_S * 1e3


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"open hole: {why}"))
    for name, why in TIME_HOLES.items()])
def test_a_forged_time_is_never_reported(timing_run, name):
    """Each of these does (or is charged for) less than the honest work per call, or rewrites what was
    measured: it must not be PASSED with a median below the honest cost of a call."""
    ev = timing_run[name][0]
    assert ev["status"] != "PASSED" or ev["performance"]["latency_ms"] >= 0.9 * DELAY_S * 1e3, \
        (ev["status"], ev["performance"]["latency_ms"])


def test_outputs_written_later_by_a_forked_child_are_not_judged(timing_run):
    """The outputs are copied the moment the call returns: what a forked child writes later is never seen."""
    ev = timing_run["forked_writer"][0]
    assert ev["status"] in ("INCORRECT_NUMERICAL", "REWARD_HACK"), ev["log"]


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="open hole: INPUT_MUTATED is decided in the "
                   "solution's process, against that process's own copy of the inputs, which the solution can change too")
def test_an_input_written_by_the_solution_is_seen(timing_run):
    ev = timing_run["mutates_input_and_hides_it"][0]
    assert ev["status"] == "INPUT_MUTATED", (ev["status"], ev["log"][:200])


def _sabotage_run(out: Path, name: str, env: dict, extra=()):
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        mp.setenv(k, v)
    argv = ["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--size", "all", "--out",
            str(out), *extra, "--solution", f"{REDTEAM}::honest", "--solution", f"{REDTEAM}::{name}"]
    try:
        main(argv)
    finally:
        mp.undo()
    return statuses(out)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="open hole: a solution's process may signal its sibling solution "
                                       "processes (same user, same parent): a SIGSTOPped honest solution times out")
def test_a_solution_cannot_stop_another_solutions_process(tmp_path):
    got = _sabotage_run(tmp_path, "stops_other_solutions", {"REDTEAM_SIGNALS": "1"}, ("--timeout", "10"))
    assert [ev["status"] for ev in got["honest"]] == ["PASSED"] * 3, [ev["log"][:200] for ev in got["honest"]]


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="open hole: the solutions' work directories are in the shared temp "
                                       "directory, writable by every solution: another solution's outputs "
                                       "cannot be written")
def test_a_solution_cannot_break_another_solutions_work_directory(tmp_path):
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    got = _sabotage_run(tmp_path / "out", "plants_dirs_in_other_workdirs",
                        {"REDTEAM_WORKDIRS": "1", "TMPDIR": str(private_tmp)})
    assert [ev["status"] for ev in got["honest"]] == ["PASSED"] * 3, [ev["log"][:200] for ev in got["honest"]]


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="open hole: a solution's process that does not "
                   "answer a request before posting a phase is blamed on the reference (the worker's last phase): "
                   "the whole workload becomes INVALID_REFERENCE")
def test_a_solution_that_stops_itself_is_blamed_alone(tmp_path):
    mp = pytest.MonkeyPatch()
    mp.setenv("REDTEAM_SIGNALS", "1")
    argv = ["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--size", "all", "--timeout", "10",
            "--out", str(tmp_path), "--solution", f"{REDTEAM}::stops_itself_between_workloads",
            "--solution", f"{REDTEAM}::honest"]
    try:
        main(argv)
    finally:
        mp.undo()
    got = statuses(tmp_path)
    assert [ev["status"] for ev in got["honest"]] == ["PASSED"] * 3, [ev["log"][:200] for ev in got["honest"]]
    assert all(ev["status"] != "INVALID_REFERENCE" for ev in got["stops_itself_between_workloads"])
