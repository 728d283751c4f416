"""Cheating solutions and planted one-row defects (tests/runner/cheats.py) never pass; honest ones still do.

CPU tier: the toy scan and a KDA prefill definition on its smoke workloads, in one `kda-trace run` each.
The GPU-only cheats (side stream, freed reference memory, illegal address) run in benchmarks/gpu_cheats.sh.
"""

import json
from pathlib import Path

import pytest
import torch

from kda_trace.cli import main

HERE = Path(__file__).parent
DS = str(HERE / "fixtures" / "ds")
CHEATS = str(HERE / "cheats.py")
BAD = str(HERE / "bad_solutions.py")
REPO = HERE.parent.parent

CPU_CHEATS = {
    "patches_timer": "REWARD_HACK",
    "patches_harness": "REWARD_HACK",
    "thread_fill": "REWARD_HACK",
    "returns_input_memory": "REWARD_HACK",
    "forged_pass": "REWARD_HACK",
    "gc_scan": "INCORRECT_NUMERICAL",
    "caller_frames": "INCORRECT_NUMERICAL",
    "empty_like": "INCORRECT_NUMERICAL",
    "timing_aware": "REWARD_HACK",
    "lazy_tensor": "REWARD_HACK",
    "lazy_when_timed": "REWARD_HACK",
    "wrong_unless_judged_whole": "INCORRECT_NUMERICAL",
    "asks_seeds_ahead": "REWARD_HACK",
}
ONE_OF = {"off_by_percent_when_timed": {"INCORRECT_NUMERICAL", "REWARD_HACK"}}
"""Fixtures whose status depends on the draw: a timed repetition 3% off differs from the untimed call's by more
than 5% (REWARD_HACK) in some random projections and not in others (INCORRECT_NUMERICAL). Never PASSED."""
ROW_DEFECTS = ("row_zeroed", "row_from_neighbour", "row_stale", "state_row_zeroed")
LOG_SAYS = {  # cheat -> what its log must say: each entry a tuple of alternatives, one of which is in the log
    "patches_timer": (("time.perf_counter",),),
    "patches_harness": (("compare_output",), ("allclose",)),
    "thread_fill": (("threads", "changed after the call returned"),),
    "returns_input_memory": (("shares memory with input 'x'",),),
    "forged_pass": (("did not answer the runner's request",),),
    "timing_aware": (("differ from an untimed call's on the same inputs",),),
    "lazy_tensor": (("_Lazy, not a plain torch.Tensor",),),
    "wrong_unless_judged_whole": (("wrong on the inputs of timed repetition",),),
    "asks_seeds_ahead": (("outside the timing loop",),),
    "off_by_percent_when_timed": (("timed repetition",),),
    "lazy_when_timed": (("timed repetition",), ("_Lazy",)),
}
FAST_CHEATS = ("patches_timer", "gc_scan", "lazy_tensor", "timing_aware")
"""The fast tier's toy run: one cheat of each kind (tampering with the harness, finding the expected answer, an
output that is not a computed tensor, behaving differently when timed), each about 3 s of process start on the
CPU; the others are in the slow tier's toy run."""
OTHER_CHEATS = [n for n in [*CPU_CHEATS, *ONE_OF] if n not in FAST_CHEATS]


