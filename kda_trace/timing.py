"""Timing of one callable on prepared inputs: CUDA events (or a CUDA graph) on a GPU, wall time on the CPU.

Every repetition first copies the inputs into the working tensors (so an in-place solution always sees
fresh state; with `mutable` given, only those inputs, the ones a call may write), then flushes the L2 cache
(GPU), and only then starts the clock: input preparation and the flush are never timed. The number of
repetitions adapts to a time budget between a minimum and a maximum; the median, min and max are reported.
A call slower than the budget is not warmed up (again) and is timed once: a 20 s reference call would
otherwise cost minutes per workload.

The last repetition runs on a different input set (`final_inputs`) and its outputs are returned, so
the caller can check correctness on an input set taken from inside the timing loop: a solution that
caches its first result cannot pass. With `rep_inputs`, every other timed repetition runs on inputs of its
own too (a fresh input set per repetition: a cache keyed on the inputs' content never hits), and `digest`
records the outputs of about DIGESTED_REPS repetitions (integrity.output_digest), each drawn only after it
returned, so that the caller can check one of them afterwards: no call can know whether its outputs will be
digested, and a solution that does less work in the repetitions it guesses are not checked is seen.

The clocks are the ones this module captured when it was imported (before any solution is): the C
implementations of CUDA event record / elapsed time and of device synchronisation, and
`time.perf_counter`. A solution that patches `torch.cuda.Event` or `time` cannot change what is measured.

What the events measure is not trusted on its own. A solution runs in this process, so whatever the loop holds
it can reach (its frames, gc): it can record a repetition's start event again after some of its work, or its end
event early from another thread or stream, and the events then miss that work. Hiding the events better would
only make this harder, never impossible. What a solution cannot move from Python is the host clock around the
repetition, read by this loop into locals before the start event is recorded and after the device is idle again
(on Python 3.13 and later a frame's locals can be written through `frame.f_locals`, PEP 667; before, only through
ctypes). So every GPU repetition is also timed by the host clock between two device-wide synchronisations, and
the host clock's excess over the events is compared with what it is for nothing hidden: this process's own cost of
an event pair, measured at the start of every timing loop with no solution code between the events
(`_host_overhead_ms`). A median excess beyond that overhead by more than HIDDEN_FRACTION of the events' median or
HIDDEN_SLACK_MS, or beyond the events by more than OUTSIDE_STREAM_FACTOR / SLACK, is reported in
`TimingResult.outside_stream_ms` (work the events did not see). Each repetition's events are made for it and
read right after it, so no later call can record into an earlier repetition's events.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

import torch

from .inputs import clone_inputs
from .integrity import snapshot

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than the L2 of any current GPU (H100: 50 MB, B200: 126 MB)

# Captured at import, before any solution code runs (see the module docstring).
_perf_counter = time.perf_counter
_EventBase = torch._C._CudaEventBase
_event_new = _EventBase.__new__
_event_record = getattr(_EventBase, "record", None)  # absent from CPU builds of torch
_event_elapsed = getattr(_EventBase, "elapsed_time", None)
_cuda_synchronize = getattr(torch._C, "_cuda_synchronize", None)
_current_stream = torch.cuda.current_stream
_cuda_sleep = torch.cuda._sleep

OUTSIDE_STREAM_FACTOR, OUTSIDE_STREAM_SLACK_MS = 1.1, 0.05
"""The coarse bound, with no calibration: host-clock repetitions (between device-wide synchronisations) longer
than FACTOR x the events + SLACK, in the median, mean work the events did not see. It holds even where the
calibrated bound below cannot be used (a result made without `_host_overhead_ms`)."""

HIDDEN_FRACTION, HIDDEN_SLACK_MS = 0.015, 0.018
"""The calibrated bound: a median repetition whose host clock exceeds its events by more than the process's
measured overhead + max(FRACTION x the events' median, SLACK) hid work from the events. Work hidden from the
events adds all of its length to the excess, and an honest call's excess is at least the overhead (but 1.6 us
below it for a call that synchronises inside), so hiding max(2% of a call, 20 us) lands beyond the bound.
Measured on an H200 (torch 2.11, driver 580.159, idle, 40 repetitions each): the overhead 10 us; an honest repetition's median excess over it 1.4 / 5.4 / 11.7 / 18 / 41 us
for sleep kernels of 0.1 / 0.3 / 1 / 3 / 10 ms (the synchronisation wakes later after a longer wait), 12 us for
300 small launches (3.1 ms), 25 us for 13.4 ms of matrix products, none for a call that synchronises inside:
inside the bound. A start event recorded again after 2% of 1, 3 or 10 ms of work: 52, 80 and 276 us of excess,
outside it (tests/runner/test_hidden_work.py)."""
OVERHEAD_REPS = 15
"""Event pairs with nothing between them, timed like a repetition at the start of every GPU timing loop: the
median of their host-clock excess is the overhead (about 30 us of host time in all)."""
HONEST_REPS = 10
"""A loop whose excess passes the calibrated bound is checked once more against an honest call of its length, now:
a plain GPU sleep as long as its events' median, timed like a repetition this many times (`_honest_excess_ms`).
Only an excess beyond that one's + max(FRACTION, SLACK) is hidden work. The excess of an honest call grows with its
length and with the machine's state: in the H200 main job a decode call of 0.739 ms showed 28.8 us over an
overhead of 9.1 us, past the bound's 27.1 us, while the same bound held for the sleep kernels above in an idle
process."""

@dataclass
class TimingConfig:
    """How hard to time. None fields take the per-device defaults in `defaults_for`."""

    warmup: Optional[int] = None
    min_reps: Optional[int] = None
    max_reps: Optional[int] = None
    budget_s: Optional[float] = None
    cuda_graph: bool = False
    settle: Optional[float] = None
    """Stop once min_reps are done and the 95% interval of the median is narrower than this fraction of it
    (STABLE_MEDIAN_WIDTH on a GPU; 0: run every repetition the budget allows)."""


@dataclass
class TimingResult:
    """Times of the timed repetitions, in milliseconds."""

    times_ms: List[float]
    mode: str
    """`cuda_events`, `cuda_graph` or `cpu_wall` (interpreter / CPU timing: not a GPU speed figure)."""
    final_outputs: Any = None
    notes: List[str] = field(default_factory=list)
    final_snapshot: Any = None
    """The last repetition's outputs copied on the caller's stream the moment it returned (integrity.snapshot)."""
    wall_ms: List[float] = field(default_factory=list)
    """GPU: each repetition by the host clock between device-wide synchronisations."""
    digests: List[Any] = field(default_factory=list)
    """With `digest`: per timed repetition, in order, the digest of its outputs or None (not drawn; the last
    repetition, on `final_inputs`, is never digested: its outputs are returned whole)."""
    outside_stream_ms: Optional[float] = None
    """Set when the host clock saw work that the events did not (see the module docstring): the median
    host-clock time of a repetition."""
    overhead_ms: Optional[float] = None
    """GPU: the host clock's excess over an event pair with nothing between, in this process (`_host_overhead_ms`)."""
    honest_excess_ms: Optional[float] = None
    """GPU, when the excess passed the calibrated bound: an honest call's of the same length (HONEST_REPS)."""

    @property
    def excess_ms(self) -> Optional[float]:
        """GPU: the median over repetitions of the host clock's excess over the events."""
        if not self.wall_ms:
            return None
        return statistics.median(w - t for w, t in zip(self.wall_ms, self.times_ms))

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def median_wall_ms(self) -> Optional[float]:
        return statistics.median(self.wall_ms) if self.wall_ms else None

    @property
    def min_ms(self) -> float:
        return min(self.times_ms)

    @property
    def max_ms(self) -> float:
        return max(self.times_ms)


