"""Solutions that hide part of their GPU work from the timing loop's CUDA events: test fixtures.

Each does `HIDDEN_WORK_MS` (default 1.0) of work on the caller's stream (a sleep kernel, after the honest base of
cheats.py) and, inside the timing loop but not on its last repetition, hides `HIDDEN_FRACTION` (default 0.05)
of it from the events:

| fixture | how |
|---|---|
| honest | hides nothing (the control) |
| rerecords_start | sleeps the hidden part, then records the repetition's start event again (read from `_time_gpu`'s locals) on the caller's stream, then the rest |
| start_from_thread | queues all its work; a thread records the start event on an idle side stream once the hidden part has run |
| end_from_thread | queues all its work; a thread records the end event (after the loop recorded it) on an idle side stream, the hidden part before the work ends |

`make_call(attack, work_ms, fraction)` gives the same attacks as a plain call for `kda_trace.timing.measure`
(tests/runner/test_hidden_work.py). Use as `--solution tests/runner/hidden_work.py::NAME` on a GPU.
"""

import os
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cheats import _base_outputs, supports  # noqa: E402, F401

_cycles_per_ms = {}


def cycles(ms: float) -> int:
    """torch.cuda._sleep cycles for `ms` milliseconds on this device (measured once per process)."""
    if "rate" not in _cycles_per_ms:
        torch.cuda._sleep(1000)  # loads the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        torch.cuda.synchronize()
        _cycles_per_ms["rate"] = 10_000_000 / start.elapsed_time(end)
    return max(1, int(ms * _cycles_per_ms["rate"]))


def _loop_frame():
    """The timing loop's frame (kda_trace.timing._time_gpu) on the caller's stack, or None."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "_time_gpu" and "start" in f.f_locals:
            return f
        f = f.f_back
    return None


def _record(event, stream) -> None:
    from kda_trace import timing

    timing._event_record(event, stream)  # the C record the loop uses (torch.cuda.Event.record would do too)


def _after_returning(then, at: float) -> None:
    """Run `then()` in a thread at host time `at` (perf_counter), letting the caller return first."""
    sys.setswitchinterval(1e-5)  # the loop polls its end event holding the GIL: ask for it often

    def body():
        while time.perf_counter() < at:
            time.sleep(min(1e-4, max(0.0, at - time.perf_counter())))
        then()

    threading.Thread(target=body, daemon=True).start()


def make_call(attack: str, work_ms: float, fraction: float):
    """A call of `work_ms` of GPU work (a sleep kernel) that hides `fraction` of it from the timing loop's events
    the way `attack` does ('honest' hides nothing); returns its input unchanged."""
    total, hidden = cycles(work_ms), cycles(work_ms * fraction)

    def call(x=None, **_):
        frame = _loop_frame()
        stream = torch.cuda.current_stream()
        if attack == "honest" or frame is None or frame.f_locals["i"] == frame.f_locals["reps"] - 1:
            torch.cuda._sleep(total)
        elif attack == "rerecords_start":
            torch.cuda._sleep(hidden)
            _record(frame.f_locals["start"], stream)
            torch.cuda._sleep(total - hidden)
        elif attack == "start_from_thread":
            start, t = frame.f_locals["start"], time.perf_counter()
            torch.cuda._sleep(total)
            side = torch.cuda.Stream()
            done = threading.Event()

            def rerecord():
                _record(start, side)
                done.set()

            _after_returning(rerecord, t + work_ms * fraction / 1e3)
            done.wait()  # the thread has ended its work when the call returns
        elif attack == "end_from_thread":
            end, t = frame.f_locals["end"], time.perf_counter()
            torch.cuda._sleep(total)
            side = torch.cuda.Stream()
            _after_returning(lambda: _record(end, side), t + work_ms * (1 - fraction) / 1e3)
        else:
            raise ValueError(attack)
        return x

    return call


def _solution(attack: str):
    def solve(**inputs):
        out = _base_outputs(**inputs)
        if torch.cuda.is_available() and any(isinstance(v, torch.Tensor) and v.is_cuda for v in inputs.values()):
            key = (attack, float(os.environ.get("HIDDEN_WORK_MS", "1.0")),
                   float(os.environ.get("HIDDEN_FRACTION", "0.05")))
            if key not in _calls:
                _calls[key] = make_call(*key)
            _calls[key]()
        return out

    solve.__name__ = attack
    return solve


_calls = {}
honest = _solution("honest")
rerecords_start = _solution("rerecords_start")
start_from_thread = _solution("start_from_thread")
end_from_thread = _solution("end_from_thread")
