"""Red-team attempts on the runner's verdict: solutions that try to get PASSED, or a better time than
they deserve, on the CPU. Used as `--solution tests/runner/redteam.py::NAME`; tests/runner/test_redteam.py runs
them; each attempt was an open hole when written and is caught since the fixes that followed it.

Every attempt computes with the honest base of cheats.py (the reference; `CHEATS_HONEST_DELAY_S` makes each
honest computation that long, the cost that a cheat skips when it returns zeros), and reaches around the runner
in one way. The outcome noted on each was seen on toy_scan with `--workers 1` (see the test file).

| fixture | what it does | outcome when written -> now (CPU) |
|---|---|---|
| honest | the base (control) | PASSED, honest time |
| rewrites_times | rewrites the timing loop's `times` list (GPU: start events and `walls`) | PASSED, fake time -> RUNTIME_ERROR (a tuple) |
| self_removing_timer_patch | swaps timing._perf_counter during a repetition; the fake puts the real one back | PASSED, fake time -> REWARD_HACK |
| skips_undrawn_reps | reads `drawn`; zeros at once on repetitions that are not digested | PASSED, fake time (reps > 9) -> RUNTIME_ERROR (no `drawn`) |
| clears_digests | zeros on timed repetitions, then sets every digest to None | PASSED, fake time -> REWARD_HACK |
| precomputes_all_reps | computes every repetition's answer in the first one (inputs from the loop's frame) | PASSED, fake time -> REWARD_HACK (seed out of turn) |
| mutates_input_and_hides_it | writes an input, makes the same change to the host's copy | PASSED -> INPUT_MUTATED |
| stops_other_solutions | SIGSTOPs its sibling solution processes | the honest one: INVALID_REFERENCE -> PASSED (resumed) |
| plants_dirs_in_other_workdirs | a directory named first.safetensors in the others' work directories | the honest one: RUNTIME_ERROR -> PASSED (files carry the request's nonce) |
| stops_itself_between_workloads | a forked child SIGSTOPs its own process between workloads | everyone: INVALID_REFERENCE -> PASSED (resumed) |
| zero_digested_reps | sets timing.DIGESTED_REPS = 0 (an int: not fingerprinted); zeros when timed | PASSED, fake time -> REWARD_HACK (constants fingerprinted) |
| keeps_l2_warm | replaces timing._flush_buffers' entry by 1 byte: no L2 flush (GPU) | CPU: honest; H100: PASSED with the honest time, as the flush remade the buffer -> REWARD_HACK (a changed buffer is tampering; CPU-tested in test_timing.py; H100: REWARD_HACK on the decode, MTP and safe-gate prefill tables) |
| disables_stream_checks | OUTSIDE_STREAM_FACTOR / GATE_CYCLES set to off, then a side stream (GPU) | CPU: honest; H100: REWARD_HACK on 11 of 11 workloads (the constants are fingerprinted) |
| forked_writer | a forked child (not a thread) fills shared-memory outputs after return | caught (INCORRECT_NUMERICAL) |

The solution runs in its own process, but the timing loop (kda_trace.timing._time_cpu / _time_gpu) runs in
that process too, with its data in plain Python objects on the solution's call stack: the times list, the set
of repetitions that will be digested, the digests list, the module global `_perf_counter`.
"""

import os
import signal
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cheats import _base_outputs, _device, _shaped_like_outputs, supports  # noqa: E402, F401


FORGED = 0.3
"""The fraction of the measured time that the forging fixtures report: plausible, above any physical floor."""