def defaults_for(device: str, config: TimingConfig) -> TimingConfig:
    """Fill unset fields: on a GPU 3 warm-ups, 10..100 reps within 1 s, stopping early once the median has
    settled; on the CPU no warm-up beyond the correctness call (Triton-interpreter calls take seconds) and 1..5
    reps within 1 s."""
    gpu = device.startswith("cuda")
    return TimingConfig(
        warmup=config.warmup if config.warmup is not None else (3 if gpu else 0),
        min_reps=config.min_reps if config.min_reps is not None else (10 if gpu else 1),
        max_reps=config.max_reps if config.max_reps is not None else (MAX_GPU_REPS if gpu else 5),
        budget_s=config.budget_s if config.budget_s is not None else 1.0,
        cuda_graph=config.cuda_graph and gpu,
        settle=config.settle if config.settle is not None else (STABLE_MEDIAN_WIDTH if gpu else 0.0),
    )


MAX_GPU_REPS = 100
"""The most timed repetitions on a GPU by default: the median of 100 has a 95% interval of ranks 40-60. Calls
of about 0.1 ms, whose host launch is inside their events, spread by +-20% (H200: decode 0.09-0.35 ms around a
median of 0.13 ms), never settle, and each repetition costs 1-2 ms of harness (fresh inputs, L2 flush,
synchronisations): 200 repetitions made their timing 0.4-0.5 s per workload, the largest cost of the decode
workloads in the H200 main job."""
STABLE_MEDIAN_WIDTH = 0.02
"""A GPU timing loop stops once the distribution-free 95% interval of its median (order statistics n/2 -+
0.98 sqrt(n)) is narrower than 2% of the median, after at least min_reps repetitions. Each repetition makes
fresh inputs, flushes the L2 cache and synchronises (about 1-2 ms of harness per repetition on an H200, beside
kernels of 0.05-10 ms), so running all MAX_GPU_REPS repetitions of a fast call's budget cost the run more than its
kernels; a settled median does not move by more than the interval's width with more repetitions."""


