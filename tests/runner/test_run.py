"""`kda-trace run` / `report` end to end on the tiny fixture dataset, in worker processes, on the CPU."""

import json
from pathlib import Path

import pytest

from kda_trace.cli import main

HERE = Path(__file__).parent
DS = str(HERE / "fixtures" / "ds")
BAD = str(HERE / "bad_solutions.py")
# Each `kda-trace run` here starts a worker and a process per solution (about 3 s each on the CPU). The fast tier keeps
# the verdicts of the bad solutions (bad_run); the other runs are in the slow tier.

EXPECTED = {
    "good": "PASSED",
    "raises": "RUNTIME_ERROR",
    "segfault": "RUNTIME_ERROR",
    "exits": "RUNTIME_ERROR",
    "hangs": "TIMEOUT",
    "wrong_shape": "INCORRECT_SHAPE",
    "wrong_dtype": "INCORRECT_DTYPE",
    "returns_nan": "INCORRECT_NUMERICAL",
    "off_by_1e2": "INCORRECT_NUMERICAL",
    "mutates_input": "INPUT_MUTATED",
    "touches_other_slots": "INCORRECT_NUMERICAL",
    "caches_first": "INCORRECT_NUMERICAL",
}


def run(*args):
    return main(["run", "--dataset", DS, "--workers", "1", *args])


def records(out: Path, definition: str):
    path = out / "traces" / "toy" / f"{definition}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_solution(recs):
    return {r["solution"].split("::")[-1]: r for r in recs}


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad")
    argv = ["--definition", "toy_scan", "--out", str(out), "--timeout", "2", "--solution", "reference"]
    for name in EXPECTED:
        argv += ["--solution", f"{BAD}::{name}"]
    code = run(*argv)
    return code, out


def test_every_bad_solution_gets_its_status_and_the_good_one_passes(bad_run):
    code, out = bad_run
    assert code == 1
    got = by_solution(records(out, "toy_scan"))
    assert {k: got[k]["evaluation"]["status"] for k in EXPECTED} == EXPECTED
    assert got["reference"]["evaluation"]["status"] == "PASSED"
    assert len(got) == len(EXPECTED) + 1  # one smoke workload, one record per solution


def test_failure_messages_say_what_happened(bad_run):
    got = by_solution(records(bad_run[1], "toy_scan"))
    log = {k: v["evaluation"]["log"] for k, v in got.items()}
    assert "deliberate failure" in log["raises"]
    assert "SIGSEGV" in log["segfault"] and "exit code 7" in log["exits"]
    assert "timed out after 2 s" in log["hangs"]
    assert "shape [2, 5, 8], expected [2, 6, 8]" in log["wrong_shape"]
    assert "torch.float64" in log["wrong_dtype"]
    assert "1 NaN" in log["returns_nan"]
    assert "['x']" in log["mutates_input"]
    assert "wrong on the second one" in log["caches_first"] and "timing loop" in log["caches_first"]
    slots = got["touches_other_slots"]["evaluation"]["correctness"]["outputs"]["new_state_pool"]
    assert slots["bit_identical_violations"] == 8 and not slots["passed"]


def test_passing_record_is_complete(bad_run):
    rec = by_solution(records(bad_run[1], "toy_scan"))["good"]
    ev = rec["evaluation"]
    y = ev["correctness"]["outputs"]["y"]
    for key in ("max_abs_error", "mean_abs_error", "max_rel_error", "mean_rel_error", "rms_rel_error", "cosine",
                "mse", "matched_ratio", "nan_count", "inf_count", "tolerance", "worst", "error_by_position"):
        assert key in y
    assert ev["correctness"]["outputs"]["new_state_pool"]["bit_identical_violations"] == 0
    assert ev["correctness"]["extra"]["second_input_set"]["passed"] is True
    perf = ev["performance"]
    assert perf["mode"] == "cpu_wall" and perf["repetitions"] >= 1
    assert perf["min_ms"] <= perf["latency_ms"] <= perf["max_ms"]
    assert perf["reference_latency_ms"] > 0 and perf["tflops"] > 0 and perf["tbps"] > 0
    env = ev["environment"]
    assert env["seed"] == 20261122 and "torch" in env["libs"] and "python" in env["libs"]


