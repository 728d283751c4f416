"""Which workloads the runner keeps off the GPU by default (runner.keeps_on_host), by the dataset's shapes, and
what the judge and the solutions' processes hold then."""

import multiprocessing as mp

import pytest

from kda_trace.dataset import load_dataset
from kda_trace.runner import declared_bytes, keeps_on_host

H100_BYTES = 81559 * 2**20  # torch.cuda.get_device_properties(0).total_memory on the H100 80GB HBM3
H200_BYTES = 143771 * 2**20  # and on the H200


def _footprints():
    ds = load_dataset()
    for name, d in ds.definitions.items():
        for w in ds.workloads_of(name):
            yield name, w, declared_bytes(d, d.inputs, w), declared_bytes(d, d.outputs, w)


def test_every_stress_workload_is_kept_in_host_memory_even_on_an_h200():
    stress = [(n, w.uuid, i, o) for n, w, i, o in _footprints() if "stress" in w.tags]
    assert len(stress) >= 10
    # decode's pools: the input alone (8.7 GB) is under a tenth of an H200; with the output pool it is not
    assert any(n.startswith("kda_decode") and i < H200_BYTES / 10 for n, _, i, _ in stress)
    assert [(n, u) for n, u, i, o in stress if not keeps_on_host(i, o, H200_BYTES)] == []


def test_the_largest_prefill_workloads_stay_on_an_h100():
    prefill = [(i, o) for n, w, i, o in _footprints()
               if n == "kda_prefill_h96_d128_k_last_safe_gate" and "stress" not in w.tags]
    largest = max(prefill, key=sum)
    assert sum(largest) > 8e9
    assert not keeps_on_host(*largest, H100_BYTES)


def test_declared_bytes_counts_shapes_and_dtypes():
    ds = load_dataset()
    d = ds.definitions["kda_decode_h32_d128_k_last"]
    w = next(w for w in ds.workloads_of(d.name) if "stress" in w.tags)
    pool = w.axes["pool_size"] * 32 * 128 * 128 * 4  # float32 state pool, 32 heads, K = V = 128
    o = w.axes["batch_size"] * 32 * 128 * 2  # bf16, one token per sequence
    assert declared_bytes(d, d.outputs, w) == pool + o


class _IdleHost:
    def __init__(self):
        self.running = True

    def alive(self):
        return self.running

    def stop(self):
        self.running = False

    close = stop


def _worker(tmp_path):
    from kda_trace.dataset import default_root
    from kda_trace.runner import RunConfig, WorkerContext

    config = RunConfig(dataset_root=default_root(), out=tmp_path, device="cpu", seed=0, timeout=60)
    return WorkerContext(config, "cpu", lambda spec, phase: None)


def test_out_of_gpu_memory_is_tried_again_with_the_other_solutions_processes_stopped(tmp_path):
    """A solution's process that keeps GPU memory between its evaluations (a cache that only grows) must not make
    the worker's inputs or another solution fail: out of memory, the worker stops the idle processes and tries
    once more."""
    import torch

    ctx = _worker(tmp_path)
    ctx.hosts = {"hog": _IdleHost(), "other": _IdleHost()}
    attempts = []

    def make():
        attempts.append(1)
        if len(attempts) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return "made"

    assert ctx.with_room(make) == "made" and len(attempts) == 2
    assert not ctx.hosts["hog"].alive() and not ctx.hosts["other"].alive()
    # with nobody to stop, or for another error, the first failure stands
    with pytest.raises(torch.OutOfMemoryError):
        ctx.with_room(lambda: (_ for _ in ()).throw(torch.OutOfMemoryError("again")))
    ctx.hosts["x"] = _IdleHost()
    with pytest.raises(ValueError):
        ctx.with_room(lambda: (_ for _ in ()).throw(ValueError("a generator bug")))
    assert ctx.hosts["x"].alive()
    assert ctx.stop_other_hosts("x") == [] and ctx.stop_other_hosts(None) == ["x"]