STABLE_MEDIAN_FLOOR_MS = 0.001
"""...or narrower than 1 us: CUDA events resolve about 0.5 us, and a call of tens of microseconds jitters by a few
from repetition to repetition, so its interval seldom narrows to 2% within MAX_GPU_REPS repetitions."""


def median_settled(times_ms: Sequence[float], width: float, floor_ms: float = 0.0) -> bool:
    """Whether the 95% interval of the median of `times_ms` (ranks n/2 -+ 0.98 sqrt(n)) is narrower than
    `width` x the median or `floor_ms`."""
    n = len(times_ms)
    if width <= 0 or n < 3:
        return False
    ordered = sorted(times_ms)
    half = 0.98 * math.sqrt(n)
    lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half) - 1)
    middle = statistics.median(ordered)
    return middle > 0 and ordered[hi] - ordered[lo] <= max(width * middle, floor_ms)


_flush_buffers: Dict[str, torch.Tensor] = {}


class TimingTampered(RuntimeError):
    """The timing loop found its own data changed by the code it times (the runner reports REWARD_HACK)."""


def flush_l2(device: str) -> None:
    """Overwrite a buffer larger than the L2 cache so the next call starts cold (GPU only). The buffer is made
    on first use; one found changed since (a smaller one keeps the cache warm) raises TimingTampered."""
    if not device.startswith("cuda"):
        return
    buf = _flush_buffers.get(device)
    if buf is None:
        buf = _flush_buffers[device] = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)
    elif not _is_flush_buffer(buf, torch.device(device)):
        _flush_buffers.pop(device, None)
        shape = f"a {type(buf).__name__} of {buf.numel()} {buf.dtype} elements on {buf.device}" \
            if isinstance(buf, torch.Tensor) else f"a {type(buf).__name__}"
        raise TimingTampered(f"the timing loop's L2 flush buffer for {device} was replaced by {shape} (it is "
                             f"{L2_FLUSH_BYTES} int8 elements on that device): repetitions would start with a warm cache")
    buf.zero_()


def _is_flush_buffer(buf: Any, want: torch.device) -> bool:
    return (type(buf) is torch.Tensor and buf.numel() == L2_FLUSH_BYTES and buf.dtype == torch.int8
            and buf.device.type == want.type and (want.index is None or buf.device.index == want.index)
            and buf.is_contiguous())


def _refresh(work: Dict[str, Any], source: Dict[str, Any], names=None) -> None:
    """Copy `source` into the working tensors. An integer tensor that already holds the same values (cu_seqlens
    of a workload, the same in every input set) is left as it is: a copy would bump its version counter and
    void the per-tensor caches of derived tables that engines and fla keep (a cost no real call pays)."""
    for name in source:
        if names is not None and name not in names:
            continue
        value = source[name]  # read only when copied: a RemadeInputs set makes it now (inputs.py)
        if isinstance(value, torch.Tensor):
            held = work[name]
            if value.is_floating_point() or value.is_complex() or held.shape != value.shape \
                    or held.dtype != value.dtype or not torch.equal(held, value.to(held.device)):
                held.copy_(value)
        else:
            work[name] = value