def statuses(out: Path):
    got = {}
    for path in (out / "traces").glob("*/*.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            got.setdefault(r["solution"].split("::")[-1], []).append({**r["evaluation"], "definition": r["definition"]})
    return got


def _toy_run(tmp_path_factory, cheats):
    out = tmp_path_factory.mktemp("cheats")
    argv = ["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--out", str(out)]
    # the cheats go first: a patch they make must not reach the honest solutions evaluated after them
    argv += [a for name in cheats for a in ("--solution", f"{CHEATS}::{name}")]
    argv += ["--solution", f"{CHEATS}::honest", "--solution", f"{BAD}::good"]
    assert main(argv) == 1
    return statuses(out)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    return _toy_run(tmp_path_factory, FAST_CHEATS)


@pytest.fixture(scope="module")
def toy_run_others(tmp_path_factory):
    return _toy_run(tmp_path_factory, OTHER_CHEATS)


def check_cheats(run, names):
    """Each cheat gets its status (never PASSED) and its log says what was seen."""
    for name in names:
        ev = run[name][0]
        assert ev["status"] in (ONE_OF.get(name) or {CPU_CHEATS[name]}), (name, ev["status"], ev["log"])
        for alternatives in LOG_SAYS.get(name, ()):
            assert any(a in ev["log"] for a in alternatives), (name, alternatives, ev["log"])


def test_cheats_never_pass_and_say_what_was_seen(toy_run):
    check_cheats(toy_run, FAST_CHEATS)


@pytest.mark.slow  # a run of 13 solutions
def test_the_other_cheats_never_pass_and_say_what_was_seen(toy_run_others):
    check_cheats(toy_run_others, OTHER_CHEATS)


@pytest.mark.slow  # a run of its own
def test_a_content_cache_never_hits_in_the_timing_loop(tmp_path, monkeypatch):
    """Every timed repetition has inputs of its own: a cache keyed on the inputs' content is as slow as the
    honest computation (here made 50 ms long), not a replay."""
    delay = 0.05
    monkeypatch.setenv("CHEATS_HONEST_DELAY_S", str(delay))
    argv = ["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--out", str(tmp_path),
            "--solution", f"{CHEATS}::content_cache", "--solution", f"{CHEATS}::honest"]
    assert main(argv) == 0
    got = statuses(tmp_path)
    for name in ("content_cache", "honest"):
        ev = got[name][0]
        assert ev["status"] == "PASSED", ev["log"]
        assert ev["performance"]["latency_ms"] >= 0.9 * delay * 1e3, (name, ev["performance"])
        assert ev["correctness"]["extra"]["timed_repetition"]["checked"] is True


@pytest.mark.parametrize("run", ["toy_run", pytest.param("toy_run_others", marks=pytest.mark.slow)])
def test_honest_solutions_after_the_cheats_pass_with_honest_times(run, request):
    for name in ("honest", "good"):
        ev = request.getfixturevalue(run)[name][0]
        assert ev["status"] == "PASSED", ev["log"]
        assert ev["performance"]["latency_ms"] > 0.001  # a patched perf_counter would have divided it by 100


@pytest.fixture(scope="module")
def kda_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("kda_rows")
    argv = ["run", "--dataset", str(REPO), "--workers", "1", "--name", "kda_prefill_h8_d128_k_last",
            "--name", "kda_decode_h8_d128_k_last", "--size", "smoke", "--out", str(out),
            "--solution", f"{CHEATS}::honest"]
    for name in ROW_DEFECTS + ("pool_write_skipped_when_timed",):
        argv += ["--solution", f"{CHEATS}::{name}"]
    main(argv)
    return statuses(out)


@pytest.mark.slow  # kda_run: two KDA definitions, six solutions (2 min on 2 busy cores)
def test_one_wrong_row_fails_every_kda_workload(kda_run):
    assert kda_run["honest"] and all(ev["status"] == "PASSED" for ev in kda_run["honest"])
    for name in ROW_DEFECTS:
        assert kda_run[name], name
        for ev in kda_run[name]:
            assert ev["status"] == "INCORRECT_NUMERICAL", (name, ev["log"])
            assert "per-row bound" in ev["log"], (name, ev["log"])


@pytest.mark.slow  # kda_run
def test_a_state_pool_left_unwritten_in_timed_repetitions_is_caught(kda_run):
    """Decode writes its states into the pool in place; a solution that skips that write only while timed
    (not on the last repetition, which is compared whole) is caught by the digest of a drawn repetition."""
    evs = kda_run["pool_write_skipped_when_timed"]
    decode = [ev for ev in evs if ev["definition"].startswith("kda_decode")]
    assert decode and all(ev["status"] == "REWARD_HACK" for ev in decode), [ev["log"] for ev in decode]
    assert "differ from an untimed call" in decode[0]["log"]
    for ev in evs:  # prefill writes no pool: honest there, unless already caught on a decode workload
        if ev not in decode:
            assert ev["status"] == "PASSED" or "was caught reaching around the runner earlier" in ev["log"], ev["log"]


@pytest.mark.slow  # a run of its own
def test_trace_files_written_by_a_solution_do_not_survive_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("CHEATS_TRACE_DIR", str(tmp_path))
    argv = ["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--size", "all", "--out",
            str(tmp_path), "--solution", f"{BAD}::good", "--solution", f"{CHEATS}::forges_trace_files"]
    assert main(argv) == 1
    got = statuses(tmp_path)
    assert [ev["status"] for ev in got["good"]] == ["PASSED"] * 3
    assert [ev["status"] for ev in got["forges_trace_files"]] == ["INCORRECT_NUMERICAL"] * 3
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["totals"]["passed"] == 3 and summary["totals"]["failed"] == 3


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc (kda_trace/reaper.py)")
@pytest.mark.slow  # a run of its own
def test_processes_a_solution_leaves_behind_are_killed_before_the_records_are_final(tmp_path, monkeypatch, capsys):
    """A detached process (double fork, new session) started by a solution would rewrite the records after the
    run; the runner, a child subreaper, kills it and a plain leftover child, and says so."""
    import os
    import time

    monkeypatch.setenv("CHEATS_TRACE_DIR", str(tmp_path))
    argv = ["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--size", "all", "--out",
            str(tmp_path), "--solution", f"{BAD}::good", "--solution", f"{CHEATS}::leaves_a_process"]
    assert main(argv) == 1
    printed = " ".join(capsys.readouterr().err.split())  # the console wraps lines
    time.sleep(2.0)  # the forger would have acted by now (it waits 0.5 s after summary.json appears)
    assert not (tmp_path / "FORGED_BY_leaves_a_process").exists()
    got = statuses(tmp_path)
    assert [ev["status"] for ev in got["good"]] == ["PASSED"] * 3
    assert [ev["status"] for ev in got["leaves_a_process"]] == ["INCORRECT_NUMERICAL"] * 3
    assert printed.count("killed a process that a solution left running") >= 2, printed
    assert "started under solution " in printed and "leaves_a_process" in printed, printed
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"leaves_a_process" in cmd and b"pytest" not in cmd:
            alive.append(pid)
    assert not alive, alive


@pytest.mark.slow  # a run of its own
def test_a_dataset_rewritten_during_the_run_is_reported_and_fails_the_run(tmp_path, monkeypatch, capsys):
    """A solution rewrites the definition files (tolerances 1e9): this run's verdicts stand (the definitions were
    loaded at its start), and the run ends with exit status 1 naming the changed file."""
    import shutil

    ds = tmp_path / "ds"
    for sub in ("definitions/toy/toy_scan.json", "workloads/toy/toy_scan.jsonl"):
        (ds / sub).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(DS) / sub, ds / sub)
    monkeypatch.setenv("CHEATS_DATASET", str(ds))
    out = tmp_path / "out"
    argv = ["run", "--dataset", str(ds), "--workers", "1", "--out", str(out), "--solution", f"{BAD}::good",
            "--solution", f"{CHEATS}::rewrites_definitions"]
    assert main(argv) == 1
    err = " ".join(capsys.readouterr().err.split())  # the console wraps lines
    assert "changed on disk during the run" in err and "changed definitions/toy/toy_scan.json" in err, err
    got = statuses(out)
    assert got["good"] and all(ev["status"] == "PASSED" for ev in got["good"])
    assert got["rewrites_definitions"] and all(ev["status"] == "PASSED" for ev in got["rewrites_definitions"])
    assert "rewritten by a solution" in (ds / "definitions/toy/toy_scan.json").read_text()


