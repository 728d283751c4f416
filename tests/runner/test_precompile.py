"""The precompile pass (kda_trace/precompile.py): its plan, its limits, and how its compiled kernels reach the run's
Triton cache. Its end-to-end run is in test_run.py."""

import time
from pathlib import Path
from types import SimpleNamespace

from kda_trace.dataset import load_dataset
from kda_trace.precompile import plan, precompile
from kda_trace.runner import Task, task_bytes

HERE = Path(__file__).parent
DS = str(HERE / "fixtures" / "ds")
BAD = str(HERE / "bad_solutions.py")


def cpu_config(code_digest=None) -> SimpleNamespace:
    """What precompile() reads of a run's config, for the pass's processes on the CPU."""
    return SimpleNamespace(device="cpu", devices=["cpu"], trust_code=False, dataset_root=Path(DS), seed=1,
                           timeout=60.0, code_digest=code_digest)


def test_the_precompile_plan_puts_each_definitions_smallest_workload_first():
    """One solution after the other, in the tasks' order (the run reports each one's share of the pass's wall time
    from when its calls ended), each with its definitions' smallest workloads first."""
    ds = load_dataset(DS)
    tasks = [Task(d, e.workload, ["b", "a"], {"a": "a", "b": "b"}) for d in ds.definitions.values()
             for e in ds.workloads.get(d.name, [])]
    items = plan(tasks, task_bytes)
    assert len(items) == 2 * len(tasks)
    assert [i.spec for i in items] == ["b"] * len(tasks) + ["a"] * len(tasks)
    size = lambda i: task_bytes(Task(i.definition, i.workload, [], {}))  # noqa: E731
    for spec in ("a", "b"):
        mine = [i for i in items if i.spec == spec]
        firsts = [i for i in mine if i.first]
        assert mine[:len(firsts)] == firsts and len(firsts) == len(ds.definitions)
    firsts = [i for i in items if i.first]
    for f in firsts:
        assert all(size(f) <= size(i) for i in items if (i.spec, i.definition.name) == (f.spec, f.definition.name))
    assert all(i.large and not i.first for i in plan(tasks, task_bytes, max_bytes=0))
    sizes = sorted({size(i) for i in items})
    split = plan(tasks, task_bytes, max_bytes=sizes[0])  # the smallest workloads small, the rest large
    small = [i for i in split if not i.large]
    assert small and all(size(i) <= sizes[0] for i in small) and split[:len(small)] == small
    assert [size(i) for i in split[len(small):]] == sorted(size(i) for i in split[len(small):])
    with_reference = [Task(t.definition, t.workload, ["a", "reference"], {"a": "a", "reference": "reference"})
                      for t in tasks]
    assert {i.spec for i in plan(with_reference, task_bytes)} == {"a"}  # the reference compiles nothing


def test_the_precompile_pass_gives_up_on_a_solution_whose_process_cannot_start():
    """A process that cannot start (here: refused, its source digest differs) is not started again for each of its
    solution's calls, and the pass never outlasts its time cap."""
    ds = load_dataset(DS)
    d = ds.definitions["toy_scan"]
    tasks = [Task(d, e.workload, [f"{BAD}::good"], {f"{BAD}::good": "good"}) for e in ds.workloads["toy_scan"]] * 3
    config = cpu_config(code_digest="not this source")
    started = time.monotonic()
    assert precompile(plan(tasks, task_bytes), config, 1, lambda w: {}) == (0, len(tasks), 0)
    assert time.monotonic() - started < 30  # one start refused, not one per call
    assert precompile(plan(tasks, task_bytes), config, 2, lambda w: {}, max_s=0.0) == (0, len(tasks), 0)


def test_compiled_kernels_reach_the_run_cache_but_autotuning_results_do_not(tmp_path, monkeypatch):
    """The pass's processes compile into the run's Triton cache; autotuning results they leave there are removed
    when it ends (picked while other processes shared the GPU; fla keeps its picks on disk), those already there
    before it are kept."""
    cache = tmp_path / "triton"
    (cache / "old").mkdir(parents=True)
    (cache / "old" / "fwd.autotune.json").write_text("the run's own")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    ds = load_dataset(DS)
    spec = f"{BAD}::caches_like_triton"
    tasks = [Task(ds.definitions["toy_scan"], e.workload, [spec], {spec: "caches"}) for e in ds.workloads["toy_scan"]]
    config = cpu_config()
    ended = {}
    started = time.monotonic()
    assert precompile(plan(tasks, task_bytes), config, 2, lambda w: {}, ended=ended) == (len(tasks), 0, 0)
    assert set(ended) == {"caches"} and 0 < ended["caches"] <= time.monotonic() - started  # when its last call ended
    entries = [p for p in cache.iterdir() if p.name.startswith("entry")]
    assert entries and all([f.name for f in e.iterdir()] == ["k.cubin"] for e in entries)
    assert (cache / "old" / "fwd.autotune.json").read_text() == "the run's own"


