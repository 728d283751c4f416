"""Compiling before anything is timed: the precompile pass of a GPU run.

A Triton solution compiles its kernels on its first call with each new specialization, and that is most of a cold
run's time when nothing is cached (H200 main job: 3 s per decode definition, 12 s for a prefill definition's
chunked kernels, 25-50 s per backward definition, one definition after the other). Before the run's workers are
given their first workload, the precompile pass calls each solution once on the input set A of every workload up to
PRECOMPILE_MAX_BYTES, in several processes of the solution at once (sandboxed as the run's own), and throws the outputs
away: the kernels they compile land in Triton's on-disk cache, which the run's solution processes then read. The
larger workloads follow, one at a time, for a solution that autotunes (PRECOMPILE_MAX_BYTES says why). Nothing
is timed or judged while it runs, nothing it does reaches a record, and a failure or a hang in it only means that
the run compiles that kernel itself (a process past the run's --timeout is killed). The first workload of each
definition goes first, and the definition's other workloads wait for it, so that two processes do not compile the
same kernels at once.

The pass's processes write to the run's Triton cache, where the run's processes find what they compiled. In them a
Triton autotuner compiles and runs each config once and times none (solution_host.tune_by_compiling_only): timings
taken beside the other processes would be disturbed (and a pass that timed them got through 197 of fla's 1084 calls
in its 300 s). The picks it leaves (`*.autotune.json`; fla keeps its picks on disk by default, FLA_CACHE_RESULTS)
are removed when it ends. The run's processes tune over kernels already compiled (a process's first call on a
definition has the GPU alone).
(A private cache merged afterwards was tried: on the H200 the run compiled the backward and forward kernels again
all the same, 32 s on kda_bwd_h32's first workload, for reasons not found.)
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

PRECOMPILE_MAX_BYTES = 2 << 30
"""Workloads whose inputs and outputs together are larger than this are called one at a time (the other processes
hold an input set each meanwhile), and only for a solution that autotunes: one whose process was asked to time
configs (`solution_host.tune_by_compiling_only`). An autotuner such as fla's compiles for each new shape: with
triton and fla on an H200, 178 kernels were compiled during the run when the pass left these workloads out (175 of
them fla's L2-norm kernels, all in five workloads over this size), 3 of 2263 with them in the pass. A solution that
only compiles rarely meets a new kernel there (the H200 main job: 3 of triton's 235, the same 3), and calling its
large workloads one after the other would lengthen the pass."""


STARTUP_S = 300.0
"""How long a precompile process may take to start (import the solution, make its CUDA context)."""
PRECOMPILE_MAX_S = 300.0
"""The pass ends after this long per solution it compiles for, whatever is left (a process still calling is
killed; `limit_s`): it saves compilation, and must not cost more than the compilation it saves. A solution whose
process cannot start is not tried again. What the pass leaves is compiled by the run's processes one at a time,
often in a turn with the GPU alone while the other workers wait. With triton and fla on an H200, a limit of 300 s
for both left 327 of the pass's 1084 calls, and fla's first calls then took 204 s, each with the GPU alone; at 300 s
each, it made its 1129 calls in 435 s (all but triton's 45 over PRECOMPILE_MAX_BYTES; triton's pass alone: 542
calls in 69 s), and fla's first calls took 178 s."""


def limit_s(solutions: int) -> float:
    """The pass's limit for `solutions` solutions (PRECOMPILE_MAX_S each)."""
    return PRECOMPILE_MAX_S * max(1, solutions)


def default_processes(device: str) -> int:
    """Processes of the precompile pass: none on the CPU (the interpreter compiles nothing), else all cores but two,
    up to 16. Compiling is the pass's work and it is bound by the CPU (8 processes on the H200 machine's 16 cores
    were busy 96% of its 87 s), and the run's workers only start their solutions' processes meanwhile."""
    if not device.startswith("cuda"):
        return 0
    return max(1, min(16, (os.cpu_count() or 2) - 2))


@dataclass
class PrecompileItem:
    definition: object  # schema.Definition
    workload: object  # schema.Workload
    spec: str
    name: str
    first: bool
    """The first of its (solution, definition): the others of that pair wait for it."""
    large: bool = False
    """Over PRECOMPILE_MAX_BYTES: called one at a time, and only for a solution that autotunes."""


def plan(tasks, size_of: Callable[[object], int], max_bytes: int = PRECOMPILE_MAX_BYTES) -> List[PrecompileItem]:
    """Every (solution, workload) of `tasks`, one solution after the other (in the order the tasks name them, so
    that the run can report each one's share of the pass's wall time): those whose bytes (`size_of(task)`: its
    inputs' and outputs') are at most `max_bytes`, the smallest workload of each (solution, definition) first; then
    the larger ones (`large`), smallest first; none of the built-in `reference` solution, which compiles nothing
    (its float64 references, many at once, would only take the GPU's memory)."""
    firsts, rest, large = {}, [], []
    for task in tasks:
        d, w = task.definition, task.workload
        size = size_of(task)
        for spec in task.solutions:
            if spec == "reference":
                continue
            item = (size, PrecompileItem(d, w, spec, task.names[spec], first=False))
            key = (spec, d.name)
            if size > max_bytes:
                item[1].large = True
                large.append(item)
            elif key not in firsts or size < firsts[key][0]:
                if key in firsts:
                    rest.append(firsts[key])
                firsts[key] = item
            else:
                rest.append(item)
    for _, item in firsts.values():
        item.first = True
    large.sort(key=lambda item: item[0])
    order = {spec: i for i, spec in enumerate(dict.fromkeys(spec for task in tasks for spec in task.solutions))}
    small = [item for _, item in firsts.values()] + [item for _, item in rest]
    small.sort(key=lambda item: order[item.spec])  # stable: each solution's firsts, then its others
    return small + [item for _, item in large]


def precompile(items: List[PrecompileItem], config, processes: int, pinned: Callable[[object], Dict[str, List[int]]],
               charge: Optional[Callable[[str, str, float], None]] = None,
               max_s: Optional[float] = None, ended: Optional[Dict[str, float]] = None) -> Tuple[int, int, int]:
    """Run the precompile calls of `items` in `processes` processes per solution, for at most `max_s` (default:
    `limit_s` of their solutions); the `large` ones one at a time, and only for a solution whose process said it
    autotunes. Returns (calls that ran, calls that failed, were cut off or not tried, large calls left to the run
    because their solution does not autotune). `pinned(workload)` gives the workload's stored input files
    (runner.pinned_files); `charge(definition, solution, seconds)` is told each call's wall time; `ended`, when given,
    gets per solution name the seconds from the pass's start to the end of that solution's last call."""
    import multiprocessing as mp

    from .sandbox import triton_cache_dir
    from .solution_host import SolutionHost

    if not items or processes <= 0:
        return 0, 0, 0
    todo: "queue.Queue[PrecompileItem]" = queue.Queue()
    for item in items:
        todo.put(item)
    firsts_done = {(i.spec, i.definition.name): threading.Event() for i in items if i.first}
    counts = {"ran": 0, "failed": 0, "left": 0}
    autotuning: set = set()  # solutions whose processes said they autotune
    answered = {item.spec: threading.Event() for item in items}  # a call of the solution has ended
    probes: Dict[str, PrecompileItem] = {}  # a solution with large workloads only: its first one finds out
    with_small = {item.spec for item in items if not item.large}
    for item in items:
        if item.large and item.spec not in with_small:
            probes.setdefault(item.spec, item)
    one_large = threading.Lock()
    if max_s is None:
        max_s = limit_s(len({item.spec for item in items}))
    began = time.monotonic()
    ends = began + max_s
    unstartable: set = set()
    lock = threading.Lock()
    running: Dict[int, Tuple[SolutionHost, float]] = {}  # slot -> (its host, the deadline of what it does now)
    ctx = mp.get_context("spawn")
    device = (config.devices or [config.device])[0]  # "cuda:0", not "cuda": a process sets its device by index
    cache = triton_cache_dir()
    tuned_before = tuning_results(cache)

    def watched(slot: int, host: SolutionHost, allowed_s: float, action: Callable[..., Any], **fields) -> Any:
        with lock:
            running[slot] = (host, time.monotonic() + allowed_s)
        try:
            return action(**fields)
        finally:
            with lock:
                running.pop(slot, None)

    def work(slot: int) -> None:
        hosts: Dict[str, SolutionHost] = {}
        try:
            while True:
                try:
                    item = todo.get_nowait()
                except queue.Empty:
                    return
                if time.monotonic() > ends or item.spec in unstartable:
                    with lock:
                        counts["failed"] += 1
                    continue
                probe = probes.get(item.spec) is item
                if item.large and not probe:  # whether its solution autotunes is known once one of its calls ended
                    answered[item.spec].wait(max(0.0, ends - time.monotonic()))
                if item.large and not probe and item.spec not in autotuning:
                    with lock:
                        counts["left"] += 1
                    continue
                first = firsts_done.get((item.spec, item.definition.name))
                if not item.first and first is not None:
                    first.wait(config.timeout)
                host = hosts.get(item.spec)
                if host is None:
                    host = hosts[item.spec] = SolutionHost(ctx, item.spec, device, config.trust_code,
                                                           config.dataset_root, lambda spec, phase: None,
                                                           code_digest=config.code_digest)
                if item.large and not one_large.acquire(timeout=max(0.0, ends - time.monotonic())):
                    with lock:
                        counts["failed"] += 1
                    continue
                started = time.monotonic()
                ok = False
                try:
                    if not host.alive():  # started apart: the run's own allowance for a start, not --timeout
                        try:
                            watched(slot, host, STARTUP_S, host.start)
                        except Exception:  # noqa: BLE001 - e.g. no room on the GPU for another CUDA context
                            unstartable.add(item.spec)
                            raise
                    reply = watched(slot, host, config.timeout, host.request, kind="precompile",
                                    definition=item.definition.model_dump_json(),
                                    workload=item.workload.model_dump_json(), name=item.name, seed=config.seed,
                                    input_files=pinned(item.workload))
                    ok = reply.get("kind") == "precompiled"
                    if reply.get("autotuned"):
                        with lock:
                            autotuning.add(item.spec)
                except Exception:  # noqa: BLE001 - HostDied, or a process that would not start: the run compiles it
                    host.stop()
                finally:
                    answered[item.spec].set()
                    if item.large:
                        one_large.release()
                    with lock:
                        counts["ran" if ok else "failed"] += 1
                    if item.first:
                        firsts_done[(item.spec, item.definition.name)].set()
                    finished = time.monotonic()
                    if charge is not None:
                        charge(item.definition.name, item.name, finished - started)
                    if ended is not None:
                        with lock:
                            ended[item.name] = max(ended.get(item.name, 0.0), finished - began)
        finally:
            for host in hosts.values():
                host.close()

    threads = [threading.Thread(target=work, args=(slot,), daemon=True, name=f"kda-trace precompile {slot}")
               for slot in range(processes)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.5)
        with lock:
            late = [host for host, deadline in running.values() if time.monotonic() > min(deadline, ends)]
        for host in late:  # a hang: its process killed, the thread goes on with the next call
            if host.process is not None and host.process.is_alive():
                host.process.kill()
    for path in tuning_results(cache) - tuned_before:
        try:
            os.unlink(path)
        except OSError:
            pass
    return counts["ran"], counts["failed"], counts["left"]


def tuning_results(cache: str) -> set:
    """The autotuning results (`*.autotune.json`) in Triton cache `cache`."""
    found = set()
    for root, _, files in os.walk(cache):
        found.update(os.path.join(root, f) for f in files if f.endswith(".autotune.json"))
    return found