def _timing_frame():
    """The harness's timing-loop frame on the caller's stack (sys._getframe: no inspect, no gc), or None."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name in ("_time_cpu", "_time_gpu") and "reps" in f.f_locals:
            return f
        f = f.f_back
    return None


def _zeros(inputs):
    return {n: torch.zeros(s, dtype=t, device=_device(inputs)) for n, (s, t) in _shaped_like_outputs(inputs).items()}


def _is_last(frame) -> bool:
    return frame.f_locals["i"] == frame.f_locals["reps"] - 1


def honest(**inputs):
    """The base, unchanged (a control in the same run). Outcome: PASSED, honest time."""
    return _base_outputs(**inputs)


def rewrites_times(**inputs):
    """Honest outputs every call; inside the timing loop it overwrites the harness's `times` list (a local of
    _time_cpu, reached through sys._getframe): each repetition's time scaled by FORGED (0.3) when the next one
    runs. Only the last repetition's own time is left, so the median is a forged one. On a GPU it replaces
    the current repetition's start event (a list of the loop) by one recorded after its work, and forges the
    host-clock cross-check's `walls` list the same way.
    Outcome when written: PASSED with a fake time (0.3 x the honest one)."""
    out = _base_outputs(**inputs)
    frame = _timing_frame()
    if frame is not None and frame.f_code.co_name == "_time_cpu":
        times = frame.f_locals["times"]
        if times:
            times[-1] *= FORGED  # the repetition before this one, scaled once (below the physical floor's radar)
    elif frame is not None:  # _time_gpu: the times are read from the events after the loop
        now = torch.cuda.Event(enable_timing=True)
        now.record()  # after all of this call's work on the caller's stream
        frame.f_locals["starts"][frame.f_locals["i"]] = now  # this repetition now starts when its work ended
        walls = frame.f_locals["walls"]  # the host-clock cross-check, a list too
        walls[:] = [1e-3] * len(walls)  # (an event pair with no work between: the physical floor may see this)
    return out


def self_removing_timer_patch(**inputs):
    """Honest outputs; inside the timing loop it replaces kda_trace.timing._perf_counter (the clock captured
    before the solution was imported) with one that, read once after the call returned, reports 0.3 x the time since the
    repetition's t0 and puts the real clock back. The harness's fingerprint is compared only after the whole
    timing loop, when the global is the original again. On a GPU it also replaces timing._event_elapsed on the
    last repetition with one that answers 0.3 x the real time and puts the real one back after the loop's last read.
    Outcome when written: PASSED with a fake time (every repetition 0.3 x its real time)."""
    out = _base_outputs(**inputs)
    frame = _timing_frame()
    if frame is not None:
        timing = sys.modules["kda_trace.timing"]
        real = timing._perf_counter
        t0 = frame.f_locals["t0"]

        def fake():
            timing._perf_counter = real  # removes itself before anyone checks
            return t0 + FORGED * (real() - t0)

        timing._perf_counter = fake  # on a GPU this forges the host-clock cross-check (`walls`)
        if frame.f_code.co_name == "_time_gpu" and _is_last(frame):  # and the events, read after the loop
            real_elapsed, calls = timing._event_elapsed, []

            def fake_elapsed(start, end):
                calls.append(1)
                if len(calls) == frame.f_locals["reps"]:
                    timing._event_elapsed = real_elapsed
                return FORGED * real_elapsed(start, end)

            timing._event_elapsed = fake_elapsed
    return out


def skips_undrawn_reps(**inputs):
    """Reads the set of repetitions that will be digested (`drawn`, a local of the timing loop) and returns
    zeros at once on every other repetition; honest on the drawn ones, the last one and outside the loop. With
    more than DIGESTED_REPS + 1 repetitions (always on a GPU: 10..200) most repetitions are fast garbage.
    Outcome when written: PASSED with a fake time when reps > 9 (`--max-reps 20`); the digest check passes, as every
    digested repetition was honest."""
    frame = _timing_frame()
    if frame is not None and not _is_last(frame) and frame.f_locals["i"] not in frame.f_locals["drawn"]:
        return _zeros(inputs)
    return _base_outputs(**inputs)


def clears_digests(**inputs):
    """Zeros at once on every timed repetition but the last; on the last one it sets every entry of the
    harness's `digests` list to None before returning, so the judge sees no digested repetition and records
    'a single timed repetition' (the judge does not check that the number of digests fits the number of times).
    Outcome when written: PASSED with a fake time (the zero-cost repetitions make the median)."""
    frame = _timing_frame()
    if frame is None:
        return _base_outputs(**inputs)
    if not _is_last(frame):
        return _zeros(inputs)
    digests = frame.f_locals["digests"]
    digests[:] = [None] * len(digests)
    return _base_outputs(**inputs)


def stops_other_solutions(**inputs):
    """Honest outputs, but it sends SIGSTOP to the other solution processes of its worker (its siblings: same
    parent, `spawn_main` on their command line). The next request to a stopped sibling never gets a reply.
    Outcome when written: the next workload times out in the worker's last phase, 'reference', so the sibling (and
    this one) get INVALID_REFERENCE there instead of PASSED: one solution changed another's record. Only with REDTEAM_SIGNALS=1 in the environment (tests set it)."""
    if os.environ.get("REDTEAM_SIGNALS") == "1":
        me, parent = os.getpid(), os.getppid()
        for pid in _siblings(parent):
            if pid != me:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except OSError:
                    pass
    return _base_outputs(**inputs)