def test_a_worker_refuses_to_start_when_kda_trace_changed_on_disk(tmp_path):
    from kda_trace.dataset import load_dataset
    from kda_trace.environment import capture
    from kda_trace.runner import RunConfig, Runner, Task

    ds = load_dataset(DS)
    d = ds.definitions["toy_scan"]
    w = ds.workloads_of("toy_scan")[0]
    config = RunConfig(dataset_root=Path(DS), out=tmp_path, device="cpu", seed=1, timeout=60,
                       code_digest="0000000000000000", devices=["cpu"])
    with pytest.raises(RuntimeError, match="source on disk changed during the run"):
        Runner(config, lambda d, t: None, capture("cpu", 1, DS)).run([Task(d, w, ["reference"], {"reference": "reference"})])


@pytest.mark.slow
def test_stored_inputs_rewritten_during_a_run_are_refused(tmp_path, monkeypatch):
    """A solution runs as the runner's user and can write the dataset's safetensors files. The run records
    their identity (inode, size, change time) before any solution code runs; a workload whose file changed
    since is INVALID_WORKLOAD for every solution, never judged on the rewritten inputs (before, a sibling whose
    process read the rewritten file was INPUT_MUTATED: blamed for the rewriter's deed)."""
    import shutil

    from safetensors.torch import save_file

    ds = tmp_path / "ds"
    (ds / "definitions" / "toy").mkdir(parents=True)
    (ds / "workloads" / "toy").mkdir(parents=True)
    (ds / "blob").mkdir()
    shutil.copy(Path(DS) / "definitions" / "toy" / "toy_scan.json", ds / "definitions" / "toy")
    lines = []
    for i, uuid in enumerate(["stored-a", "stored-b"]):  # run in this order: a first, then b
        gen = torch.Generator().manual_seed(i)
        save_file({"x": torch.randn(2, 5, 8, generator=gen)}, str(ds / "blob" / f"{uuid}.safetensors"))
        lines.append(json.dumps({"uuid": uuid, "axes": {"batch_size": 2, "seq_len": 5, "pool_size": 4},
                                 "inputs": {"x": {"type": "safetensors", "path": f"blob/{uuid}.safetensors",
                                                  "tensor_key": "x"},
                                            "state_pool": {"type": "random"}, "state_indices": {"type": "random"},
                                            "scale": {"type": "scalar", "value": 0.5}},
                                 "tags": ["smoke"]}))
    (ds / "workloads" / "toy" / "toy_scan.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("CHEATS_DATASET", str(ds))
    out = tmp_path / "out"
    argv = ["run", "--dataset", str(ds), "--workers", "1", "--out", str(out),
            "--solution", f"{CHEATS}::rewrites_stored_inputs", "--solution", f"{CHEATS}::honest"]
    main(argv)
    by_workload = {}
    for path in (out / "traces").glob("*/*.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            by_workload[(r["workload"]["uuid"], r["solution"].split("::")[-1])] = r["evaluation"]
    # the honest solution ran after the rewrite on both workloads (its process makes its inputs from the files)
    for key in [("stored-a", "honest"), ("stored-b", "honest"), ("stored-b", "rewrites_stored_inputs")]:
        ev = by_workload[key]
        assert ev["status"] == "INVALID_WORKLOAD", (key, ev)
        assert "written or replaced after this run started" in ev["log"]
    # the rewriter's own first workload: its timed repetitions' inputs were refused
    assert by_workload[("stored-a", "rewrites_stored_inputs")]["status"] not in ("PASSED", "INPUT_MUTATED")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc (kda_trace/reaper.py)")
@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_an_interrupted_run_leaves_no_process_behind(tmp_path, signame):
    """Interrupted (Ctrl-C, `timeout -s INT`, or `timeout`'s default SIGTERM) while a solution is busy, the run
    ends within seconds, killing its worker and the solution's process at once: a GPU run interrupted this way
    once left a process holding 31 GiB of GPU memory for the next run to trip over (`timeout -k 30` killed the
    runner in its 20 s polite wait). The records finished before the interrupt are kept."""
    import os
    import signal
    import threading
    import time

    from kda_trace import reaper

    before = set(reaper.descendants())
    argv = ["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--out", str(tmp_path),
            "--solution", f"{BAD}::good", "--solution", f"{BAD}::hangs", "--timeout", "600"]
    seen, sent = [], []

    def interrupt_when_hanging():
        _wait_until_hangs_runs(tmp_path)
        seen.extend(p for p in reaper.descendants() if p not in before)
        sent.append(time.monotonic())
        os.kill(os.getpid(), getattr(signal, signame))

    # a shell without job control starts background commands with SIGINT ignored, and Python then keeps it
    # ignored: the interrupt below would be lost and the run would wait for `hangs` (600 s)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt_when_hanging, daemon=True).start()
    try:
        assert main(argv) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - sent[0] < 10  # `timeout -k 30` would kill a runner that waited politely (20 s)
    assert len(seen) >= 2, seen  # the worker and the solution's process at least
    time.sleep(0.5)
    tracker = reaper._tracker_pid()  # multiprocessing's, started by the first run of this pytest run: it stays
    left = [p for p in seen if p != tracker and Path(f"/proc/{p}").exists() and _state(p) != "Z"]
    assert not left, [reaper.describe(p) for p in left]
    got = statuses(tmp_path)
    assert [ev["status"] for ev in got["good"]][:1] == ["PASSED"]


def _wait_until_hangs_runs(out, limit_s=120.0):
    """Wait until solution `good` has a record in run directory `out` (at most limit_s), then 2 s more: `hangs`,
    evaluated after it, is then asleep in its process."""
    import time

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if any(p.read_text().strip() for p in (out / "traces").glob("*/*.jsonl")):
            break
    time.sleep(2.0)


def _state(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc (kda_trace/reaper.py)")
@pytest.mark.slow
def test_a_runner_killed_outright_takes_its_worker_and_solution_process_with_it(tmp_path):
    """SIGKILL (`timeout -k`, the OOM killer) gives the runner no cleanup: its worker and the solution's process
    end anyway (PR_SET_PDEATHSIG, kda_trace/reaper.py `die_with_parent`) instead of running on, orphaned."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from kda_trace import reaper

    argv = [sys.executable, "-m", "kda_trace.cli", "run", "--dataset", DS, "--workers", "1", "--definition",
            "toy_scan", "--out", str(tmp_path), "--solution", f"{BAD}::good", "--solution", f"{BAD}::hangs",
            "--timeout", "600"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_until_hangs_runs(tmp_path)
        below = reaper.descendants(proc.pid)
        assert len(below) >= 2, below  # the worker and the solution's process at least
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10.0
    while True:
        left = [p for p in below if Path(f"/proc/{p}").exists() and _state(p) not in ("Z", "gone")]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for p in below:  # the ones that were reparented to this process (a subreaper under pytest): reap them
        try:
            os.waitpid(p, os.WNOHANG)
        except ChildProcessError:
            pass
    assert not left, [reaper.describe(p) for p in left]


def test_fixtures_that_copy_output_shapes_work_where_an_output_axis_is_in_no_input():
    """chunk_states' num_chunks is in no input: the fixtures that make outputs of the right shape (empty_like,
    gc_scan, timing_aware, ...) failed with KeyError there on the H100, which tested nothing. They take the shapes from
    one honest call, whose results are overwritten before they are freed (so that empty_like does not get them
    back from the allocator)."""
    import importlib.util

    from kda_trace.call_results import normalize_outputs
    from kda_trace.dataset import load_dataset
    from kda_trace.inputs import make_inputs
    from kda_trace.reference import compile_reference

    spec = importlib.util.spec_from_file_location("cheats_under_test", CHEATS)
    cheats = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cheats)
    ds = load_dataset(REPO)
    d = ds.definitions["kda_prefill_h8_d128_k_last_chunk_states"]
    assert "num_chunks" not in {a for s in d.inputs.values() for a in s.shape or ()}
    w = next(w for w in ds.workloads_of(d.name) if "smoke" in w.tags)
    inputs = make_inputs(d, w, 0, "cpu", ds.root)
    ref, _ = normalize_outputs(d, compile_reference(d.reference, d.name, True)(**inputs))
    cheats.supports(d)
    assert cheats._shaped_like_outputs(inputs) == {n: (list(t.shape), t.dtype) for n, t in ref.items()}
    out = cheats.empty_like(**inputs)
    assert {n: t.shape for n, t in out.items()} == {n: t.shape for n, t in ref.items()}
    assert not torch.allclose(out["chunk_states"], ref["chunk_states"], atol=1e-2, rtol=1e-2, equal_nan=False)
