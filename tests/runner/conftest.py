"""Tests of the defences that hold where solution processes have no sandbox (kda_trace/sandbox.py's
enter_sandbox): they run with it turned off, as on a machine that allows none, since in the sandbox the attempts
they judge fail before those defences are reached (tests/runner/test_sandbox.py judges them there)."""

import pytest

WITHOUT_SANDBOX = {
    "test_trace_files_written_by_a_solution_do_not_survive_the_run",
    "test_processes_a_solution_leaves_behind_are_killed_before_the_records_are_final",
    "test_a_dataset_rewritten_during_the_run_is_reported_and_fails_the_run",
    "test_stored_inputs_rewritten_during_a_run_are_refused",
}


@pytest.fixture(autouse=True)
def _no_sandbox_for_the_fallback_tests(request, monkeypatch):
    if request.node.originalname in WITHOUT_SANDBOX:
        monkeypatch.setenv("KDA_TRACE_SANDBOX", "off")
