"""Red-team attempts on the runner's verdict (tests/runner/redteam.py), on the CPU.

Each test asserts what the runner must do with one attempt. All of them were open holes when the red team wrote
them (strict xfails); the fixes that followed closed them, and the marks went. A hole found later gets a
strict xfail again until it is closed.

Three `kda-trace run`s on toy_scan: the timing attempts (with an honest control, each honest computation made
DELAY_S long so a fake time is plain), then each sabotage attempt with an honest solution evaluated before it.
"""

from pathlib import Path

import pytest

from test_cheats import statuses  # records by solution name, from a run's trace files

from kda_trace.cli import main

HERE = Path(__file__).parent
DS = str(HERE / "fixtures" / "ds")
REDTEAM = str(HERE / "redteam.py")
DELAY_S = 0.01
MAX_REPS = "20"  # more than DIGESTED_REPS + 1, as on a GPU (10..100 repetitions)

TIME_HOLES = {  # attempt -> what closed it
    "rewrites_times": "the times are a tuple bound in the loop's frame",
    "self_removing_timer_patch": "the loop reads its clock from a local bound before the loop: the swapped "
                                 "module clock is never called, so it never puts itself back, and the "
                                 "fingerprint sees it",
    "skips_undrawn_reps": "a repetition is drawn for a digest only after it returned: there is no `drawn` to read",
    "clears_digests": "the judge counts repetitions by the seeds it gave, and the host always digests one",
    "zero_digested_reps": "the fingerprint covers kda_trace's module constants",
    "precomputes_all_reps": "each repetition's seed is given by the judge just before it, once, in order",
}


# The timing attempts run in one `kda-trace run` of nine solutions (the slow tier); the fast tier has one sabotage run
# (the work directories) of two.
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


@pytest.mark.slow
def test_the_honest_control_passes_with_its_real_time(timing_run):
    ev = timing_run["honest"][0]
    assert ev["status"] == "PASSED", ev["log"]
    assert ev["performance"]["latency_ms"] >= 0.9 * DELAY_S * 1e3


@pytest.mark.parametrize("name", list(TIME_HOLES))
@pytest.mark.slow
def test_a_forged_time_is_never_reported(timing_run, name):
    """Each of these does (or is charged for) less than the honest work per call, or rewrites what was
    measured: it must not be PASSED with a median below the honest cost of a call."""
    ev = timing_run[name][0]
    assert ev["status"] != "PASSED" or ev["performance"]["latency_ms"] >= 0.9 * DELAY_S * 1e3, \
        (ev["status"], ev["performance"]["latency_ms"])


@pytest.mark.slow
def test_outputs_written_later_by_a_forked_child_are_not_judged(timing_run):
    """The outputs are copied the moment the call returns: what a forked child writes later is never seen."""
    ev = timing_run["forked_writer"][0]
    assert ev["status"] in ("INCORRECT_NUMERICAL", "REWARD_HACK"), ev["log"]


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_solution_cannot_stop_another_solutions_process(tmp_path):
    got = _sabotage_run(tmp_path, "stops_other_solutions", {"REDTEAM_SIGNALS": "1"}, ("--timeout", "10"))
    assert [ev["status"] for ev in got["honest"]] == ["PASSED"] * 3, [ev["log"][:200] for ev in got["honest"]]


def test_a_solution_cannot_break_another_solutions_work_directory(tmp_path):
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    got = _sabotage_run(tmp_path / "out", "plants_dirs_in_other_workdirs",
                        {"REDTEAM_WORKDIRS": "1", "TMPDIR": str(private_tmp)})
    assert [ev["status"] for ev in got["honest"]] == ["PASSED"] * 3, [ev["log"][:200] for ev in got["honest"]]


@pytest.mark.slow
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