def test_a_solution_out_of_gpu_memory_is_evaluated_again_and_its_record_says_so(tmp_path, monkeypatch):
    import torch

    from kda_trace.call_results import OUT_OF_GPU_MEMORY_HINT
    from kda_trace.runner import Task, make_record
    from kda_trace.schema import EvaluationStatus as S

    ds = load_dataset()
    d = ds.definitions["kda_gate_h32_d128"]
    w = next(w for w in ds.workloads_of(d.name) if "smoke" in w.tags)
    ctx = _worker(tmp_path)
    ctx.hosts = {"hog": _IdleHost()}
    attempts = []

    seen = []

    def evaluate_solution(task, spec, inputs_a, inputs_b, ref_a, ref_b, rec, on_host, seed_b, fresh):
        attempts.append(ctx.hosts["hog"].alive())
        seen.append((seed_b, fresh, ref_b))
        status, log = ((S.RUNTIME_ERROR, f"{OUT_OF_GPU_MEMORY_HINT} OutOfMemoryError") if len(attempts) == 1
                       else (S.PASSED, "ok"))
        return make_record(d, w, spec, status, ctx.environment, log)

    monkeypatch.setattr(ctx, "evaluate_solution", evaluate_solution)
    [record] = ctx.evaluate_task(Task(d, w, ["mine"], {"mine": "mine"}))
    assert attempts == [True, False]  # the second attempt ran with the other process stopped
    # ... on a new input set B and new timing seeds: the first attempt had seen this workload's
    (seed_1, fresh_1, ref_1), (seed_2, fresh_2, ref_2) = seen
    assert seed_1 != seed_2 and fresh_1 is not fresh_2 and fresh_1.seed(0) != fresh_2.seed(0)
    assert not all(torch.equal(ref_1[n], ref_2[n]) for n in ref_1)
    assert fresh_2._checksums is fresh_1._checksums is not None
    assert record.evaluation.status == S.PASSED
    assert record.evaluation.log.startswith("[evaluated twice") and "hog" in record.evaluation.log


def test_a_solution_still_out_of_gpu_memory_has_its_process_stopped(tmp_path, monkeypatch):
    """A solution that fails out of GPU memory even alone (its own cache filled the GPU) must not keep what its
    process holds: on an H100 the content_cache fixture's 75 GiB kept the next workload's processes from starting."""
    from kda_trace.call_results import OUT_OF_GPU_MEMORY_HINT
    from kda_trace.runner import Task, make_record
    from kda_trace.schema import EvaluationStatus as S

    ds = load_dataset()
    d = ds.definitions["kda_gate_h32_d128"]
    w = next(w for w in ds.workloads_of(d.name) if "smoke" in w.tags)
    ctx = _worker(tmp_path)
    ctx.hosts = {"hog": _IdleHost(), "other": _IdleHost()}

    def evaluate_solution(task, spec, *args):
        status, log = (S.RUNTIME_ERROR, f"{OUT_OF_GPU_MEMORY_HINT} OutOfMemoryError") if spec == "hog" else (S.PASSED, "")
        return make_record(d, w, spec, status, ctx.environment, log)

    monkeypatch.setattr(ctx, "evaluate_solution", evaluate_solution)
    # its input sets already in host memory: with them on the GPU, the task would first be evaluated again so
    # (test_gpu_turns.py's test_a_task_that_runs_out_of_memory_alone_...)
    task = Task(d, w, ["other", "hog"], {"other": "other", "hog": "hog"}, inputs_on_host=True)
    records = list(ctx.evaluate_task(task))
    assert [r.evaluation.status for r in records] == [S.PASSED, S.RUNTIME_ERROR]
    assert "evaluated twice" in records[1].evaluation.log  # "other" was stopped for the second attempt
    assert not ctx.hosts["hog"].alive()


def test_a_process_that_cannot_start_says_why():
    """A solution's process whose start fails (on a GPU: no room left for its CUDA context) reports the error, which
    the worker reads (out of GPU memory, it stops the other processes and tries again); it is not just 'died'."""
    from kda_trace.call_results import OUT_OF_GPU_MEMORY_HINT, short_traceback
    from kda_trace.dataset import default_root
    from kda_trace.solution_host import HostDied, SolutionHost

    host = SolutionHost(mp.get_context("spawn"), "triton", "cuda:0", False, default_root(), lambda *a: None)
    try:
        with pytest.raises(HostDied, match="could not start: .*(CUDA|cuda)"):
            host.start()  # this CPU machine's torch has no CUDA
        assert not host.alive()
    finally:
        host.close()
    assert short_traceback(RuntimeError("CUDA error: out of memory")).startswith(OUT_OF_GPU_MEMORY_HINT)
    assert OUT_OF_GPU_MEMORY_HINT not in short_traceback(RuntimeError("CUDA error: an illegal memory access"))


def test_the_judge_keeps_only_the_inputs_it_reads_while_the_solutions_run():
    from kda_trace.inputs import make_inputs
    from kda_trace.runner import judged_inputs

    ds = load_dataset()
    for name, kept in (("kda_prefill_h8_d128_k_last", {"cu_seqlens", "scale"}),
                       ("kda_decode_h32_d128_k_last", {"state_pool", "scale"})):
        d = ds.definitions[name]
        w = next(w for w in ds.workloads_of(name) if "smoke" in w.tags)
        inputs = make_inputs(d, w, 0, "cpu", ds.root)
        judged = judged_inputs(d, inputs)
        assert set(judged) == kept
        assert all(judged[n] is inputs[n] for n in judged)


