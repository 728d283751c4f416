"""Workers sharing a GPU (kda_trace/gpu_turns.py): untimed work side by side, timing alone. The turns are flock
files, so they are tested here on the CPU, in threads (each GpuTurns opens files of its own, and flock locks of two
open files exclude each other even in one process) and with the runner's workers."""

import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kda_trace.gpu_turns import GpuTurns

HERE = Path(__file__).parent
DS = str(HERE / "fixtures" / "ds")
BAD = str(HERE / "bad_solutions.py")


def _held_by_another(tmp_path, name="gpu-cuda-0.step.gate"):
    """Whether some other open file holds `name` locked (polled: the thread that takes it may start late)."""
    import fcntl

    fd = os.open(os.path.join(tmp_path, name), os.O_RDWR)
    try:
        for _ in range(500):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                return True
            threading.Event().wait(0.01)
        return False
    finally:
        os.close(fd)


def _in_thread(action):
    done = threading.Event()

    def go():
        action()
        done.set()

    threading.Thread(target=go, daemon=True).start()
    return done


def test_a_worker_alone_waits_for_the_sharers_and_keeps_new_ones_out(tmp_path):
    a, b, c = (GpuTurns(str(tmp_path), "cuda:0") for _ in range(3))
    a.share()
    b_alone = _in_thread(b.alone)
    assert _held_by_another(tmp_path) and not b_alone.wait(0.3)  # a shares: b waits, holding the gate
    c_shares = _in_thread(c.share)
    assert not c_shares.wait(0.3)  # b waits to be alone: no new sharer gets in before it
    a_back = _in_thread(a.let_others_time)  # a's next step: b goes first, then a shares again
    assert b_alone.wait(5) and b.held == "alone"
    assert not c_shares.wait(0.3) and not a_back.is_set()
    b.end_task()
    assert c_shares.wait(5) and a_back.wait(5)
    for t in (a, b, c):
        t.close()


def test_sharers_share_and_another_gpu_is_another_lock(tmp_path):
    a, b, other = GpuTurns(str(tmp_path), "cuda:0"), GpuTurns(str(tmp_path), "cuda:0"), GpuTurns(str(tmp_path), "cuda:1")
    a.share()
    assert _in_thread(b.share).wait(5)
    assert _in_thread(other.alone).wait(5)
    for t in (a, b, other):
        t.close()


def test_a_task_too_large_to_share_waits_for_the_other_tasks_to_end(tmp_path):
    """A worker waiting for a step still holds its task's memory: a task alone begins only when no other task is in
    progress, and none begins before it ends."""
    a, big, c = (GpuTurns(str(tmp_path), "cuda:0") for _ in range(3))
    a.begin_task(alone=False)
    a.alone()  # a times: the big task must wait for a's whole task, not only this step
    a.share()
    big_began = _in_thread(lambda: big.begin_task(alone=True))
    assert _held_by_another(tmp_path, "gpu-cuda-0.task.gate") and not big_began.wait(0.3)
    c_began = _in_thread(lambda: c.begin_task(alone=False))
    assert not c_began.wait(0.3)
    a.end_task()
    assert big_began.wait(5) and big.held == "alone"
    assert not c_began.wait(0.3)
    big.end_task()
    assert c_began.wait(5)
    for t in (a, big, c):
        t.close()