def test_a_precompile_process_compiles_each_autotuning_config_once_and_times_none(monkeypatch):
    """In the pass, a Triton autotuner runs each config once (which compiles it) and takes the first, instead of
    timing each config over many runs: the pass's picks are thrown away, and the run tunes on its own."""
    import torch
    import triton
    import triton.language as tl
    from triton.runtime.autotuner import Autotuner

    from kda_trace.solution_host import tune_by_compiling_only

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(Autotuner, "do_bench", Autotuner.__dict__["do_bench"])  # put back after the test
    ran = []
    configs = [triton.Config({"BLOCK": b}, pre_hook=lambda nargs, b=b: ran.append(b)) for b in (64, 16, 32)]

    @triton.autotune(configs=configs, key=["n"])
    @triton.jit
    def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    x = torch.arange(100, dtype=torch.float32)
    y = torch.zeros_like(x)
    tune_by_compiling_only()
    double[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, 100)
    assert ran == [64, 16, 32, 64]  # each config once while tuning, then the pick: the first
    assert torch.equal(y, 2 * x)


def test_the_pass_limit_grows_with_the_solutions_it_compiles_for():
    from kda_trace.precompile import PRECOMPILE_MAX_S, limit_s

    assert limit_s(1) == limit_s(0) == PRECOMPILE_MAX_S
    assert limit_s(2) == 2 * PRECOMPILE_MAX_S


def test_large_workloads_are_precompiled_one_at_a_time_and_only_for_a_solution_that_autotunes(tmp_path, monkeypatch):
    """Workloads over the pass's size limit: called for a solution whose process said it autotunes (its Triton
    autotuner was asked to time configs), never two at once; left to the run for one that only compiles."""
    from kda_trace.sandbox import SANDBOX_WRITABLE_ENV

    monkeypatch.setenv("CALL_LOG_DIR", str(tmp_path))
    monkeypatch.setenv(SANDBOX_WRITABLE_ENV, str(tmp_path))
    ds = load_dataset(DS)
    d = ds.definitions["toy_scan"]
    config = cpu_config()
    sizes = {e.workload.uuid: task_bytes(Task(d, e.workload, [], {})) for e in ds.workloads["toy_scan"]}
    limit = min(sizes.values())
    large = sum(size > limit for size in sizes.values())
    assert large >= 2

    def tasks(name):
        spec = f"{BAD}::{name}"
        return [Task(d, e.workload, [spec], {spec: name}) for e in ds.workloads["toy_scan"]]

    n = len(sizes)
    assert precompile(plan(tasks("good"), task_bytes, limit), config, 3, lambda w: {}) == (n - large, 0, large)
    assert precompile(plan(tasks("autotunes"), task_bytes, limit), config, 3, lambda w: {}) == (n, 0, 0)
    calls = sorted(tuple(float(v) for v in f.read_text().split()) for f in tmp_path.glob("calls-*.txt"))
    seq_small = {e.workload.axes["seq_len"] for e in ds.workloads["toy_scan"] if sizes[e.workload.uuid] <= limit}
    spans = sorted((b, e) for seq, b, e in calls if seq not in seq_small)
    assert len(spans) == large
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))  # one at a time


def test_a_solution_with_large_workloads_only_is_probed_by_its_first(tmp_path, monkeypatch):
    """With no workload under the size limit, the solution's first large one is called (one at a time, as every
    large one) to learn whether it autotunes; the pass does not wait for an answer that no call would give."""
    ds = load_dataset(DS)
    d = ds.definitions["toy_scan"]
    config = cpu_config()
    n = len(ds.workloads["toy_scan"])
    for name, want in (("good", (1, 0, n - 1)), ("autotunes", (n, 0, 0))):
        spec = f"{BAD}::{name}"
        tasks = [Task(d, e.workload, [spec], {spec: name}) for e in ds.workloads["toy_scan"]]
        started = time.monotonic()
        assert precompile(plan(tasks, task_bytes, max_bytes=0), config, 3, lambda w: {}, max_s=120.0) == want
        assert time.monotonic() - started < 60