def measure(run: Callable[..., Any], inputs: Dict[str, Any], device: str, config: Optional[TimingConfig] = None,
            final_inputs: Optional[Dict[str, Any]] = None, estimate_s: Optional[float] = None,
            mutable: Optional[Set[str]] = None, rep_inputs: Optional[Callable[[int], Dict[str, Any]]] = None,
            digest: Optional[Callable[[Any, Dict[str, Any]], Any]] = None) -> TimingResult:
    """Time `run(**inputs)`; the last repetition uses `final_inputs` (default `inputs`) and its outputs are
    returned in `final_outputs`. `estimate_s`, the duration of an earlier call, sizes the repetitions
    when there is no warm-up to measure one. `mutable` (default: all) names the inputs restored before
    each warm-up (and each repetition without `rep_inputs`): the runner passes the in-place ones, as it has
    already checked that the others are left alone, which spares making a stress workload's inputs again per
    repetition (inputs.RemadeInputs). `rep_inputs(i)` gives timed repetition i (but the last) inputs of its own;
    `digest(outputs, that repetition's inputs)` is taken after about DIGESTED_REPS timed repetitions but the
    last, each drawn after it returned, outside the timed span (`TimingResult.digests`).

    A call slower than `budget_s` (by `estimate_s` or a warm-up) is not warmed up again and is timed with
    one repetition (CUDA events, never a graph), with a note saying so. When `estimate_s` was slow but the
    timed call is not (the earlier call included compilation), the usual warm-up and repetitions follow."""
    cfg = defaults_for(device, config or TimingConfig())
    final_inputs = final_inputs if final_inputs is not None else inputs
    restore = _Restore(inputs, final_inputs, mutable, rep_inputs)
    work = clone_inputs(inputs, device)  # the call's own copy, on the device
    gpu = device.startswith("cuda")
    mode = "cuda_events" if gpu else "cpu_wall"
    notes: List[str] = []

    per_call = estimate_s or 0.0
    if per_call > cfg.budget_s:
        timed = _time_reps(run, work, restore, 1, device, digest)
        if timed[0][0] / 1e3 > cfg.budget_s:
            notes.append(_slow_note(per_call, cfg.budget_s, 0))
            return _finish(timed, mode, notes)
        per_call = timed[0][0] / 1e3  # the earlier call included compilation: time as usual

    # warm-up (compilation, autotuning, allocator); the last one estimates the cost of a call
    warmups = 0
    while warmups < cfg.warmup and per_call <= cfg.budget_s:
        restore(work, last=False, rep=None)
        _sync(device)
        t0 = _perf_counter()
        run(**work)
        _sync(device)
        per_call = _perf_counter() - t0
        warmups += 1
    if per_call > cfg.budget_s:
        timed = _time_reps(run, work, restore, 1, device, digest)
        notes.append(_slow_note(per_call, cfg.budget_s, warmups))
        return _finish(timed, mode, notes)
    reps = int(cfg.budget_s / max(per_call, 1e-6))
    reps = max(cfg.min_reps, min(cfg.max_reps, reps))

    if gpu and cfg.cuda_graph:
        graph_call = _capture(run, work, inputs, device, notes)
        if graph_call is not None:
            timed = _time_gpu(graph_call[0], work, restore, reps, device, digest, static_outputs=graph_call[1],
                              settle=(cfg.min_reps, cfg.settle))
            return _finish(timed, "cuda_graph", notes)
    return _finish(_time_reps(run, work, restore, reps, device, digest, (cfg.min_reps, cfg.settle)), mode, notes)


def _finish(timed, mode, notes) -> TimingResult:
    times, outputs, snap, walls, digests, overhead_ms = timed  # as _time_cpu / _time_gpu return them
    return _result(times, mode, outputs, notes, snap, walls, digests, overhead_ms)


def _result(times, mode, outputs, notes, snap, walls, digests, overhead_ms=None) -> TimingResult:
    result = TimingResult(times, mode, outputs, notes, final_snapshot=snap, wall_ms=walls, digests=digests,
                          overhead_ms=overhead_ms)
    if walls and hidden_work(times, walls, overhead_ms):
        if overhead_ms is not None and not hidden_work(times, walls, None):  # the calibrated bound alone
            result.honest_excess_ms = _honest_excess_ms(result.median_ms)
        if hidden_work(times, walls, overhead_ms, result.honest_excess_ms):
            result.outside_stream_ms = result.median_wall_ms
    return result


