"""Where a run's wall time goes, and how much of it is left.

`RunProfile` turns the workers' phase messages into seconds per (family, category, solution) and keeps each
evaluation's wall time; the run writes it as `profile.json` beside the traces (benchmarks/bench_runner.py prints
it). `estimate_seconds` is a prior cost of one evaluation from the workload's size; `Eta` scales those priors by
what the finished evaluations took, so that one slow family early in a run does not make the estimate wrong by
the count of the fast ones left.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .call_results import HOST_STARTING, WAITING_FOR_GPU

CATEGORIES = ("start-up", "precompile", "inputs", "reference", "first call", "calls", "transfer", "judge", "waiting")
"""start-up: worker and solution processes starting, a solution's build. precompile: the precompile pass's
calls (kda_trace/precompile.py: compilation, in several processes at once). inputs: making input sets (judge and
solution processes). reference: the definition's reference on set A, set B and a drawn timed repetition, and
its own timing. first call: a solution's first call on a definition in its process (Triton compiles there).
calls: every other solution call (the timing loop, the check call). transfer: requests and outputs between
processes. judge: loading and comparing outputs, digests. waiting: a worker that shares its GPU, waiting for its
turn (gpu_turns.py)."""

_JUDGE_PHASES = {
    "starting": "start-up", HOST_STARTING: "start-up", "build": "start-up",
    "inputs": "inputs", "inputs: checksums": "inputs",
    "reference": "reference", "reference: timing": "reference", "judge: reference on a timed repetition": "reference",
    "run": "calls", "held-back call": "calls", "timing": "calls", "check": "calls",
    "request": "transfer", "save": "transfer", "precompile": "precompile", WAITING_FOR_GPU: "waiting",
}


def family_of(definition: str) -> str:
    """kda_bwd_fused_h96_d128_v_last_safe_gate -> kda_bwd_fused (the name up to its head count or dims)."""
    return re.split(r"_(?:h\d+|qk\d+|d\d+)(?:_|$)", definition, maxsplit=1)[0]


def category_of(phase: str) -> str:
    if phase in _JUDGE_PHASES:
        return _JUDGE_PHASES[phase]
    return "judge" if phase.startswith("judge") else "calls"


class RunProfile:
    """Seconds per (family, category, solution name or '-') and per evaluation, from phase changes."""

    def __init__(self) -> None:
        self.seconds: Dict[Tuple[str, str, str], float] = defaultdict(float)
        self.evaluations: List[Dict[str, Any]] = []
        self._first_calls: set = set()
        self._by_workload: Dict[Tuple[str, str], Dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.eta_samples: List[Tuple[float, float]] = []
        """(seconds since the run began, the ETA's remaining seconds then), at every evaluation's end."""
        self.pass_info: Optional[Dict[str, Any]] = None
        """The precompile pass's wall seconds and when each solution's calls ended (`precompiled`)."""

    def charge(self, worker: str, definition: Optional[str], solution: Optional[str], phase: str,
               seconds: float, workload: Optional[str] = None) -> None:
        """`seconds` spent by `worker` in `phase` (for `solution`, or the judge's own work when None), on
        `workload` (a uuid) when given: `evaluated` then lists that workload's seconds per category."""
        if phase == "idle":
            return
        category = category_of(phase)
        if category == "calls" and phase == "run" and solution is not None:
            key = (worker, solution, definition)
            if key not in self._first_calls:
                self._first_calls.add(key)
                category = "first call"
        family = family_of(definition) if definition else "-"
        self.seconds[(family, category, solution or "-")] += max(0.0, seconds)
        if definition and workload:
            self._by_workload[(definition, workload)][category] += max(0.0, seconds)

    def evaluated(self, definition: str, uuid: str, seconds: float, estimate: float) -> None:
        spent = self._by_workload.pop((definition, uuid), {})
        self.evaluations.append({"definition": definition, "workload": uuid, "seconds": round(seconds, 3),
                                 "estimate": round(estimate, 3),
                                 "categories": {c: round(spent[c], 3) for c in CATEGORIES if spent.get(c)}})

    def eta_sample(self, elapsed_s: float, remaining_s: float) -> None:
        self.eta_samples.append((round(elapsed_s, 2), round(remaining_s, 2)))

    def totals(self) -> Dict[str, float]:
        out: Dict[str, float] = defaultdict(float)
        for (_, category, _), s in self.seconds.items():
            out[category] += s
        return dict(out)

    def summary_line(self, wall_s: float, workers: int) -> str:
        """One line: the wall time and where the workers' time went."""
        totals = self.totals()
        parts = ", ".join(f"{c} {_fmt(totals[c])}" for c in CATEGORIES if totals.get(c, 0.0) >= 0.5)
        per = f" (summed over {workers} workers)" if workers > 1 else ""
        return f"wall time {_fmt(wall_s)}; the workers' time{per}: {parts}"

    def precompiled(self, seconds: float, ended: Dict[str, float]) -> None:
        """The precompile pass took `seconds` of wall time; `ended`: per solution name, the seconds from the pass's
        start to the end of that solution's last call (the pass calls the solutions one after the other)."""
        self.pass_info = {"seconds": round(seconds, 3), "ended": {k: round(v, 3) for k, v in ended.items()}}

    def first_use_line(self, wall_s: Optional[float] = None) -> str:
        """Each solution's first use, reported apart from its evaluations (first_use_line of the profile's JSON)."""
        return first_use_line(self.to_json(wall_s or 0.0, 0, ""), wall_s)

    def to_json(self, wall_s: float, workers: int, device: str) -> Dict[str, Any]:
        rows = [{"family": f, "category": c, "solution": s, "seconds": round(v, 3)}
                for (f, c, s), v in sorted(self.seconds.items())]
        return {"wall_s": round(wall_s, 3), "workers": workers, "device": device, "categories": list(CATEGORIES),
                "phases": rows, "evaluations": self.evaluations, "eta": self.eta_samples,
                "precompile": self.pass_info}

    def write(self, path: Path, wall_s: float, workers: int, device: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(wall_s, workers, device), indent=1) + "\n")


def eta_accuracy(profile: Dict[str, Any], from_s: float = 60.0, until_left_s: float = 30.0) -> Optional[Tuple[float, float, int]]:
    """For a run that finished: (lowest, highest) ratio of the ETA's remaining time to the real remaining time
    (the wall time at the end minus the sample's time), over the samples from `from_s` seconds into the run until
    `until_left_s` before its end, and their count; None without such samples."""
    wall = profile["wall_s"]
    ratios = [eta / (wall - t) for t, eta in profile.get("eta") or [] if t >= from_s and wall - t >= until_left_s]
    if not ratios:
        return None
    return min(ratios), max(ratios), len(ratios)


def pass_shares(ended: Dict[str, float]) -> Dict[str, float]:
    """Each solution's share of the precompile pass's wall time: the pass calls the solutions one after the other,
    so a solution's share runs from the end of the previous one's calls (the pass's start for the first) to the end
    of its own."""
    shares, before = {}, 0.0
    for name, end in sorted(ended.items(), key=lambda item: item[1]):
        shares[name] = max(0.0, end - before)
        before = max(before, end)
    return shares


def first_use_line(profile: Dict[str, Any], wall_s: Optional[float] = None) -> str:
    """One line, per solution of a run's profile (RunProfile.to_json): its first use, where it compiles and
    autotunes, reported apart from its evaluations: its share of the precompile pass's wall time (pass_shares; with
    its calls' seconds summed over the pass's processes) and its first call on each definition in each worker (each
    has the GPU alone: wall time). With `wall_s`, the run's wall time less each one's first use. '' when nothing
    was charged there."""
    spent: Dict[str, List[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in profile.get("phases", []):
        if row["solution"] != "-" and row["category"] in ("precompile", "first call"):
            spent[row["solution"]][row["category"] == "first call"] += row["seconds"]
    if not spent:
        return ""
    shares = pass_shares((profile.get("precompile") or {}).get("ended") or {})

    def said(solution: str, pre: float, first: float) -> str:
        parts = []
        if solution in shares:
            parts.append(f"{_fmt(shares[solution])} of the precompile pass's wall time ({_fmt(pre)} of calls over "
                         "its processes)")
        elif pre >= 0.5:
            parts.append(f"{_fmt(pre)} of precompile calls over the pass's processes")
        return " and ".join(parts + [f"{_fmt(first)} of first calls"])

    line = "first use (compiling, autotuning): " + "; ".join(
        f"{solution} {said(solution, pre, first)}" for solution, (pre, first) in sorted(spent.items()))
    if wall_s:
        less = {solution: wall_s - shares.get(solution, 0.0) - first for solution, (_, first) in spent.items()}
        line += "\nthe run's wall time less each one's first use: " + "; ".join(
            f"less {solution}'s, {_fmt(max(0.0, t))}" for solution, t in sorted(less.items()))
    return line


def _fmt(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


# ---------------------------------------------------------------------------- the prior cost of an evaluation

GPU_PRIOR = {"evaluation_s": 1.1, "s_per_gb": 2.0, "backward_s_per_gb": 4.7, "startup_s": 30.0,
             "first_call_s": 0.5, "first_backward_call_s": 2.0, "alone_evaluation_s": 2.5, "alone_s_per_gb": 3.1}
"""Seconds on a GPU for one solution on one workload, as a worker of three sharing the GPU sees them (its turns'
waiting included; the ETA divides by the workers): a fixed part, and per GB of the bytes the definition's cost says
a call moves (the reference, input making, the outputs' transfer and comparison all scale with it); a solution's
first call on a definition loads what the precompile pass compiled. A workload that takes the GPU alone
(runner.needs_gpu_alone) has terms of its own: it runs while the other workers wait, so its worker-seconds are
about the workers times its own. Least squares on the main job's first 490 evaluations on an H200
(benchmarks/results/2026-11-29-h200/runner-main-job-490-of-587.json; 412 shared forward, 28 shared backward, 50
alone); replayed on that run, the ETA is 0.68-1.25x the projected remaining time from its first record on.
`startup_s` is the time before the precompile pass; the pass itself is estimated from its plan
(PRECOMPILE_CALL_S)."""
PRECOMPILE_CALL_S = 1.75
"""Seconds of one precompile call (a first call that compiles, on a GPU machine's core): the main job's 542 calls
took 68 s in 14 processes on the H200 machine. The ETA adds calls x this / processes to its start-up allowance."""
CPU_PRIOR = {"evaluation_s": 2.0, "s_per_gb": 400.0, "backward_s_per_gb": 2000.0, "startup_s": 15.0,
             "first_call_s": 2.0, "first_backward_call_s": 5.0}
"""The same on the CPU, where Triton kernels run in the interpreter (the smoke workloads, a few MB each)."""
REFERENCE_SHARE = 0.4
"""The part of the per-GB time that is the judge's reference (made once per workload, whatever the number of
solutions); the rest is each solution's."""


def estimate_seconds(nbytes: Optional[float], gpu: bool, solutions: int, first: bool = False,
                     backward: bool = False, alone: bool = False) -> float:
    """A prior wall time of one workload with `solutions` solutions, from the bytes a call moves (the
    definition's cost; 0 when it declares none); `first`: the first workload of its definition in the run;
    `alone`: it takes the GPU alone (GPU only)."""
    prior = GPU_PRIOR if gpu else CPU_PRIOR
    alone = alone and gpu
    per_gb = prior["alone_s_per_gb" if alone else "backward_s_per_gb" if backward else "s_per_gb"]
    scaled = (nbytes or 0.0) / 1e9 * per_gb
    compile_s = prior["first_backward_call_s" if backward else "first_call_s"] if first else 0.0
    per_solution = prior["alone_evaluation_s" if alone else "evaluation_s"] + (1 - REFERENCE_SHARE) * scaled + compile_s
    return REFERENCE_SHARE * scaled + solutions * per_solution


class Eta:
    """Remaining time: the estimates of what is left, scaled by actual / estimated of what is done. The scale
    starts at 1 and is shrunk towards it by `prior_s` seconds of pseudo-evidence, so early outliers move it
    little; a start-up allowance counts until the first evaluation ends."""

    def __init__(self, total_estimate: float, startup_s: float, workers: int = 1, prior_s: float = 60.0):
        self.left = total_estimate
        self.workers = max(1, workers)
        self.startup_s = startup_s
        self.prior_s = prior_s
        self.done_estimate = 0.0
        self.done_actual = 0.0
        self.started = time.monotonic()
        self.first_done: Optional[float] = None
        self.in_flight: Dict[Any, Tuple[float, float]] = {}  # key -> (estimate, start)

    def precompile(self, calls: int, processes: int, max_s: float, call_s: float = PRECOMPILE_CALL_S) -> None:
        """The precompile pass's plan: its estimated length, at most the pass's own limit `max_s`
        (precompile.limit_s), joins the start-up allowance."""
        self.startup_s += min(calls * call_s / max(1, processes), max_s)

    def begin(self, key: Any, estimate: float) -> None:
        self.in_flight[key] = (estimate, time.monotonic())

    def finish(self, key: Any, estimate: float, actual: float) -> None:
        self.in_flight.pop(key, None)
        self.left = max(0.0, self.left - estimate)
        self.done_estimate += estimate
        self.done_actual += actual
        if self.first_done is None:
            self.first_done = time.monotonic()

    def scale(self) -> float:
        return (self.done_actual + self.prior_s) / (self.done_estimate + self.prior_s)

    def remaining(self, now: Optional[float] = None) -> float:
        now = time.monotonic() if now is None else now
        scale = self.scale()
        left = self.left * scale
        for estimate, start in self.in_flight.values():  # what a running evaluation has already spent
            left -= min(now - start, estimate * scale)
        left = max(0.0, left) / self.workers
        if self.first_done is None:
            left += max(0.0, self.startup_s - (now - self.started))
        return left


def spread_by_cost(tasks: List[Any], estimates: List[float], alone: Optional[List[bool]] = None) -> List[Any]:
    """The tasks in the order that lets workers pulling from one queue finish together: largest estimate first
    (longest processing time first; a worker that falls behind takes the small ones at the end). Tasks that take
    their GPU alone (`alone`, runner.needs_gpu_alone) go before all others: one at a time whatever their order, they
    then follow each other instead of each waiting for the tasks that the other workers began meanwhile. Ties keep
    the dataset's order."""
    first = alone or [False] * len(tasks)
    order = sorted(range(len(tasks)), key=lambda i: (not first[i], -estimates[i]))
    return [tasks[i] for i in order]


def simulate_queue(costs: List[float], workers: int) -> List[float]:
    """Each worker's busy time when `workers` take tasks of `costs` (in order) from one queue as they free up."""
    busy = [0.0] * workers
    for cost in costs:
        i = min(range(workers), key=lambda w: busy[w])
        busy[i] += cost
    return busy



PYTHON_PROFILE_ENV = "KDA_TRACE_PYTHON_PROFILE"
"""A directory: the run's worker and solution processes run under cProfile and write `<role>-<pid>.prof` there
(benchmarks/bench_runner.py --python-profile), at the latest every PYTHON_PROFILE_EVERY_S and when they end."""
PYTHON_PROFILE_EVERY_S = 10.0


class PythonProfile:
    """cProfile of this process when PYTHON_PROFILE_ENV names a directory; nothing otherwise."""

    def __init__(self, role: str):
        import os

        folder = os.environ.get(PYTHON_PROFILE_ENV)
        self.profiler = self.path = None
        if folder:
            import cProfile

            import secrets

            # the pid alone is not enough: every sandboxed solution process is pid 2 in its own namespace
            self.path = Path(folder) / f"{role}-{os.getpid()}-{secrets.token_hex(4)}.prof"
            self.profiler = cProfile.Profile()
            self.profiler.enable()
        self.written = time.monotonic()

    def checkpoint(self) -> None:
        """Write the statistics so far, when the last write is PYTHON_PROFILE_EVERY_S old."""
        if self.profiler is not None and time.monotonic() - self.written > PYTHON_PROFILE_EVERY_S:
            self.write()

    def write(self) -> None:
        if self.profiler is not None:
            self.profiler.dump_stats(str(self.path))
            self.written = time.monotonic()