def _siblings(parent: int):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and b"spawn_main" in cmdline:
            found.append(int(entry))
    return found


def plants_dirs_in_other_workdirs(**inputs):
    """Honest outputs, but it creates a directory named `first.safetensors` in every other solution's work
    directory (tempfile.gettempdir()/kda_trace_solution_* and /dev/shm/kda_trace_solution_*, where outputs go; same
    user), so that solution's process cannot write its outputs there. Outcome when written: the other solution gets
    RUNTIME_ERROR on every later workload. Only with REDTEAM_WORKDIRS=1 (tests set it, with TMPDIR pointing at a
    private directory)."""
    if os.environ.get("REDTEAM_WORKDIRS") == "1":
        import glob
        import tempfile

        mine = None
        frame = sys._getframe(1)
        while frame is not None and mine is None:
            host = frame.f_locals.get("self")
            mine = getattr(host, "workdir", None) if type(host).__name__ == "_Host" else None
            mine_ram = getattr(host, "ramdir", None) if type(host).__name__ == "_Host" else None
            frame = frame.f_back
        for workdir in glob.glob(os.path.join(tempfile.gettempdir(), "kda_trace_solution_*")) + \
                glob.glob("/dev/shm/kda_trace_solution_*"):
            if any(m is not None and os.path.samefile(workdir, m) for m in (mine, mine_ram)):
                continue
            for label in ("first", "final", "check"):
                path = os.path.join(workdir, f"{label}.safetensors")
                if not os.path.exists(path):
                    try:
                        os.mkdir(path)
                    except OSError:
                        pass
    return _base_outputs(**inputs)


def forked_writer(**inputs):
    """Returns outputs in shared memory still empty and forks a child that writes the honest answer into them
    50 ms later (not a thread: integrity.new_threads only sees Python threads).
    Outcome when written: INCORRECT_NUMERICAL (the outputs are copied the moment the call returns, and the copies
    are judged) or REWARD_HACK (changed after return)."""
    right = _base_outputs(**inputs)
    out = {n: torch.zeros_like(v).share_memory_() for n, v in right.items()}
    pid = os.fork()
    if pid == 0:  # the child: no Python cleanup, no flush of the parent's buffers
        try:
            time.sleep(0.05)
            for n, v in right.items():
                out[n].copy_(v)
        finally:
            os._exit(0)
    return out


_precomputed = {}


def precomputes_all_reps(**inputs):
    """On the first timed repetition it computes the answers of every repetition of the loop at once: their
    inputs are reachable from the timing loop's frame (`restore.rep_inputs(i)`, made from the secret rep_seed
    the process was sent, and `restore.final_inputs`, input set B). Every later repetition returns a copy of
    its precomputed answer: all outputs are right, every digest matches, but one repetition pays for all and
    the median is the copy's time. Needs no patch and no forged data.
    Outcome when written: PASSED with a fake time (the honest cost is paid once per loop, not per call)."""
    frame = _timing_frame()
    if frame is None:
        return _base_outputs(**inputs)
    i, reps, restore = frame.f_locals["i"], frame.f_locals["reps"], frame.f_locals["restore"]
    if _precomputed.get("restore") is not restore:  # (the object itself is kept: an id could be reused)
        answers = {}
        for j in range(reps):
            source = restore.final_inputs if j == reps - 1 else restore.rep_inputs(j)
            args = {n: v.clone() if isinstance(v, torch.Tensor) else v for n, v in source.items()}
            answers[j] = _base_outputs(**args)
        _precomputed.update(restore=restore, answers=answers)
    return {n: v.clone() for n, v in _precomputed["answers"][i].items()}


_forked = []