def test_the_judge_holds_one_input_set_at_a_time(tmp_path, monkeypatch):
    """Input set B is made after A's reference outputs, when the judge keeps only what it reads of A: a stress
    workload's two full sets at once, beside the solutions' processes' own, were more than a machine's memory."""
    import gc
    import weakref

    import torch

    import kda_trace.inputs as inputs_module
    from kda_trace.runner import Task, make_record
    from kda_trace.schema import EvaluationStatus as S

    ds = load_dataset()
    d = ds.definitions["kda_prefill_h8_d128_k_last"]
    w = next(w for w in ds.workloads_of(d.name) if "smoke" in w.tags)
    made, alive_when_b_is_made = [], []
    real = inputs_module.make_inputs

    def spy(*args, **kwargs):
        if made:
            gc.collect()
            alive_when_b_is_made.append(sorted(n for n, ref in made[0].items() if ref() is not None))
        inputs = real(*args, **kwargs)
        made.append({n: weakref.ref(t) for n, t in inputs.items() if isinstance(t, torch.Tensor)})
        return inputs

    monkeypatch.setattr(inputs_module, "make_inputs", spy)
    ctx = _worker(tmp_path)
    seen = {}

    def evaluate_solution(task, spec, inputs_a, inputs_b, ref_a, ref_b, rec, on_host, seed_b, fresh):
        seen.update(a=set(inputs_a), b=set(inputs_b), refs=(ref_a, ref_b), timing=fresh.reference_timing)
        return make_record(d, w, spec, S.PASSED, ctx.environment, "")

    monkeypatch.setattr(ctx, "evaluate_solution", evaluate_solution)
    [record] = ctx.evaluate_task(Task(d, w, ["mine"], {"mine": "mine"}))
    assert record.evaluation.status == S.PASSED
    assert len(made) == 2 and alive_when_b_is_made == [["cu_seqlens"]]
    assert seen["a"] == seen["b"] == {"cu_seqlens", "scale"}
    ref_a, ref_b = seen["refs"]
    assert set(ref_a) == set(d.outputs) and not torch.equal(ref_a["o"], ref_b["o"])  # two sets, two seeds
    assert len(seen["timing"].times_ms) == 2  # on the CPU the reference's two correctness calls are its timing


def test_a_remade_input_set_is_the_same_set_at_every_read():
    import torch

    from kda_trace.inputs import RemadeInputs, clone_inputs, make_inputs

    ds = load_dataset()
    for name in ("kda_prefill_h8_d128_k_last", "kda_decode_h32_d128_k_last"):
        d = ds.definitions[name]
        w = next(w for w in ds.workloads_of(name) if "smoke" in w.tags)
        made = make_inputs(d, w, 7, "cpu", ds.root)
        remade = RemadeInputs(d, w, 7, "cpu", ds.root)
        assert list(remade) == list(made) == list(d.inputs) and len(remade) == len(made)
        first, again = clone_inputs(remade), clone_inputs(remade)
        for n, v in made.items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(first[n], v) and torch.equal(again[n], v) and first[n].dtype == v.dtype
                assert first[n].data_ptr() != again[n].data_ptr()  # each read is a tensor of its own
            else:
                assert first[n] == v
        other = RemadeInputs(d, w, 8, "cpu", ds.root)
        assert not torch.equal(other[next(iter(d.inputs))], first[next(iter(d.inputs))])
        with pytest.raises(KeyError):
            remade["not_an_input"]


def _metrics(out):
    import json

    got = {}
    for path in sorted((out / "traces").glob("*/*.jsonl")):
        for r in map(json.loads, path.read_text().splitlines()):
            ev = r["evaluation"]
            got[(r["solution"].split("::")[-1], r["definition"], r["workload"]["uuid"])] = (
                ev["status"], ev["log"], {n: m["rms_rel_error"] for n, m in (ev["correctness"] or {}).get("outputs", {}).items()})
    return got