def hidden_work(times_ms: List[float], walls_ms: List[float], overhead_ms: Optional[float],
                honest_excess_ms: Optional[float] = None) -> bool:
    """Whether the host clock (`walls_ms`, per repetition) saw work that the events (`times_ms`) did not: the
    coarse bound always, and with `overhead_ms` (the process's measured excess for nothing hidden) the calibrated
    one (see HIDDEN_FRACTION), against `honest_excess_ms` too when given (HONEST_REPS)."""
    events, wall = statistics.median(times_ms), statistics.median(walls_ms)
    if wall > OUTSIDE_STREAM_FACTOR * events + OUTSIDE_STREAM_SLACK_MS:
        return True
    if overhead_ms is None:
        return False
    excess = statistics.median(w - t for w, t in zip(walls_ms, times_ms))
    margin = max(HIDDEN_FRACTION * events, HIDDEN_SLACK_MS)
    return excess > max(overhead_ms, honest_excess_ms or 0.0) + margin


def _slow_note(per_call: float, budget_s: float, warmups: int) -> str:
    return (f"a call took {per_call:.3g} s, more than the {budget_s:g} s timing budget: timed with 1 repetition "
            f"after {warmups} warm-up(s)")


class _Restore:
    """Prepares the working tensors before a call: every input from `final_inputs` before the last
    repetition, from `rep_inputs(rep)` before another timed repetition when given, else the mutable inputs
    from `inputs` (warm-ups, or every repetition without `rep_inputs`)."""

    def __init__(self, inputs, final_inputs, mutable, rep_inputs=None):
        self.inputs, self.final_inputs, self.mutable, self.rep_inputs = inputs, final_inputs, mutable, rep_inputs
        self.fresh = True  # `work` was just copied from `inputs`
        self.holds_other = False  # `work` holds inputs other than `inputs`
        self.current = inputs  # the input set `work` holds now

    def __call__(self, work, last: bool, rep: Optional[int]) -> None:
        self.current = self.inputs
        if last:
            self.current = self.final_inputs
            _refresh(work, self.final_inputs)
        elif rep is not None and self.rep_inputs is not None:
            self.current = self.rep_inputs(rep)
            _refresh(work, self.current)
        elif self.holds_other:
            _refresh(work, self.inputs)
        elif not self.fresh:
            _refresh(work, self.inputs, self.mutable)
        self.fresh = False
        self.holds_other = last or (rep is not None and self.rep_inputs is not None)


def _time_reps(run, work, restore, reps, device, digest=None, settle=(0, 0.0)):
    """`reps` repetitions, or fewer: with settle = (min_reps, width), the one after the min_reps-th or a later
    one whose times leave the median settled (`median_settled`) is the last."""
    if device.startswith("cuda"):
        return _time_gpu(lambda: run(**work), work, restore, reps, device, digest, settle=settle)
    return _time_cpu(run, work, restore, reps, digest, settle)


def _stop_after(i: int, reps: int, times: Sequence[float], settle) -> int:
    """The repetition count after repetition i (not the last) returned: i + 2 (one more, the last) when the
    median has settled, else `reps`."""
    min_reps, width = settle
    if width and i + 2 < reps and i + 1 >= max(min_reps, 3) and median_settled(times, width, STABLE_MEDIAN_FLOOR_MS):
        return i + 2
    return reps


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        _cuda_synchronize()  # the whole current device (the solution process serves one device), all streams


def _time_cpu(run, work, restore, reps, digest=None, settle=(0, 0.0)):
    clock = _perf_counter  # a local from here on: a module attribute swapped during the loop is not read
    times, digests = (), []  # tuples: nothing in the call can change a time already taken through a reference
    outputs = snap = None
    i = -1
    while i + 1 < reps:
        i += 1
        restore(work, last=i == reps - 1, rep=i)
        t0 = clock()
        outputs = run(**work)
        times = times + ((clock() - t0) * 1e3,)
        if i == reps - 1:
            snap = snapshot(outputs)
        if i < reps - 1:
            reps = _stop_after(i, reps, times, settle)
        if digest is not None:
            digests.append(digest(outputs, restore.current) if _digested(i, reps, digest, digests) else None)
    return list(times), outputs, snap, [], digests, None


DIGESTED_REPS = 8
"""About how many timed repetitions have their outputs digested (a digest reads every output once, and a state
pool's twice), in a loop of DIGEST_HORIZON repetitions; more in a longer one."""
DIGEST_HORIZON = 40
"""The digest chance is DIGESTED_REPS in this many repetitions at least: a loop that stops once its median
has settled (STABLE_MEDIAN_WIDTH) is not known in advance to be short, and must still digest about as many."""
_system_random = random.SystemRandom()  # the OS's randomness: nothing in the process predicts it