def test_reports_are_written(bad_run):
    out = bad_run[1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["totals"]["passed"] == 2 and summary["totals"]["failed"] == len(EXPECTED) - 1
    assert {f["solution"].split("::")[-1] for f in summary["failures"]} == set(EXPECTED) - {"good"}
    html = (out / "report.html").read_text()
    assert "<svg" in html and "toy_scan" in html and "<script" not in html
    assert "| toy_scan |" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_invalid_and_refused_references(tmp_path):
    code = run("--definition", "toy_nan", "--definition", "toy_unsafe", "--solution", "reference",
               "--out", str(tmp_path))
    assert code == 1
    nan = records(tmp_path, "toy_nan")[0]["evaluation"]
    assert nan["status"] == "INVALID_REFERENCE" and "1 NaN" in nan["log"]
    unsafe = records(tmp_path, "toy_unsafe")[0]["evaluation"]
    assert unsafe["status"] == "INVALID_REFERENCE"
    assert "import of 'os' is not allowed" in unsafe["log"] and "--trust-code" in unsafe["log"]
    # trusted, the same reference runs (and passes against itself)
    assert run("--definition", "toy_unsafe", "--solution", "reference", "--trust-code", "--out", str(tmp_path)) == 0
    assert records(tmp_path, "toy_unsafe")[-1]["evaluation"]["status"] == "PASSED"


@pytest.mark.slow
def test_tolerance_override_and_unsupported_pairs(tmp_path):
    code = run("--definition", "toy_scan", "--definition", "toy_packed", "--solution", f"{BAD}::off_by_1e2",
               "--tolerance", "y=atol:0.02,max_rms_rel_error:0.1,min_cosine:0.99", "--out", str(tmp_path))
    # off_by_1e2 passes toy_scan under the override; on toy_packed it fails (a different signature)
    scan = records(tmp_path, "toy_scan")[0]["evaluation"]
    assert scan["status"] == "PASSED"
    assert scan["correctness"]["outputs"]["y"]["tolerance"]["atol"] == 0.02
    assert records(tmp_path, "toy_packed")[0]["evaluation"]["status"] == "RUNTIME_ERROR"
    assert code == 1
    # the built-in triton solution has no kernel for toy definitions: listed as skipped, not dropped
    assert run("--definition", "toy_packed", "--solution", "triton", "--out", str(tmp_path / "t")) == 0
    rec = records(tmp_path / "t", "toy_packed")[0]["evaluation"]
    assert rec["status"] == "UNSUPPORTED" and rec["log"]
    assert json.loads((tmp_path / "t" / "summary.json").read_text())["skipped"][0]["solution"] == "triton"


@pytest.mark.slow
def test_packed_coordinates_and_solution_json(tmp_path):
    source = ("import torch\n\ndef run(x, cu_seqlens, scale, y):\n"
              "    for n in range(cu_seqlens.shape[0] - 1):\n"
              "        h = torch.zeros_like(x[0])\n"
              "        for t in range(int(cu_seqlens[n]), int(cu_seqlens[n + 1])):\n"
              "            h = 0.9 * h + scale * x[t]\n"
              "            y[t] = h\n")
    spec = {"name": "dps_scan", "definition": "toy_packed", "author": "tests",
            "spec": {"language": "python", "entry_point": "main.py::run", "destination_passing_style": True},
            "sources": [{"path": "main.py", "content": source}]}
    sol = tmp_path / "dps_scan.json"
    sol.write_text(json.dumps(spec))
    out = tmp_path / "out"
    code = run("--definition", "toy_packed", "--definition", "toy_scan", "--solution", str(sol),
               "--solution", f"{BAD}::packed_one_bad_token", "--out", str(out))
    assert code == 1
    got = by_solution(records(out, "toy_packed"))
    assert got["dps_scan"]["evaluation"]["status"] == "PASSED"
    bad = got["packed_one_bad_token"]["evaluation"]
    assert bad["status"] == "INCORRECT_NUMERICAL"
    assert bad["correctness"]["outputs"]["y"]["worst"][0]["where"] == "token 5 of sequence 1, dim 2"
    # the JSON solution is for toy_packed only: toy_scan lists it as unsupported
    assert by_solution(records(out, "toy_scan"))["dps_scan"]["evaluation"]["status"] == "UNSUPPORTED"


@pytest.mark.slow
def test_shards_partition_and_merge_and_resume(tmp_path):
    dirs = [tmp_path / "s0", tmp_path / "s1"]
    for i, d in enumerate(dirs):
        assert run("--definition", "toy_scan", "--size", "all", "--solution", f"{BAD}::good",
                   "--shard", f"{i}/2", "--out", str(d)) == 0
    uuids = [[r["workload"]["uuid"] for r in records(d, "toy_scan")] if (d / "traces").exists() else [] for d in dirs]
    assert sorted(uuids[0] + uuids[1]) == ["scan-long", "scan-mid", "scan-small"]  # stress only with --size stress
    assert not set(uuids[0]) & set(uuids[1])
    merged = tmp_path / "merged"
    assert main(["report", str(dirs[0]), str(dirs[1]), "--out", str(merged)]) == 0
    assert json.loads((merged / "summary.json").read_text())["totals"]["passed"] == 3

    # resume: nothing finished runs again; a torn last line is evaluated again
    full = tmp_path / "full"
    assert run("--definition", "toy_scan", "--size", "all", "--solution", f"{BAD}::good", "--out", str(full)) == 0
    path = full / "traces" / "toy" / "toy_scan.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40] + "\n")
    assert run("--definition", "toy_scan", "--size", "all", "--solution", f"{BAD}::good", "--resume",
               "--out", str(full)) == 0
    after = path.read_text().splitlines()
    assert len(after) == len(lines) + 1
    assert json.loads(after[-1])["workload"]["uuid"] == json.loads(lines[-1])["workload"]["uuid"]
    assert main(["report", str(full)]) == 0  # the torn line is reported as a problem, not a crash


@pytest.mark.slow
def test_rerun_replaces_the_records_of_a_status(tmp_path):
    """--resume --rerun RUNTIME_ERROR evaluates again what failed for the machine's sake (an out-of-memory), and
    the new record replaces the old one in the trace file; the other records are kept as they were."""
    out = tmp_path / "run"
    args = ("--definition", "toy_scan", "--size", "all", "--solution", f"{BAD}::good", "--out", str(out))
    assert run(*args) == 0
    path = out / "traces" / "toy" / "toy_scan.jsonl"
    lines = path.read_text().splitlines()
    failed = json.loads(lines[0])
    failed["evaluation"]["status"] = "RUNTIME_ERROR"
    failed["evaluation"]["log"] = "OutOfMemoryError (planted)"
    path.write_text("\n".join([json.dumps(failed)] + lines[1:]) + "\n")
    assert run(*args, "--resume") == 0  # plain --resume evaluates nothing and keeps the failure
    assert len(path.read_text().splitlines()) == len(lines)
    assert json.loads((out / "summary.json").read_text())["totals"]["passed"] == len(lines) - 1
    assert run(*args, "--resume", "--rerun", "RUNTIME_ERROR") == 0
    after = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(after) == len(lines)
    assert [r["evaluation"]["status"] for r in after] == ["PASSED"] * len(lines)
    assert after[:-1] == [json.loads(line) for line in lines[1:]]  # untouched, in their order
    assert after[-1]["workload"]["uuid"] == failed["workload"]["uuid"]
    assert json.loads((out / "summary.json").read_text())["totals"]["passed"] == len(lines)
    assert run(*args, "--rerun", "RUNTIME_ERROR") == 2  # without --resume
    assert run(*args, "--resume", "--rerun", "OOM") == 2  # not a status


def test_usage_errors_exit_2(tmp_path):
    assert run("--solution", "no_such_solution", "--out", str(tmp_path)) == 2
    assert run("--solution", "missing.py::run", "--out", str(tmp_path)) == 2
    assert run("--definition", "no_such_definition", "--out", str(tmp_path)) == 2
    assert run("--tolerance", "y=atol", "--out", str(tmp_path)) == 2
    with pytest.raises(SystemExit) as e:
        run("--shard", "2/2")
    assert e.value.code == 2
    assert main(["report", str(tmp_path / "nothing")]) == 2


def test_exit_descriptions_name_the_signal_and_the_likely_cause():
    import signal

    from kda_trace.runner import describe_exit

    assert describe_exit(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL (out of host memory?)"
    assert describe_exit(3) == "exit code 3" and describe_exit(None) == "no exit code"


def test_size_selects_workloads():
    from types import SimpleNamespace

    from kda_trace.runner import select_workloads

    wls = [SimpleNamespace(uuid=u, tags=t) for u, t in (("a", ["smoke"]), ("b", []), ("c", ["stress"]))]
    picked = {size: [w.uuid for w in select_workloads(wls, size)] for size in ("smoke", "all", "stress", "stress-only")}
    assert picked == {"smoke": ["a"], "all": ["a", "b"], "stress": ["a", "b", "c"], "stress-only": ["c"]}


def test_out_of_gpu_memory_is_named_as_such():
    """A CUDA out-of-memory error reads as a machine limit, with the option that may help, before its long text."""
    import torch

    from kda_trace.runner import OUT_OF_GPU_MEMORY_HINT, _short_traceback

    try:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.12 GiB.")
    except torch.OutOfMemoryError as e:
        text = _short_traceback(e)
    assert text.startswith(OUT_OF_GPU_MEMORY_HINT) and "--inputs-on-host" in text and "8.12 GiB" in text
    try:
        raise ValueError("bad shape")
    except ValueError as e:
        assert _short_traceback(e).startswith("ValueError: bad shape")


@pytest.mark.slow
def test_the_phase_log_says_where_an_evaluation_spends_its_time(tmp_path, monkeypatch):
    from kda_trace.runner import PHASE_LOG_ENV

    log = tmp_path / "phases.tsv"
    monkeypatch.setenv(PHASE_LOG_ENV, str(log))
    assert run("--definition", "toy_scan", "--out", str(tmp_path / "out"), "--solution", "reference") == 0
    rows = [line.split("\t") for line in log.read_text().splitlines()]
    assert all(len(r) == 6 for r in rows)
    phases = [(r[3], r[4]) for r in rows]
    for step in [("-", "inputs"), ("-", "reference"), ("-", "inputs: checksums"), ("reference", "run"),
                 ("reference", "save"), ("reference", "judge: compare"), ("reference", "timing"),
                 ("reference", "judge: compare B")]:
        assert step in phases
    times = [float(r[0]) for r in rows]
    assert times == sorted(times)
    assert all(float(r[5]) > 0 for r in rows)  # the machine's available memory in GB, from /proc/meminfo


def test_a_precompile_pass_changes_no_verdict_and_survives_hangs_and_crashes(tmp_path, capfd):
    """--precompile N calls every workload once in N processes per solution before anything is timed
    (kda_trace/precompile.py; on by default on a GPU). Its outcome never reaches a record: a solution that hangs
    there is cut off after --timeout and one that crashes loses only its precompile process."""
    names = ["good", "hangs", "segfault", "caches_first"]
    out = tmp_path / "out"
    argv = ["--definition", "toy_scan", "--out", str(out), "--timeout", "2", "--precompile", "2"]
    for name in names:
        argv += ["--solution", f"{BAD}::{name}"]
    assert run(*argv) == 1
    said = capfd.readouterr().err
    calls = len(records(out, "toy_scan")) // len(names)  # workloads
    assert f"precompile: {2 * calls} calls in" in said and f"{2 * calls} failed or cut off" in said, said
    got = by_solution(records(out, "toy_scan"))
    assert {k: got[k]["evaluation"]["status"] for k in names} == {k: EXPECTED[k] for k in names}
    profile = json.loads((out / "profile.json").read_text())
    assert "precompile" in profile["categories"]
    assert sum(p["seconds"] for p in profile["phases"] if p["category"] == "precompile") > 0


def test_workers_quiet_only_the_known_harmless_warning():
    """A worker ignores torch's warning about cuBLAS finding no current CUDA context (autograd's device thread in a
    backward reference; torch then makes the primary context current), and nothing else."""
    import warnings

    from kda_trace.runner import CUBLAS_CONTEXT_WARNING, quiet_harmless_warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_harmless_warnings()
        warnings.warn(CUBLAS_CONTEXT_WARNING + "! Attempting to set the primary context...", UserWarning, stacklevel=1)
        warnings.warn("Attempting to run something else", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["Attempting to run something else"]