@pytest.mark.slow  # KDA runs of two definitions
def test_inputs_kept_off_the_gpu_give_the_same_verdicts(tmp_path):
    """--inputs-on-host (forced, it applies on the CPU too): the judge keeps only the inputs it reads, and the
    solutions' processes make each input set again from its seed. The honest solution's errors are those of a run
    that keeps the sets, input for input; one wrong row and a changed input are still caught."""
    from pathlib import Path

    from kda_trace.cli import main

    here = Path(__file__).parent
    cheats, bad = here / "cheats.py", here / "bad_solutions.py"
    common = ["run", "--workers", "1", "--name", "kda_prefill_h8_d128_k_last", "--name", "kda_decode_h8_d128_k_last",
              "--size", "smoke", "--max-reps", "3"]
    main(common + ["--out", str(tmp_path / "kept"), "--solution", f"{cheats}::honest"])
    main(common + ["--out", str(tmp_path / "remade"), "--inputs-on-host", "--solution", f"{cheats}::honest",
                   "--solution", f"{cheats}::row_zeroed", "--solution", f"{cheats}::state_row_zeroed"])
    kept, remade = _metrics(tmp_path / "kept"), _metrics(tmp_path / "remade")
    honest = {k: v for k, v in remade.items() if k[0] == "honest"}
    assert honest and all(v[0] == "PASSED" for v in honest.values()), honest
    assert {k: v[2] for k, v in honest.items()} == {k: v[2] for k, v in kept.items()}
    for (name, definition, _), (status, log, _) in remade.items():
        if name != "honest":
            assert status == "INCORRECT_NUMERICAL" and "per-row bound" in log, (name, definition, log)
    main(["run", "--workers", "1", "--dataset", str(here / "fixtures" / "ds"), "--definition", "toy_scan",
          "--inputs-on-host", "--out", str(tmp_path / "toy"), "--solution", f"{bad}::mutates_input",
          "--solution", f"{bad}::caches_first", "--solution", f"{bad}::good"])
    toy = {k[0]: v[0] for k, v in _metrics(tmp_path / "toy").items()}
    assert toy == {"mutates_input": "INPUT_MUTATED", "caches_first": "INCORRECT_NUMERICAL", "good": "PASSED"}


@pytest.mark.slow  # KDA runs with four solutions
def test_cheats_in_the_timing_loop_are_caught_with_inputs_kept_off_the_gpu(tmp_path):
    """Kept off the GPU (the stress workloads), every timed repetition still gets inputs of its own and a drawn one
    is checked by digest: a solution that is right only on the last repetition, or skips its pool writes while
    timed, does not pass there either."""
    import json
    from pathlib import Path

    from kda_trace.cli import main

    here = Path(__file__).parent
    cheats = here / "cheats.py"
    out = tmp_path / "toy"
    argv = ["run", "--workers", "1", "--dataset", str(here / "fixtures" / "ds"), "--definition", "toy_scan",
            "--inputs-on-host", "--out", str(out)]
    for name in ("timing_aware", "lazy_when_timed", "wrong_unless_judged_whole", "honest"):
        argv += ["--solution", f"{cheats}::{name}"]
    main(argv)
    toy = {k[0]: v for k, v in _metrics(out).items()}
    assert {k: v[0] for k, v in toy.items()} == {"timing_aware": "REWARD_HACK", "lazy_when_timed": "REWARD_HACK",
                                                 "wrong_unless_judged_whole": "INCORRECT_NUMERICAL",
                                                 "honest": "PASSED"}, toy
    assert "timed repetition" in toy["timing_aware"][1] and "timed repetition" in toy["wrong_unless_judged_whole"][1]
    record = json.loads(next((out / "traces").glob("*/*.jsonl")).read_text().splitlines()[-1])
    assert record["solution"].endswith("honest")
    assert record["evaluation"]["correctness"]["extra"]["timed_repetition"]["checked"] is True

    out = tmp_path / "decode"
    main(["run", "--workers", "1", "--name", "kda_decode_h8_d128_k_last", "--size", "smoke", "--inputs-on-host",
          "--out", str(out), "--solution", f"{cheats}::pool_write_skipped_when_timed", "--solution", f"{cheats}::honest"])
    got = _metrics(out)
    assert {k[0] for k in got} == {"pool_write_skipped_when_timed", "honest"}
    for (name, _, uuid), (status, log, _) in got.items():
        want = "REWARD_HACK" if name == "pool_write_skipped_when_timed" else "PASSED"
        assert status == want, (name, uuid, log)


@pytest.mark.slow  # a run of its own
def test_the_judges_comparison_out_of_memory_stops_the_other_processes_not_the_judged_one(tmp_path, monkeypatch):
    """A hog's memory must not fail another solution in the judge's own work for it either (comparing its outputs):
    the worker stops the other solutions' processes, keeps the judged one's (it is in the middle of its evaluation)
    and compares again."""
    import torch

    from kda_trace.runner import Task
    from kda_trace.schema import EvaluationStatus as S

    ds = load_dataset()
    d = ds.definitions["kda_gate_h32_d128"]
    w = next(w for w in ds.workloads_of(d.name) if "smoke" in w.tags)
    ctx = _worker(tmp_path)
    ctx.hosts["hog"] = _IdleHost()
    real, calls = ctx.correctness, []

    def correctness(*args):
        calls.append(ctx.hosts["reference"].alive())
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real(*args)

    monkeypatch.setattr(ctx, "correctness", correctness)
    try:
        [record] = ctx.evaluate_task(Task(d, w, ["reference"], {"reference": "reference"}))
        assert record.evaluation.status == S.PASSED, record.evaluation.log
        assert not ctx.hosts["hog"].alive()
        assert calls[:2] == [True, True] and len(calls) >= 3  # tried again with the judged process alive; then B
    finally:
        ctx.close()