def _digested(i: int, reps: int, digest, so_far: List[Any]) -> bool:
    """Whether repetition i (which has returned) is digested: never the last, the others each with the chance
    that makes about DIGESTED_REPS in all (every one when there are no more than that), and the one before the
    last when none was yet (the judge takes a timing loop of two or more repetitions without a digest for a
    harness whose records were changed)."""
    if digest is None or i >= reps - 1:
        return False
    if i == reps - 2 and not any(g is not None for g in so_far):
        return True
    return _system_random.random() < DIGESTED_REPS / max(min(reps, DIGEST_HORIZON) - 1, 1)


def _new_event():
    return _event_new(_EventBase, enable_timing=True)


def _time_gpu(call, work, restore, reps, device, digest=None, static_outputs=None, settle=(0, 0.0)):
    # the clocks as locals, the times as tuples: see _time_cpu
    clock, record, elapsed, synchronize = _perf_counter, _event_record, _event_elapsed, _cuda_synchronize
    overhead_ms = _host_overhead_ms()
    outputs = snap = None
    times, walls, digests = (), (), []
    i = -1
    while i + 1 < reps:
        i += 1
        last = i == reps - 1
        restore(work, last=last, rep=i)  # prepared before the flush
        flush_l2(device)
        stream = _current_stream()
        start, end = _new_event(), _new_event()  # this repetition's own, read right after it
        tail = _new_event() if last else end
        synchronize()
        t0 = clock()
        record(start, stream)
        outputs = call()
        record(end, stream)
        if last:
            snap = snapshot(static_outputs if static_outputs is not None else outputs)
            record(tail, stream)
        synchronize()
        wall = (clock() - t0) * 1e3
        if last:  # the snapshot's copies are the harness's work, not the call's: a state pool's take milliseconds
            wall -= elapsed(end, tail)
        times, walls = times + (elapsed(start, end),), walls + (wall,)
        if not last:
            reps = _stop_after(i, reps, times, settle)
        if digest is not None:
            digests.append(digest(static_outputs if static_outputs is not None else outputs, restore.current)
                           if _digested(i, reps, digest, digests) else None)
    return list(times), (static_outputs if static_outputs is not None else outputs), snap, list(walls), digests, \
        overhead_ms


def _timed_pair(stream, between: Optional[Callable[[], Any]] = None) -> tuple:
    """(events ms, host-clock ms) of one event pair on `stream` with `between()` (or nothing) between the events,
    timed as `_time_gpu` times a repetition: the host clock between device-wide synchronisations. Only the harness's
    own work goes between: no solution code runs here."""
    start, end = _new_event(), _new_event()
    _cuda_synchronize()
    t0 = _perf_counter()
    _event_record(start, stream)
    if between is not None:
        between()
    _event_record(end, stream)
    _cuda_synchronize()
    return _event_elapsed(start, end), (_perf_counter() - t0) * 1e3


def _host_overhead_ms() -> float:
    """The host clock's excess over an event pair with nothing between (median of OVERHEAD_REPS): what a
    repetition's host clock exceeds its events by when nothing is hidden."""
    stream = _current_stream()
    return statistics.median(wall - events for events, wall in (_timed_pair(stream) for _ in range(OVERHEAD_REPS)))


def _honest_excess_ms(duration_ms: float) -> float:
    """The host clock's excess over the events for a plain GPU sleep of about `duration_ms` (median of
    HONEST_REPS; the sleep's length set from one timed sleep first)."""
    stream = _current_stream()
    probe_cycles = 1_000_000
    probe_ms, _ = _timed_pair(stream, lambda: _cuda_sleep(probe_cycles))
    cycles = max(1, int(probe_cycles * duration_ms / max(probe_ms, 1e-3)))
    pairs = (_timed_pair(stream, lambda: _cuda_sleep(cycles)) for _ in range(HONEST_REPS))
    return statistics.median(wall - events for events, wall in pairs)


def _capture(run, work, inputs, device, notes):
    """Capture one call into a CUDA graph; None (with a note) when the solution cannot be captured."""
    try:
        _refresh(work, inputs)
        stream = torch.cuda.Stream(device)
        stream.wait_stream(_current_stream(device))
        with torch.cuda.stream(stream):
            run(**work)  # a side-stream warm-up, as torch.cuda.graph requires
        _current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_outputs = run(**work)
        return graph.replay, static_outputs
    except Exception as e:  # noqa: BLE001 - any capture failure falls back to plain events
        notes.append(f"CUDA graph capture failed ({type(e).__name__}: {e}); timed with CUDA events instead")
        torch.cuda.synchronize(device)
        return None