def test_a_dead_workers_turn_is_given_back(tmp_path):
    """A worker killed while alone (its timeout) blocks nobody: the kernel drops its locks."""
    code = ("import sys, time; from kda_trace.gpu_turns import GpuTurns; t = GpuTurns(sys.argv[1], 'cuda:0'); "
            "t.alone(); print('alone', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(HERE.parent.parent)})
    try:
        assert select.select([holder.stdout], [], [], 60)[0] and holder.stdout.readline().strip() == "alone"
        waiter = GpuTurns(str(tmp_path), "cuda:0")
        shared = _in_thread(waiter.share)
        assert not shared.wait(0.3)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert shared.wait(5)
        waiter.close()
    finally:
        holder.kill()
        holder.wait()


def test_workers_sharing_a_device_never_time_while_another_calls(tmp_path, monkeypatch):
    """Two workers on one device with turns: every record passes, and no call inside a timing loop overlaps any
    call of the other worker's solution process (each call sleeps 20 ms, so overlaps would be seen)."""
    from kda_trace.dataset import load_dataset
    from kda_trace.environment import capture
    from kda_trace.runner import RunConfig, Runner, Task
    from kda_trace.sandbox import SANDBOX_WRITABLE_ENV

    logs = tmp_path / "calls"
    logs.mkdir()
    monkeypatch.setenv("CALL_LOG_DIR", str(logs))
    monkeypatch.setenv(SANDBOX_WRITABLE_ENV, str(logs))
    ds = load_dataset(DS)
    d = ds.definitions["toy_scan"]
    spec = f"{BAD}::logs_its_calls"
    tasks = [Task(d, w, [spec], {spec: "logs"}) for w in ds.workloads_of("toy_scan")] * 3
    turns = tmp_path / "turns"
    turns.mkdir()
    config = RunConfig(dataset_root=Path(DS), out=tmp_path / "out", device="cpu", seed=1, timeout=120,
                       devices=["cpu", "cpu"], gpu_turns_dir=str(turns))
    got = []
    Runner(config, lambda definition, trace: got.append(trace), capture("cpu", 1, DS)).run(tasks)
    assert len(got) == len(tasks) and all(t.evaluation.status == "PASSED" for t in got), \
        [t.evaluation.log for t in got if t.evaluation.status != "PASSED"]
    calls = [line.split() for f in logs.iterdir() for line in f.read_text().splitlines()]
    calls = [(pid, timed == "1", float(t0), float(t1)) for pid, timed, t0, t1 in calls]
    assert len({pid for pid, *_ in calls}) == 2  # both workers' processes called
    timed = [c for c in calls if c[1]]
    assert timed
    for pid, _, t0, t1 in timed:
        overlapping = [c for c in calls if c[0] != pid and c[2] < t1 and c[3] > t0]
        assert not overlapping, (pid, t0, t1, overlapping)


@pytest.mark.slow  # a run of two workers (10 s on 2 cores)
def test_a_task_that_runs_out_of_memory_while_sharing_is_evaluated_again_alone_and_a_cheat_is_not(tmp_path,
                                                                                                  monkeypatch):
    """Out of GPU memory while the GPU is shared: the task starts over with the GPU alone (no other task in progress),
    for the solutions not yet recorded, and that solution's record says so. A solution caught patching the harness
    is REWARD_HACK at once, even one that would be honest if evaluated again."""
    from kda_trace.dataset import load_dataset
    from kda_trace.environment import capture
    from kda_trace.runner import RunConfig, Runner, Task
    from kda_trace.sandbox import SANDBOX_WRITABLE_ENV

    logs = tmp_path / "calls"
    logs.mkdir()
    monkeypatch.setenv("CALL_LOG_DIR", str(logs))
    monkeypatch.setenv(SANDBOX_WRITABLE_ENV, str(logs))
    monkeypatch.setenv("OOM_FIRST_CALLS", "1")
    ds = load_dataset(DS)
    d = ds.definitions["toy_scan"]
    w = ds.workloads_of("toy_scan")[0]
    good, oom, cheat = f"{BAD}::good", f"{BAD}::out_of_memory_while_shared", f"{BAD}::patches_timer_once"
    tasks = [Task(d, w, [good, oom], {good: "good", oom: "oom"}), Task(d, w, [cheat], {cheat: "cheat"})]
    turns = tmp_path / "turns"
    turns.mkdir()
    config = RunConfig(dataset_root=Path(DS), out=tmp_path / "out", device="cpu", seed=1, timeout=120,
                       devices=["cpu", "cpu"], gpu_turns_dir=str(turns))
    got = {}
    Runner(config, lambda definition, trace: got.setdefault(trace.solution, trace), capture("cpu", 1, DS)).run(tasks)
    assert got["good"].evaluation.status == "PASSED" and not got["good"].evaluation.log.startswith("[evaluated again")
    assert got["oom"].evaluation.status == "PASSED", got["oom"].evaluation.log
    assert got["oom"].evaluation.log.startswith("[evaluated again with the GPU alone: the first attempt ran out of "
                                                "GPU memory"), got["oom"].evaluation.log
    assert got["cheat"].evaluation.status == "REWARD_HACK", got["cheat"].evaluation.log
    assert "evaluated again" not in got["cheat"].evaluation.log, got["cheat"].evaluation.log


def _one_record(tmp_path, monkeypatch, fixture: str):
    """The record of one worker's run of bad_solutions.py::`fixture` on toy_scan's first workload (its calls counted
    in $CALL_LOG_DIR)."""
    from kda_trace.dataset import load_dataset
    from kda_trace.environment import capture
    from kda_trace.runner import RunConfig, Runner, Task
    from kda_trace.sandbox import SANDBOX_WRITABLE_ENV

    logs = tmp_path / "calls"
    logs.mkdir()
    monkeypatch.setenv("CALL_LOG_DIR", str(logs))
    monkeypatch.setenv(SANDBOX_WRITABLE_ENV, str(logs))
    ds = load_dataset(DS)
    d, w = ds.definitions["toy_scan"], ds.workloads_of("toy_scan")[0]
    spec = f"{BAD}::{fixture}"
    config = RunConfig(dataset_root=Path(DS), out=tmp_path / "out", device="cpu", seed=1, timeout=120)
    got = []
    Runner(config, lambda definition, trace: got.append(trace), capture("cpu", 1, DS)).run([Task(d, w, [spec],
                                                                                                 {spec: fixture})])
    assert len(got) == 1
    return got[0]


@pytest.mark.parametrize("failures", [1, 3])
def test_a_task_that_runs_out_of_memory_alone_is_evaluated_again_with_its_inputs_in_host_memory(tmp_path, monkeypatch,
                                                                                                 failures):
    """Out of GPU memory with the GPU alone and the input sets on it: the task starts over with them in host memory,
    once; a second failure there is the record."""
    monkeypatch.setenv("OOM_FIRST_CALLS", str(failures))
    record = _one_record(tmp_path, monkeypatch, "out_of_memory_while_shared")
    log = record.evaluation.log
    if failures == 1:
        assert record.evaluation.status == "PASSED", log
        assert log.startswith("[evaluated again with its input sets in host memory: the attempt before ran out of GPU "
                              "memory"), log
    else:
        assert record.evaluation.status == "RUNTIME_ERROR" and "out of GPU memory" in log, log


def test_running_out_of_memory_once_timed_is_the_record(tmp_path, monkeypatch):
    """A solution that reports running out of GPU memory in its timing loop has seen its times: it is not evaluated
    again (that would draw them again)."""
    record = _one_record(tmp_path, monkeypatch, "out_of_memory_when_timed")
    assert record.evaluation.status == "RUNTIME_ERROR", record.evaluation.log
    assert "out of GPU memory" in record.evaluation.log and "evaluated again" not in record.evaluation.log


def test_a_flag_of_hidden_work_on_a_shared_gpu_stands_unless_the_evaluation_alone_passes():
    """The timing-excess flag (HIDDEN_WORK_LOG), raised on a shared GPU, is decided by the evaluation alone: its
    PASSED record (noted), its own REWARD_HACK, or else the flag itself, with the solution barred from its other
    workloads on that worker."""
    from types import SimpleNamespace

    from kda_trace.dataset import load_dataset
    from kda_trace.environment import capture
    from kda_trace.runner import HIDDEN_WORK_LOG, GpuAloneNeeded, Task, _after_alone, make_record

    ds = load_dataset(DS)
    d, w = ds.definitions["toy_scan"], ds.workloads_of("toy_scan")[0]
    task = Task(d, w, ["spec"], {"spec": "sol"})
    env = capture("cpu", 1, DS)

    def record(status, log):
        return make_record(d, w, "sol", status, env, log)

    for alone, kept in (("PASSED", "PASSED"), ("REWARD_HACK", "REWARD_HACK"), ("INCORRECT_NUMERICAL", "REWARD_HACK"),
                        ("TIMEOUT", "REWARD_HACK")):
        flag = record("REWARD_HACK", f"{HIDDEN_WORK_LOG} 1.5 ms but each call took 1.6 ms")
        first = GpuAloneNeeded("was flagged for work hidden from its timing", flag.evaluation.log, "sol", flag)
        ctx = SimpleNamespace(caught={})
        got = _after_alone(ctx, task, first, record(alone, "alone's log"))
        assert got.evaluation.status == kept, (alone, got.evaluation.log)
        # the same after a further attempt with the inputs in host memory (the flag carried over: worker_main)
        later = GpuAloneNeeded("ran out of GPU memory", "out of memory", "sol", flagged=first.flagged, on_host=True)
        again = _after_alone(SimpleNamespace(caught={}), task, later, record(alone, "host memory's log"))
        assert again.evaluation.status == kept, (alone, again.evaluation.log)
        if alone == "PASSED" or alone == "REWARD_HACK":
            assert got.evaluation.log.startswith("[evaluated again with the GPU alone: the first attempt was flagged")
        else:
            assert got.evaluation.log.startswith(HIDDEN_WORK_LOG) and f"it was {alone}" in got.evaluation.log
            assert "spec" in ctx.caught


def test_an_evaluation_on_a_shared_gpu_takes_it_alone_once_and_times_the_reference_there(tmp_path, monkeypatch):
    """On a GPU shared with other workers, a solution's evaluation takes the GPU alone for its timing loop only: the
    reference is timed by one call in that turn (on the repetition the check draws), not in a turn of its own. Run
    here on the CPU, with the turns of two workers on one device and the GPU's path of the reference timing."""
    from kda_trace.dataset import load_dataset
    from kda_trace.runner import RunConfig, Task, WorkerContext

    ds = load_dataset(DS)
    d = ds.definitions["toy_scan"]
    turns = tmp_path / "turns"
    turns.mkdir()
    config = RunConfig(dataset_root=Path(DS), out=tmp_path / "out", device="cpu", seed=1, timeout=120,
                       devices=["cpu", "cpu"], gpu_turns_dir=str(turns))
    ctx = WorkerContext(config, "cpu", lambda spec, phase: None)
    monkeypatch.setattr(ctx, "alone_throughout", lambda: False)  # as on a shared GPU
    alone_turns, phases_alone = [], []
    take = ctx.turns.alone
    monkeypatch.setattr(ctx.turns, "alone", lambda: alone_turns.append(1) or take())
    notify = ctx.notify
    monkeypatch.setattr(ctx, "notify", lambda spec, phase: (phases_alone.append(phase) if ctx.turns.held == "alone"
                                                           else None) or notify(spec, phase))
    spec = f"{BAD}::good"
    try:
        # the process's first call on the definition compiles and autotunes: alone too, on the first workload only
        for w, turns_alone in zip(ds.workloads_of("toy_scan")[:2], (2, 1)):
            alone_turns.clear()
            ctx.begin_task(Task(d, w, [spec], {spec: "good"}))
            try:
                [record] = list(ctx.evaluate_task(Task(d, w, [spec], {spec: "good"})))
            finally:
                ctx.end_task()
            assert record.evaluation.status == "PASSED", record.evaluation.log
            assert len(alone_turns) == turns_alone  # the timing loop's turn, and no other for the reference
            assert "reference timing: one call with the GPU alone" in record.evaluation.log
            assert record.evaluation.performance.reference_latency_ms > 0
        assert "reference: timing" in phases_alone
    finally:
        ctx.close()