def stops_itself_between_workloads(**inputs):
    """Honest outputs; on its first call it forks a child that, 1.5 s later (the process is then idle, waiting
    for the next workload), SIGSTOPs the solution's own process. The next request gets no reply and no phase
    message, so the worker times out in the phase it last posted itself, 'reference': every remaining solution
    of that workload, this one included, is recorded INVALID_REFERENCE. A solution that expects to fail a
    workload can turn it into the reference's fault and wipe the others' passes there.
    Outcome when written: INVALID_REFERENCE for itself and the honest solution on the next workload. Only with
    REDTEAM_SIGNALS=1 in the environment (tests set it)."""
    if os.environ.get("REDTEAM_SIGNALS") == "1" and not _forked:
        host = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                time.sleep(1.5)
                os.kill(host, signal.SIGSTOP)
            finally:
                os._exit(0)
        _forked.append(pid)
    return _base_outputs(**inputs)


def mutates_input_and_hides_it(**inputs):
    """Computes the honest answer, then overwrites an input it may not write (the first floating-point input
    that is not in-place: scratch space it did not allocate) and makes the same change to the solution
    process's own copy of the inputs (`inputs_a` in the host's frame), which the host compares the call's
    arguments against. (The runner's INPUT_MUTATED check is made in the solution's process.)
    Outcome when written: PASSED instead of INPUT_MUTATED."""
    out = _base_outputs(**inputs)
    from cheats import _definitions

    inplace = set(_definitions["current"].inplace.values())
    name = next(n for n, v in inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point()
                and n not in inplace)
    inputs[name].mul_(-1.0)  # the caller's tensor: its sign flipped
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "first" and "inputs_a" in f.f_locals:
            f.f_locals["inputs_a"][name].mul_(-1.0)
            break
        f = f.f_back
    return out


def zero_digested_reps(**inputs):
    """Sets kda_trace.timing.DIGESTED_REPS = 0 (a module constant: the harness's fingerprint covers only
    callables and modules, so a changed int is not seen) on its first call; then zeros at once on every timed
    repetition but the last. `_draw_digested` draws none, and the judge reads that as 'a single timed
    repetition'. Outcome when written: PASSED with a fake time."""
    sys.modules["kda_trace.timing"].DIGESTED_REPS = 0
    frame = _timing_frame()
    if frame is not None and not _is_last(frame):
        return _zeros(inputs)
    return _base_outputs(**inputs)


def keeps_l2_warm(**inputs):
    """GPU only (on the CPU it is the honest solution): replaces the timing module's L2 flush buffer (an entry
    of the dict timing._flush_buffers, data the fingerprint does not cover) by a 1-byte tensor before the
    timing loop creates it, so the cache is never flushed between repetitions: warm-cache times.
    Outcome when written on the CPU: PASSED, honest (nothing to flush). On a GPU: expected PASSED with a warm-L2 time;
    seen PASSED with the honest time (the flush remade the buffer); now REWARD_HACK (timing.TimingTampered)."""
    device = _device(inputs)
    if device.type == "cuda":
        buffers = sys.modules["kda_trace.timing"]._flush_buffers
        tiny = torch.empty(1, dtype=torch.int8, device=device)
        for key in (str(device), f"cuda:{device.index or 0}", "cuda"):
            buffers[key] = tiny
    return _base_outputs(**inputs)


def disables_stream_checks(**inputs):
    """GPU only (on the CPU it is the honest solution): sets the module constants behind the two side-stream
    checks, timing.OUTSIDE_STREAM_FACTOR (host clock vs events) and solution_host.GATE_CYCLES (the held-back
    second call), to values that turn them off (ints and floats: not fingerprinted), then works on a side
    stream that the caller's stream does not wait for, as cheats.side_stream does, in the timed repetitions
    whose outputs are only digested after a device-wide synchronisation (not the first call, not the last one).
    Outcome when written on the CPU: PASSED, honest. On a GPU: expected PASSED with the launch time only."""
    device = _device(inputs)
    frame = _timing_frame()
    if device.type != "cuda" or frame is None or _is_last(frame):  # calls whose outputs are copied at return
        return _base_outputs(**inputs)
    sys.modules["kda_trace.timing"].OUTSIDE_STREAM_FACTOR = 1e9
    sys.modules["kda_trace.solution_host"].GATE_CYCLES = 0
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = _base_outputs(**inputs)
    return out
