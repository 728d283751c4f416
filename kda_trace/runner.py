"""Solutions x workloads -> trace records, with every evaluation isolated in a worker process.

The main process plans the work (definitions, workloads by size, shard, resume, unsupported pairs),
starts one worker per device (spawned, so a crash never takes the run down), hands each worker one
workload at a time and writes every record to `<out>/traces/<op_type>/<definition>.jsonl` the moment it
arrives (flushed). A worker announces each phase (inputs, reference, build, run, timing) before it
starts it; if the worker dies (segfault, `os._exit`, CUDA fault) or a phase outlives `--timeout`, the
main process records the failure against that phase's solution, starts a fresh worker and goes on with
the rest of the workload.

In a worker, per workload: inputs are made once from the seed (set A) and from a secret random seed (set B,
recorded afterwards); the reference runs on fresh copies of both; then each solution runs on its
own fresh copy of A, its outputs are checked (count, shape, dtype, mutated inputs, in-place contract,
numerics), and a correct solution is timed: every timed repetition runs on inputs of its own (from a secret
seed the judge gives just before it), the last one on set B, whose outputs are checked again (so a solution that replays its first
result fails). One other repetition, drawn after the timing, is checked through the digest of its outputs
(`check_timed_repetition`): a solution that does less work in the repetitions it guesses are not checked is
caught.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import multiprocessing as mp
import os
import secrets
import shutil
import signal
import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from .call_results import (  # noqa: F401 - re-exported: the runner's callers and tests use these names
    HIDDEN_WORK_LOG,
    HOST_STARTING,
    OUT_OF_GPU_MEMORY_HINT,
    WAITING_FOR_GPU,
    describe_exit,
    normalize_outputs,
    to_host,
)
from .call_results import is_fatal_cuda_error as _is_fatal_cuda_error
from .call_results import short_traceback as _short_traceback
from .environment import SourceChanged
from .schema import (
    Correctness,
    Definition,
    Environment,
    Evaluation,
    EvaluationStatus,
    OutputMetrics,
    Performance,
    Tolerance,
    Trace,
    Workload,
)

S = EvaluationStatus
SEED_BITS = 62
"""Set B's seed and the timing loop's seeds are drawn from the OS (secrets): a solution cannot make those inputs
ahead of time. They are recorded in the trace once the evaluation is over."""
@dataclass
class RunConfig:
    """Everything a run needs; picklable (sent to the workers)."""

    dataset_root: Path
    out: Path
    device: str
    seed: int
    timeout: float
    trust_code: bool = False
    tolerances: Dict[str, Tolerance] = field(default_factory=dict)
    timing: Any = None  # timing.TimingConfig
    devices: List[str] = field(default_factory=list)
    """One worker per entry (default: [device])."""
    code_digest: Optional[str] = None
    """environment.code_digest() when the run started: a worker or solution process whose kda_trace source on
    disk differs (changed during the run, e.g. by a solution) refuses to start."""
    input_files: Dict[str, Any] = field(default_factory=dict)
    """inputs.input_files of the run's workloads when it started, before any solution code ran: a worker
    refuses a stored input file changed since (inputs.pin_input_files)."""
    gpu_turns_dir: Optional[str] = None
    """Where the workers that share a GPU take their turns (gpu_turns.py); set by the runner when a GPU has more
    than one worker."""
    precompile: int = 0
    """Processes per solution of the precompile pass before the first workload (kda_trace/precompile.py); 0: none."""
    inputs_on_host: Optional[bool] = None
    """Keep no input set on the GPU between calls: the judge keeps the inputs it reads and the reference outputs
    in host memory, and each solution's process makes an input set again from its seed whenever it reads it, so
    the GPU holds one input set at a time. None: only when a GPU's input set and reference outputs together are
    larger than HOST_INPUTS_FRACTION of its memory (the stress workloads)."""


ALONE_SHARE = 1 / 24
"""On a GPU shared by several workers, a workload whose inputs and outputs together are larger than this fraction of
a worker's share of the GPU's memory (its memory / the workers on it) is evaluated with the GPU to its worker alone:
a worker and its solution's process hold up to about 12 input sets' worth at once (HOST_INPUTS_FRACTION), and half
of a share is left for what the other workers' processes keep. H200 with 3 workers: 2 GB. The large workloads' long
steps (a reference or a comparison of several seconds) would also keep a worker that asks for the GPU alone waiting
for them: sharing them (up to 85% of the GPU's memory by 12 x their bytes, the large ones beside the small ones) was
no faster on an H200 (ETA 14.0 against 13.0 min) and flagged an honest kernel's timing. A workload that runs out of
memory while sharing is evaluated again alone."""


class GpuAloneNeeded(Exception):
    """A task ran out of GPU memory, or a solution's timing was flagged for work hidden from its CUDA events
    (HIDDEN_WORK_LOG), while its worker shared the GPU: the worker evaluates it again from the start, alone
    (worker_main), for the solutions not yet recorded. `flagged`: the record of the flag, which stands unless the
    evaluation alone passes (other workers' GPU work can trip that check; a cheat gains nothing from the second
    evaluation, which is checked alone). `on_host`: it ran out of GPU memory alone, with its input sets on the GPU:
    the next evaluation keeps them in host memory (RunConfig.inputs_on_host)."""

    def __init__(self, what: str, detail: str, solution: Optional[str] = None, flagged: Optional[Trace] = None,
                 on_host: bool = False):
        super().__init__(f"{what}: {detail}")
        self.what, self.detail, self.solution, self.flagged = what, detail, solution, flagged
        self.on_host = on_host


@dataclass
class StartSolutions:
    """A message to a worker: start the processes of these solution specs now (while the precompile pass runs)."""

    specs: List[str]


@dataclass
class Task:
    """One workload and the solutions still to evaluate on it."""

    definition: Definition
    workload: Workload
    solutions: List[str]
    """Solution specs (as given on the command line)."""
    names: Dict[str, str]
    """spec -> solution name."""
    inputs_on_host: Optional[bool] = None
    """Where this task's input sets are kept, over RunConfig.inputs_on_host (set for a task evaluated again after it
    ran out of GPU memory alone)."""


HOST_INPUTS_FRACTION = 1 / 10
"""An input set and its outputs larger together than this fraction of the GPU's memory are kept off the GPU
(RunConfig.inputs_on_host). On the GPU, the worker holds two reference outputs, and a drawn timed repetition's
input set while it makes that repetition's reference outputs; each solution's process two input sets, a copy
per call, the outputs and their snapshot: with a chunked kernel's workspace, 10 or more input sets' worth. Kept
on the GPU, the stress workloads ran out of memory on a 150 GB H200: the 17.5 GB prefill input sets, and the decode
pools of 8.7 GB, which the outputs repeat (so the outputs count too: the inputs alone are under 1/10). The largest
non-stress prefill (8.2 GB with its outputs, 96 heads x 65536 tokens) stays on an 80 GB H100. A task that runs out
of GPU memory with the GPU alone and its sets on it, before its timing, is evaluated again with them in host memory
(the H200 main job's 14.5 GB chunk-states workload cbb442e0 ran out so once, under the three workers' default)."""


def declared_bytes(d: Definition, specs: Dict[str, Any], w: Workload) -> int:
    """The bytes of `specs` (d.inputs or d.outputs) at a workload's axes, by their shapes and dtypes (a spec
    without a shape, a scalar, counts 0)."""
    from .inputs import torch_dtype

    total = 0
    for spec in specs.values():
        shape = d.shape_of(spec, w.axes)
        if shape is not None:
            total += math.prod(shape) * torch_dtype(spec.dtype).itemsize
    return total


def task_bytes(task: "Task") -> int:
    """The declared bytes of a task's inputs and outputs together."""
    d, w = task.definition, task.workload
    return declared_bytes(d, d.inputs, w) + declared_bytes(d, d.outputs, w)


def needs_gpu_alone(task: "Task", device: str, workers_on_device: int) -> bool:
    """Whether the task is too large to share `device`'s memory with the other workers on it (ALONE_SHARE)."""
    if not device.startswith("cuda") or workers_on_device <= 1:
        return False
    import torch

    room = torch.cuda.get_device_properties(device).total_memory / workers_on_device
    return task_bytes(task) > ALONE_SHARE * room


def keeps_on_host(input_bytes: int, output_bytes: int, gpu_bytes: int) -> bool:
    """The default of RunConfig.inputs_on_host on a GPU of `gpu_bytes` (HOST_INPUTS_FRACTION)."""
    return input_bytes + output_bytes > HOST_INPUTS_FRACTION * gpu_bytes


def judged_inputs(d: Definition, inputs: Dict[str, Any]) -> Dict[str, Any]:
    """The inputs the judge still reads once the references are made (WorkerContext.correctness): cu_seqlens, the
    in-place inputs (for their untouched slots) and the scalars. Dropping the rest frees two input sets (on a
    stress workload, up to 52 GB) while the solutions' processes run."""
    from .compare import cu_seqlens_input

    keep = set(d.inplace.values()) | {cu_seqlens_input(d)}
    return {n: v for n, v in inputs.items() if n in keep or not hasattr(v, "dtype")}


def call_reference(d: Definition, reference: Callable[..., Any], inputs: Dict[str, Any],
                   sync: Callable[[], None] = lambda: None) -> Tuple[Dict[str, Any], float]:
    """(the reference's outputs by name on `inputs`, its wall time in ms between two `sync()`s). It gets copies of
    the inputs it updates in place (the judge keeps the originals) and the others as they are (a reference only
    reads them, and a second copy of a stress workload's inputs on the GPU is a second 26 GB). ValueError when
    it does not return the definition's outputs."""
    import torch

    updated = set(d.inplace.values())
    args = {n: v.clone() if n in updated and isinstance(v, torch.Tensor) else v for n, v in inputs.items()}
    sync()
    t0 = time.perf_counter()
    result = reference(**args)
    sync()
    ms = (time.perf_counter() - t0) * 1e3
    del args
    out, why = normalize_outputs(d, result)
    if out is None:
        raise ValueError(f"reference {why}")
    return out, ms


def tensor_bytes(values: Dict[str, Any]) -> int:
    import torch

    return sum(v.numel() * v.element_size() for v in values.values() if isinstance(v, torch.Tensor))


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def trace_path(out: Path, definition: Definition) -> Path:
    """Where records of a definition go."""
    return Path(out) / "traces" / definition.op_type / f"{definition.name}.jsonl"


def in_shard(definition: str, uuid: str, shard: Optional[Tuple[int, int]]) -> bool:
    """Whether a workload belongs to shard (I, N): a stable hash of (definition, uuid) modulo N."""
    if shard is None:
        return True
    index, count = shard
    h = int.from_bytes(hashlib.sha256(f"{definition}/{uuid}".encode()).digest()[:8], "little")
    return h % count == index


def select_workloads(workloads: Iterable[Workload], size: str) -> List[Workload]:
    """`smoke`: workloads tagged smoke; `all`: everything but stress; `stress`: everything; `stress-only`: the
    workloads tagged stress."""
    if size == "smoke":
        return [w for w in workloads if "smoke" in w.tags]
    if size == "stress-only":
        return [w for w in workloads if "stress" in w.tags]
    if size == "all":
        return [w for w in workloads if "stress" not in w.tags]
    return list(workloads)


def _record_keys(out: Path):
    """(key, status) of every readable record in `<out>/traces`, key = (definition, workload uuid, solution)."""
    for path in sorted((Path(out) / "traces").glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
                yield (rec["definition"], rec["workload"]["uuid"], rec["solution"]), rec["evaluation"]["status"]
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a torn last line from an interrupted run: that pair runs again


def finished_keys(out: Path, rerun: Set[str] = frozenset()) -> Set[Tuple[str, str, str]]:
    """(definition, workload uuid, solution) of every record already in `<out>/traces` whose latest record's status
    is not in `rerun` (kda-trace run --resume --rerun STATUS)."""
    latest = dict(_record_keys(out))
    return {key for key, status in latest.items() if status not in rerun}


def rerun_keys(out: Path, rerun: Set[str]) -> Set[Tuple[str, str, str]]:
    """The keys whose latest record's status is in `rerun`: evaluated again, their old records replaced."""
    latest = dict(_record_keys(out))
    return {key for key, status in latest.items() if status in rerun}


class TraceWriter:
    """Appends records to per-definition JSONL files, flushed after every record (an interrupted run keeps what
    finished). `close` writes each file again from memory: what it held before this run, then this run's
    records, so that nothing a solution's process wrote into a trace file while the run went on survives."""

    def __init__(self, out: Path, replace: Set[Tuple[str, str, str]] = frozenset()):
        self.out = Path(out)
        self._files: Dict[str, Any] = {}
        self._kept: Dict[str, Tuple[Path, bytes, List[str]]] = {}
        self._replace = replace  # keys evaluated again (--rerun): close drops their earlier records
        self._written: Set[Tuple[str, str, str]] = set()

    def write(self, definition: Definition, trace: Trace) -> None:
        f = self._files.get(definition.name)
        line = trace.model_dump_json() + "\n"
        if f is None:
            path = trace_path(self.out, definition)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._kept[definition.name] = (path, path.read_bytes() if path.exists() else b"", [])
            f = self._files[definition.name] = open(path, "a", encoding="utf-8")
        self._kept[definition.name][2].append(line)
        self._written.add((trace.definition, trace.workload.uuid, trace.solution))
        f.write(line)
        f.flush()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
        gone = self._replace & self._written
        for path, before, lines in self._kept.values():
            if gone:
                before = b"".join(line for line in before.splitlines(keepends=True) if _key_of(line) not in gone)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(before + "".join(lines).encode("utf-8"))
            os.replace(tmp, path)
        self._kept.clear()


def _key_of(line: bytes):
    """The (definition, workload uuid, solution) of a trace line, None if unreadable (kept as it is)."""
    try:
        rec = json.loads(line)
        return rec["definition"], rec["workload"]["uuid"], rec["solution"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
        return None


def make_record(definition: Definition, workload: Workload, solution: str, status: S, environment: Environment,
                log: str = "", correctness: Optional[Correctness] = None,
                performance: Optional[Performance] = None) -> Trace:
    return Trace(definition=definition.name, workload=workload, solution=solution,
                 evaluation=Evaluation(status=status, environment=environment, timestamp=now_iso(), log=log,
                                       correctness=correctness, performance=performance))


# ============================================================================ worker side


def check_outputs(definition: Definition, outputs: Dict[str, Any], axes: Dict[str, int],
                  device: Optional[str] = None) -> Tuple[Optional[S], str]:
    """Types, devices, shapes and dtypes of a solution's outputs: (status, message) on the first problem."""
    import torch

    from .inputs import torch_dtype

    for name, spec in definition.outputs.items():
        value = outputs[name]
        if not isinstance(value, torch.Tensor):
            return S.INCORRECT_SHAPE, f"output {name!r} is a {type(value).__name__}, not a tensor"
        if device is not None and value.device.type != torch.device(device).type:
            return S.RUNTIME_ERROR, f"output {name!r} is on {value.device}, the inputs were on {device}"
        want = definition.shape_of(spec, axes) or []
        if list(value.shape) != want:
            return S.INCORRECT_SHAPE, f"output {name!r} has shape {list(value.shape)}, expected {want} {spec.shape}"
    for name, spec in definition.outputs.items():
        if outputs[name].dtype != torch_dtype(spec.dtype):
            return S.INCORRECT_DTYPE, f"output {name!r} has dtype {outputs[name].dtype}, expected {spec.dtype.value}"
    return None, ""


class WorkerContext:
    """State kept by a worker across tasks: compiled references, built solutions, environment."""

    def __init__(self, config: RunConfig, device: str, notify: Callable[[Optional[str], str], None]):
        from . import environment
        from .platform import ensure_triton_can_run

        environment.check_code_digest(config.code_digest)
        ensure_triton_can_run(device)
        if device.startswith("cuda"):
            import torch

            torch.cuda.set_device(torch.device(device))
        self.config, self.device, self._notify = config, device, notify
        self.environment = environment.capture(device, config.seed, config.dataset_root)
        self.references: Dict[str, Any] = {}
        self.hosts: Dict[str, Any] = {}
        """Solution spec -> solution_host.SolutionHost."""
        self.copy_bandwidth: Optional[float] = None
        self.caught: Dict[str, str] = {}
        """Solution spec -> the REWARD_HACK log of the workload where it was caught: its remaining workloads on
        this worker are not run, and their records say why."""
        self.last_phase, self.last_spec = "starting", None
        self.fatal = False
        self.last_solution: Optional[str] = None
        """The spec of the solution evaluated last (its process keeps its spare output file: end_task)."""
        self.timing_asked = False
        """Whether the solution being evaluated was asked to time its calls: an out-of-memory failure it reports after
        that is its record (it has seen its times; evaluating it again would draw them again)."""
        self.turns = None
        """gpu_turns.GpuTurns when this worker shares its GPU with others."""
        if config.gpu_turns_dir and config.devices.count(device) > 1:
            from .gpu_turns import GpuTurns

            self.turns = GpuTurns(config.gpu_turns_dir, device)

    def notify(self, spec: Optional[str], phase: str) -> None:
        self.last_phase, self.last_spec = phase, spec
        self._notify(spec, phase)

    def close(self) -> None:
        for host in self.hosts.values():
            host.close()
        if self.turns is not None:
            self.turns.close()

    # ------------------------------------------------------------------ turns on a shared GPU (gpu_turns.py)

    def _take_turn(self, take: Callable[[], None]) -> None:
        """Sync this worker's GPU work, then `take()` (a GpuTurns method), saying "waiting for the GPU" while it
        waits (no deadline: the worker that holds the GPU has its own); then back to the phase it was in."""
        self.sync()
        spec, phase = self.last_spec, self.last_phase
        self._notify(spec, WAITING_FOR_GPU)
        take()
        self.notify(spec, phase)

    def begin_task(self, task: Task, alone: bool = False) -> None:
        """Take this worker's turn for a task: shared, or alone when asked or for a workload too large to share the
        GPU's memory (ALONE_SHARE)."""
        if self.turns is None:
            return
        alone = alone or needs_gpu_alone(task, self.device, self.config.devices.count(self.device))
        self._take_turn(lambda: self.turns.begin_task(alone))

    def end_task(self) -> None:
        # one spare output file per worker (solution_host.SPARE_FILE): the last solution's, which the next task's
        # last solution writes over
        for spec, host in self.hosts.items():
            if spec != self.last_solution:
                host.drop_spare()
        if self.turns is not None:
            if not self.fatal:  # a lost CUDA context cannot synchronise; the process exits next
                self.sync()
            self.turns.end_task()

    def between_steps(self) -> None:
        """A point where this worker has nothing on the GPU: a worker waiting to time goes first."""
        if self.sharing():
            self._take_turn(self.turns.let_others_time)

    def sharing(self) -> bool:
        """Whether this worker holds a shared turn on its GPU now."""
        return self.turns is not None and self.turns.held == "shared"

    def alone_throughout(self) -> bool:
        """Whether nothing else runs on this worker's device while its task lasts: the CPU, a GPU with no other
        worker, or a task that holds the GPU alone. The reference's correctness calls are then its timing."""
        return (not self.device.startswith("cuda") or self.turns is None
                or self.turns.task_held == "alone")

    def task_shared(self) -> bool:
        """Whether this worker's task shares the GPU with other workers' tasks (whatever its current step holds): a
        task that failed for want of GPU memory, or whose timing was flagged, is then evaluated again alone."""
        return self.turns is not None and self.turns.task_held == "shared"

    @contextlib.contextmanager
    def alone(self):
        """Timing: the GPU to this worker alone for the block (and shared again after, where it was)."""
        if self.turns is None or self.turns.held == "alone":
            yield
            return
        self._take_turn(self.turns.alone)
        try:
            yield
        finally:
            self._take_turn(self.turns.share)

    def reference(self, definition: Definition):
        from .reference import ReferenceError, compile_reference

        if definition.name not in self.references:
            try:
                self.references[definition.name] = compile_reference(definition.reference, definition.name,
                                                                     self.config.trust_code)
            except ReferenceError as e:
                self.references[definition.name] = e
        return self.references[definition.name]

    def inputs_on_host(self, d: Definition, w: Workload, inputs: Dict[str, Any]) -> bool:
        """Whether this workload's input sets are kept off the GPU (RunConfig.inputs_on_host): the judge keeps the
        inputs it reads and the reference outputs in host memory, and each solution's process makes every input set
        again from its seed whenever it reads it (inputs.RemadeInputs). Forced, it applies on the CPU too, where
        host memory is the device's: the tests take that path there."""
        if self.config.inputs_on_host is not None:
            return self.config.inputs_on_host
        if not self.device.startswith("cuda"):
            return False
        import torch

        return keeps_on_host(tensor_bytes(inputs), declared_bytes(d, d.outputs, w),
                             torch.cuda.get_device_properties(self.device).total_memory)

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------------ one workload

    def evaluate_task(self, task: Task) -> Iterable[Trace]:
        """Records for every solution of the task, yielded as each finishes."""
        from .compare import nonfinite_counts
        from .inputs import InputError, make_inputs
        d, w, cfg = task.definition, task.workload, self.config
        rec = lambda spec, status, log="", **kw: make_record(d, w, task.names[spec], status,  # noqa: E731
                                                              self.environment, log, **kw)
        reference = self.reference(d)
        on_host = False

        def inputs_of(seed):
            """One input set, on the device (the reference reads it there); inputs_on_host decides where the
            judge keeps what it reads of it (kept_of) and its reference outputs."""
            nonlocal on_host
            self.notify(None, "inputs")
            made = make_inputs(d, w, seed, self.device, cfg.dataset_root)
            on_host = task.inputs_on_host if task.inputs_on_host is not None else self.inputs_on_host(d, w, made)
            return made

        def kept_of(inputs):
            kept = judged_inputs(d, inputs)
            return to_host(kept) if on_host else kept

        def reference_output(inputs, label=""):
            """(the reference's outputs on `inputs`, kept where the judged inputs are kept; its wall time in ms; a
            NaN/Inf problem or '')."""
            self.notify(None, "reference")
            out, ms = call_reference(d, reference, inputs, self.sync)
            problem = nonfinite(out, label)  # on the device, before the copy to host memory
            return (to_host(out) if on_host else out), ms, problem

        def nonfinite(out, label=""):
            for name, t in out.items():
                nan, inf = nonfinite_counts(t)
                if nan or inf:
                    return (f"reference output {name!r}{label} has {nan} NaN and {inf} Inf elements: no solution "
                            "can pass this workload")
            return ""

        def another_second_set():
            """A new input set B (seed, judged inputs, reference outputs) for a second attempt: the solution saw
            this workload's seeds in its first one and could have prepared B's outputs."""
            seed = secrets.randbits(SEED_BITS)
            b = inputs_of(seed)
            out, _, problem = reference_output(b)
            if problem:
                raise ValueError(problem)
            return seed, kept_of(b), out

        # One input set at a time, each cut down to what the judge reads once its reference outputs are made: a
        # stress workload's two full sets and two reference outputs in host memory at once, beside the solutions'
        # processes' own sets, were more than an H200 machine's 128 GB (kda_fwd_h32_dk128_dv256's 3ad95b31).
        seed_b = secrets.randbits(SEED_BITS)
        refs, ref_times, kept = [], [], []
        fresh = None
        for label, seed in (("", cfg.seed), (" (second input set)", seed_b)):
            try:
                inputs = self.with_room(lambda: inputs_of(seed))  # noqa: B023 - called at once
            except InputError as e:
                for spec in task.solutions:
                    yield rec(spec, S.INVALID_WORKLOAD, str(e))
                return
            except GpuAloneNeeded:
                raise
            except Exception as e:  # noqa: BLE001 - a generator bug is still this workload's problem
                for spec in task.solutions:
                    yield rec(spec, S.INVALID_WORKLOAD, f"workload {w.uuid}: inputs could not be made: "
                                                        f"{_short_traceback(e)}")
                return
            if fresh is None:  # input set A's checksums, before anything reads it: every call's inputs must match
                self.notify(None, "inputs: checksums")
                fresh = FreshReferences(d, w, reference, self.device, cfg.dataset_root, on_host)
                fresh.input_checksums(inputs)
            problem = str(reference) if isinstance(reference, Exception) else ""
            if not problem:
                try:
                    out, ms, problem = self.with_room(lambda: reference_output(inputs, label))  # noqa: B023
                    self.between_steps()
                    refs.append(out)
                    ref_times.append(ms)
                    del out
                except GpuAloneNeeded:
                    raise
                except Exception as e:  # noqa: BLE001
                    problem = f"reference failed on workload {w.uuid}{label}: {_short_traceback(e)}"
                    if _is_fatal_cuda_error(e):
                        self.fatal = True
            if problem:
                for spec in task.solutions:
                    yield rec(spec, S.INVALID_REFERENCE, problem)
                return
            # the solutions make their own input sets from the seeds: the judge keeps only what it reads
            kept.append(kept_of(inputs))
            inputs = None  # before the next set is made
            release_cached_memory(self.device)
        if self.alone_throughout():
            fresh.reference_timing = reference_timing_by_calls(ref_times, self.device)
        inputs_a, inputs_b = kept
        del kept

        for spec in task.solutions:
            if self.fatal:
                return  # the CUDA context is gone: the main process restarts this worker
            if spec in self.caught:
                yield rec(spec, S.REWARD_HACK, f"not run: this solution was caught reaching around the runner earlier "
                                               f"in this run ({self.caught[spec]})")
                continue
            try:
                self.between_steps()
                record = self.evaluate_solution(task, spec, inputs_a, inputs_b, refs[0], refs[1], rec, on_host,
                                                seed_b, fresh)
                # sharing the GPU, the task starts over alone instead (below)
                stopped = self.stop_other_hosts(spec) if _out_of_gpu_memory(record) and not self.task_shared() else []
                if stopped:
                    seed_b2, inputs_b2, ref_b2 = self.with_room(another_second_set)
                    record = self.evaluate_solution(task, spec, inputs_a, inputs_b2, refs[0], ref_b2, rec, on_host,
                                                    seed_b2, fresh.renewed())
                    del inputs_b2, ref_b2
                    record.evaluation.log = (f"[evaluated twice: the first attempt ran out of GPU memory, and the "
                                             f"processes of {', '.join(stopped)} were stopped before the second] "
                                             + record.evaluation.log)
            except (SourceChanged, GpuAloneNeeded):
                raise  # SourceChanged: this worker stops; its replacement refuses to start and the run ends saying why
            except Exception as e:  # noqa: BLE001 - e.g. out of memory while comparing: record it, go on
                if type(e).__name__ == "OutOfMemoryError" and self.may_move_to_host(on_host):
                    raise GpuAloneNeeded("ran out of GPU memory", f"in the judge's own work ({e})"[:300],
                                         task.names[spec], on_host=True) from None
                self.fatal = _is_fatal_cuda_error(e)
                record = rec(spec, S.RUNTIME_ERROR, f"workload {w.uuid}: evaluating the outputs failed: "
                                                    f"{_short_traceback(e)}")
            flagged = record.evaluation.status == S.REWARD_HACK and (record.evaluation.log or "").startswith(
                HIDDEN_WORK_LOG)
            if (_out_of_gpu_memory(record) or flagged) and self.task_shared() and not self.fatal:
                if spec in self.hosts:
                    self.hosts[spec].stop()  # what its process holds, given back before the task starts over
                raise GpuAloneNeeded("was flagged for work hidden from its timing" if flagged else
                                     "ran out of GPU memory", record.evaluation.log, task.names[spec],
                                     record if flagged else None)
            if _out_of_gpu_memory(record) and self.may_move_to_host(on_host):
                if spec in self.hosts:
                    self.hosts[spec].stop()
                raise GpuAloneNeeded("ran out of GPU memory", record.evaluation.log, task.names[spec], on_host=True)
            if _out_of_gpu_memory(record) and spec in self.hosts:
                # what its process still holds (a cache that only grows) must not keep the next solutions' processes
                # from starting: tests/runner/cheats.py's content_cache held 75 GiB of an H100 after failing
                self.hosts[spec].stop()
            if record.evaluation.status == S.REWARD_HACK:
                self.caught[spec] = f"workload {w.uuid}: {record.evaluation.log[:300]}"
            yield record  # outside `except`: a live exception would keep its frames' GPU tensors alive

    def may_move_to_host(self, on_host: bool) -> bool:
        """Whether a task that ran out of GPU memory is evaluated again with its input sets in host memory: it had
        the GPU alone (else it is evaluated again alone first) with them on the GPU, by the default of
        RunConfig.inputs_on_host (HOST_INPUTS_FRACTION), its CUDA context still works, and the solution was not yet
        timed (timing_asked): one that reported running out, or held memory until the judge ran out, after seeing its
        times would get them drawn again."""
        return (not on_host and not self.task_shared() and not self.fatal and self.config.inputs_on_host is None
                and not self.timing_asked)

    def with_room(self, make: Callable[[], Any], spec: Optional[str] = None) -> Any:
        """`make()`, and once more after stopping the processes of the solutions other than `spec` (all when None)
        if it ran out of GPU memory while one of them was running (see stop_other_hosts). The judge's own work for
        solution `spec` (comparing its outputs, the reference on a timed repetition's inputs) goes through here: a
        solution that holds GPU memory between its evaluations cannot fail another's record."""
        try:
            return make()
        except Exception as e:  # noqa: BLE001 - only torch's OutOfMemoryError is retried
            sharing = self.task_shared()
            if type(e).__name__ != "OutOfMemoryError" or not (sharing or any(
                    h.alive() for s, h in self.hosts.items() if s != spec)):
                raise
        # out of the `except`: the exception's frames held the failed attempt's memory
        if sharing:
            raise GpuAloneNeeded("ran out of GPU memory", "in the judge's own work")
        self.stop_other_hosts(spec)
        return make()

    def stop_other_hosts(self, spec: Optional[str]) -> List[str]:
        """Stop the idle processes of the solutions other than `spec` (each starts again when next needed), so that
        GPU memory one of them holds between its evaluations (a cache that only grows: tests/runner/cheats.py's
        content_cache's process held 55-58 GiB of an H100) cannot make another solution fail. Returns the specs stopped."""
        stopped = []
        for other, host in self.hosts.items():
            if other != spec and host.alive():
                host.stop()
                stopped.append(other)
        release_cached_memory(self.device)
        return stopped

    def host(self, spec: str):
        """The process that runs solution `spec` (solution_host.SolutionHost), started on first use."""
        from .solution_host import SolutionHost

        if spec not in self.hosts:
            self.hosts[spec] = SolutionHost(mp.get_context("spawn"), spec, self.device, self.config.trust_code,
                                            self.config.dataset_root, self.notify, code_digest=self.config.code_digest)
        return self.hosts[spec]

    def start_hosts(self, specs: List[str]) -> None:
        """Start the processes of these solutions ahead of their first workload (the precompile pass runs and nothing
        is timed), in a shared turn on a shared GPU: another worker's timing waits for it. One that fails to start is
        started again, and its failure recorded, by its first workload."""
        if self.turns is not None:
            self._take_turn(lambda: self.turns.begin_task(False))
        try:
            for spec in specs:
                host = self.host(spec)
                if not host.alive():
                    try:
                        host.start()
                    except SourceChanged:
                        raise
                    except Exception:  # noqa: BLE001 - HostDied, or no room for its pipe or folders: left to its first workload
                        host.stop()
        finally:
            self.end_task()

    def evaluate_solution(self, task: Task, spec: str, inputs_a, inputs_b, ref_a, ref_b, rec, on_host: bool,
                          seed_b: int, fresh: "FreshReferences") -> Trace:
        """One solution on one workload, run in the solution's own process (solution_host.py); judged here."""
        from .solution_host import HostDied, load_checked

        d, w = task.definition, task.workload
        axes = {**d.const_axes, **w.axes}
        host = self.host(spec)
        self.timing_asked = False
        self.last_solution = spec
        # from here a hang is this solution's: without this, a process that never answers (stopped by a signal,
        # say) would time out in the worker's own last phase ('reference') and fail the workload for everyone
        self.between_steps()
        self.notify(spec, "request")
        # the first call of a process on a definition compiles and autotunes: an autotuner timing beside other
        # workers' work would pick its settings on disturbed timings
        first_here = not host.alive() or d.name not in host.definitions_called
        try:
            if not host.alive():
                host.start()  # imports and a CUDA context (H200: about 10 s): no autotuning, so beside others' work
            with self.alone() if first_here else contextlib.nullcontext():
                reply = host.request(kind="first", definition=d.model_dump_json(), workload=w.model_dump_json(),
                                     name=task.names[spec], seed=self.config.seed, seed_b=seed_b, on_host=on_host,
                                     input_files=pinned_files(self.config, w), save_later=True)
            reply = _saved(host, reply)
        except HostDied as e:
            return rec(spec, S.RUNTIME_ERROR, f"workload {w.uuid}: {e} in phase {self.last_phase!r}")
        host.definitions_called.add(d.name)
        if reply.get("kind") == "status":
            return rec(spec, _status(reply), str(reply.get("log", "")) or "the solution's process claimed a pass")
        self.notify(spec, "judge: first outputs")
        outputs, why = self.with_room(lambda: load_checked(host, "first", self.device), spec)
        if outputs is None:
            return rec(spec, S.RUNTIME_ERROR, why)
        status, why = check_outputs(d, {n: outputs.get(n) for n in d.outputs}, axes, self.device)
        if status is not None:
            return rec(spec, status, why)
        self.notify(spec, "judge: compare")
        correctness = self.with_room(lambda: self.correctness(d, inputs_a, ref_a, outputs), spec)
        outputs = None  # free before timing (stress workloads)
        sums = reply.get("input_checksums") or {}
        mutated = [n for n, c in fresh.input_checksums(inputs_a).items() if sums.get(n) != str(c)]
        if mutated:
            _skip(host)
            return rec(spec, S.INPUT_MUTATED, f"the solution changed input(s) {mutated}, which it may not write",
                       correctness=correctness)
        failed = _failures(correctness)
        if failed:
            _skip(host)
            return rec(spec, S.INCORRECT_NUMERICAL, failed, correctness=correctness)

        self.timing_asked = True
        try:
            with self.alone():
                reply = host.request(kind="time", timing=_timing_fields(self.config.timing), seeds=fresh,
                                     digest_seed=fresh.digest_seed, save_later=True)
                if reply.get("kind") == "timed":
                    self.time_reference(fresh, reply, spec)
            reply = _saved(host, reply)
        except HostDied as e:
            return rec(spec, S.RUNTIME_ERROR, f"workload {w.uuid}: {e} while timing", correctness=correctness)
        if reply.get("kind") == "status":
            return rec(spec, _status(reply), str(reply.get("log", "")), correctness=correctness)
        self.notify(spec, "judge: final outputs")
        second, why = self.with_room(lambda: load_checked(host, "final", self.device), spec)
        status = None
        if second is not None:
            status, why = check_outputs(d, {n: second.get(n) for n in d.outputs}, axes, self.device)
        if second is None or status is not None:
            return rec(spec, status or S.RUNTIME_ERROR, f"second input set (last call of the timing loop): {why}",
                       correctness=correctness)
        self.notify(spec, "judge: compare B")
        check_b = self.with_room(lambda: self.correctness(d, inputs_b, ref_b, second), spec)
        correctness.extra = {**(correctness.extra or {}), "second_input_set": {
            "seed": seed_b,
            "passed": all(m.passed for m in check_b.outputs.values()),
            "outputs": {n: {"rms_rel_error": m.rms_rel_error, "max_abs_error": m.max_abs_error, "reason": m.reason}
                        for n, m in check_b.outputs.items()}}}
        failed = _failures(check_b)
        if failed:
            return rec(spec, S.INCORRECT_NUMERICAL, f"correct on the first input set but wrong on the second one "
                       f"(seed {seed_b}, last call of the timing loop; a cached or input-independent result?): {failed}",
                       correctness=correctness)
        from .timing import TimingResult

        timing = TimingResult([float(t) for t in reply["times_ms"]], str(reply["mode"]),
                              notes=[str(n) for n in reply.get("notes") or []],
                              wall_ms=[float(t) for t in reply.get("wall_ms") or []])
        miscount = _repetitions_miscounted(reply, timing)
        if miscount:
            return rec(spec, S.REWARD_HACK, miscount, correctness=correctness)
        verdict = self.check_timed_repetition(d, spec, host, reply.get("digests"), fresh, correctness)
        if verdict is not None:
            return rec(spec, verdict[0], verdict[1], correctness=correctness)
        floor = self.physical_floor_ms(d, w)
        if floor is not None and timing.median_ms < floor[0]:
            return rec(spec, S.REWARD_HACK, f"timed at {timing.median_ms:.4g} ms, below the physical floor of this "
                       f"workload, {floor[0]:.4g} ms ({floor[1]:.4g} GB, the fewest bytes the definition's cost "
                       f"says it must move, at {floor[2]:.3g} TB/s, {FLOOR_BANDWIDTH_MARGIN:g} x this device's "
                       "measured copy bandwidth): no time is reported", correctness=correctness)
        ref_timing = fresh.reference_timing
        notes = timing.notes + (ref_timing.notes if ref_timing is not None else [])
        return rec(spec, S.PASSED, "; ".join(notes), correctness=correctness,
                   performance=self.performance(d, w, timing, ref_timing))

    def time_reference(self, fresh: "FreshReferences", reply: Dict[str, Any], spec: str) -> None:
        """The reference's timing on a GPU shared with other workers (elsewhere its correctness calls are its timing:
        alone_throughout), once per workload, in the turn of the first solution timed, with the GPU still alone: one
        call, device-synchronised, on the inputs of the repetition that solution's check draws
        (check_timed_repetition needs the reference there anyway), or on inputs of its own when only one
        repetition was timed. A reference that fails there is left to that check, which records why. The reference
        is not judged, only reported (a solution's speedup over it): a timing loop of its own cost every evaluation
        a second turn alone."""
        from .timing import TimingResult

        if fresh.reference_timing is not None:  # by its correctness calls (alone_throughout), or by another solution
            return
        self.notify(None, "reference: timing")  # the reference's phase: a hang here is not the solution's
        given = reply.get("seeds_given")
        digests = reply.get("digests")
        # a harness whose records were changed is judged by the check (_repetitions_miscounted): no repetition here
        valid = isinstance(digests, list) and isinstance(given, int) and len(digests) == given + 1
        rep = fresh.checked_repetition(digests) if valid else None
        try:
            ms = self.with_room(lambda: fresh.timed_reference_call(rep, self.sync), spec)
        except GpuAloneNeeded:
            raise
        except Exception as e:  # noqa: BLE001 - see the docstring
            self.fatal = self.fatal or _is_fatal_cuda_error(e)
            return
        mode = "cuda_sync_wall" if self.device.startswith("cuda") else "cpu_wall"
        fresh.reference_timing = TimingResult([ms], mode, notes=[
            "reference timing: one call with the GPU alone, on a timed repetition's inputs (wall time between "
            "device synchronisations)"])

    def check_timed_repetition(self, d: Definition, spec: str, host, digests, fresh: "FreshReferences",
                               correctness: Correctness) -> Optional[Tuple[str, str]]:
        """Check one timed repetition other than the last, drawn now that the timing is over, by the digest of
        its outputs against the reference's on the same inputs. On a mismatch the solution is called once more,
        untimed, on those inputs: outputs that differ from the timed call's are REWARD_HACK (it did other work
        when timed), wrong ones INCORRECT_NUMERICAL. (status, log) or None (passed, or nothing to check: one
        repetition; `correctness.extra` says why)."""
        from .compare import tolerance_for
        from .integrity import (SAME_INPUTS_RELATIVE, SAME_INPUTS_TOLERANCE_FACTOR, digest_mismatches,
                                inplace_bases, output_digest)
        from .solution_host import HostDied, load_checked

        record: Dict[str, Any] = {"checked": False}
        correctness.extra = {**(correctness.extra or {}), "timed_repetition": record}
        rep = fresh.checked_repetition(digests)
        if rep is None:
            record["why_not"] = "a single timed repetition (the last, on input set B)"
            return None
        self.between_steps()
        if rep not in fresh.made:
            self.notify(spec, "judge: reference on a timed repetition")
        try:
            want = self.with_room(lambda: fresh.digest(rep), spec)
        except GpuAloneNeeded:
            raise
        except Exception as e:  # noqa: BLE001 - the reference's problem on inputs the workload does not name
            record["why_not"] = f"the reference failed on repetition {rep}'s inputs: {_short_traceback(e)}"
            return None
        if want is None:
            record["why_not"] = f"the reference has NaN or Inf on repetition {rep}'s inputs"
            return None
        tolerances = {n: tolerance_for(d, n, self.config.tolerances) for n in d.outputs}
        atol = {n: t.atol or 0.0 for n, t in tolerances.items()}
        rms_rel = {n: t.max_rms_rel_error for n, t in tolerances.items()}
        got = digests[rep] or {}
        bad = digest_mismatches(got, want, atol, rms_rel=rms_rel)
        record.update(checked=True, repetition=rep, seed=fresh.seed(rep), passed=not bad,
                      mismatch={n: round(v, 3) for n, v in bad.items()})
        if not bad:
            return None
        seen = f"timed repetition {rep} of {len(digests)} (seed {fresh.seed(rep)})"
        self.between_steps()
        try:
            reply = host.request(kind="check", seed=fresh.seed(rep))
        except HostDied as e:
            return S.RUNTIME_ERROR, f"{e} during the check call of {seen}"
        if reply.get("kind") == "status":
            return _status(reply), str(reply.get("log", ""))
        again, why = self.with_room(lambda: load_checked(host, "check", self.device), spec)
        if again is None:
            return S.RUNTIME_ERROR, f"the check call of {seen}: {why}"
        again_digest = output_digest(again, fresh.digest_seed, self.device, inplace_bases(d, fresh.inputs(rep)))
        untimed = digest_mismatches(again_digest, got, atol, SAME_INPUTS_RELATIVE)
        if untimed:
            return S.REWARD_HACK, (f"the outputs of {seen} differ from an untimed call's on the same inputs "
                                   f"(outputs {sorted(untimed)}): the solution did other work while it was timed")
        failed = _failures(self.with_room(lambda: self.correctness(d, fresh.inputs(rep), fresh.outputs(rep), again),
                                          spec))
        if failed:
            return S.INCORRECT_NUMERICAL, f"wrong on the inputs of {seen}: {failed}"
        # the untimed call passed; the timed one must be as close to it as the tolerance allows (a deterministic
        # solution's are identical: a digest mismatch that was chance ends here, in its favour)
        apart = digest_mismatches(got, again_digest, atol, relative=None, rms_rel=rms_rel,
                                  factor=SAME_INPUTS_TOLERANCE_FACTOR)
        if apart:
            worst = ", ".join(f"{n} {v:.3g}x" for n, v in sorted(apart.items()))
            return S.INCORRECT_NUMERICAL, (
                f"wrong in {seen}: its outputs' digest is off the reference's, and off an untimed call's on the "
                f"same inputs (which passed) by more than {SAME_INPUTS_TOLERANCE_FACTOR:g} x the RMS-relative tolerance "
                f"({worst} of that bound): its results differ from call to call by more than its tolerance allows")
        record["note"] = "the digests differed but an untimed call on the same inputs matched the timed one and passed"
        return None

    def physical_floor_ms(self, d: Definition, w: Workload) -> Optional[Tuple[float, float, float]]:
        """(floor in ms, GB, TB/s) for a GPU: the definition's fewest bytes at FLOOR_BANDWIDTH_MARGIN x the
        device's copy bandwidth (measured once per worker); None on the CPU or without a cost."""
        if not self.device.startswith("cuda"):
            return None
        _, nbytes = cost_of(d, w)
        if not nbytes:
            return None
        if self.copy_bandwidth is None:
            with self.alone():
                self.copy_bandwidth = measure_copy_bandwidth(self.device)
        tbps = FLOOR_BANDWIDTH_MARGIN * self.copy_bandwidth / 1e12
        return nbytes / (tbps * 1e12) * 1e3, nbytes / 1e9, tbps

    def correctness(self, d: Definition, inputs, refs, outputs) -> Correctness:
        from .compare import compare_output, cu_seqlens_input, inplace_violations, packed_axis, tolerance_for

        cu = inputs.get(cu_seqlens_input(d))
        metrics: Dict[str, OutputMetrics] = {}
        for name in d.outputs:
            tol = tolerance_for(d, name, self.config.tolerances)
            out = outputs[name]
            ref = refs[name].to(out.device)  # kept in host memory (inputs_on_host)
            m = compare_output(d, name, ref, out, tol, None if cu is None else cu.to(out.device))
            if name in d.inplace:
                original = inputs[d.inplace[name]].to(out.device)
                violations = inplace_violations(original, ref, out)
                m.bit_identical_violations = violations
                if violations:
                    m.passed = False
                    m.reason = "; ".join(filter(None, [m.reason, f"{violations} elements of slots that the reference "
                                                       f"leaves bit-identical to input {d.inplace[name]!r} were changed"]))
            metrics[name] = m
        lengths = {}
        for name, spec in d.outputs.items():
            if spec.sequence_axis:
                if cu is not None and metrics[name].error_by_position is not None and \
                        d.outputs[name].sequence_axis == (packed_axis(d) or (None,))[0]:
                    lengths[name] = int((cu[1:] - cu[:-1]).max())
                else:
                    lengths[name] = int(outputs[name].shape[(spec.shape or []).index(spec.sequence_axis)])
        finite = lambda xs: [x for x in xs if x == x]  # noqa: E731 - drop NaN
        return Correctness(max_relative_error=max(finite([m.max_rel_error for m in metrics.values()]) or [float("nan")]),
                           max_absolute_error=max(finite([m.max_abs_error for m in metrics.values()]) or [float("nan")]),
                           outputs=metrics, extra={"sequence_lengths": lengths} if lengths else None)

    def performance(self, d: Definition, w: Workload, timing, ref_timing) -> Performance:
        perf = Performance(latency_ms=timing.median_ms, min_ms=timing.min_ms, max_ms=timing.max_ms,
                           repetitions=len(timing.times_ms), mode=timing.mode,
                           wall_ms=timing.median_wall_ms)
        if ref_timing is not None:
            perf.reference_latency_ms = ref_timing.median_ms
            perf.speedup_factor = ref_timing.median_ms / timing.median_ms if timing.median_ms > 0 else 0.0
        flops, nbytes = cost_of(d, w)
        seconds = timing.median_ms / 1e3
        if flops is not None and seconds > 0:
            perf.tflops = flops / seconds / 1e12
        if nbytes is not None and seconds > 0:
            perf.tbps = nbytes / seconds / 1e12
        from .roofline import sol_fraction

        perf.sol_fraction, perf.sol_bound = sol_fraction(perf.tbps, perf.tflops, self.environment.peaks)
        return perf


def pinned_files(config: RunConfig, w: Workload) -> Dict[str, List[int]]:
    """The run's record of this workload's stored input files, for the solution's process, which makes its own
    inputs from them (inputs.pin_input_files)."""
    from .inputs import stored_input_paths

    return {p: list(config.input_files[p]) for p in stored_input_paths(w, config.dataset_root)
            if p in config.input_files}


def reference_timing_by_calls(correctness_ms: List[float], device: str):
    """The reference's TimingResult from its correctness calls (on input sets A and B), made while nothing else ran
    on the device (WorkerContext.alone_throughout): wall time on the CPU, between device synchronisations on a GPU."""
    from .timing import TimingResult

    said = f"{len(correctness_ms)} correctness call{'s' if len(correctness_ms) != 1 else ''}"
    if not device.startswith("cuda"):
        return TimingResult(list(correctness_ms), "cpu_wall", notes=[f"reference timing: its {said}"])
    # the faster: the first call of a definition in a worker also loads kernels and grows the memory pool
    return TimingResult([min(correctness_ms)], "cuda_sync_wall", notes=[
        f"reference timing: the faster of its {said}, with the GPU alone (wall time between device "
        "synchronisations)"])


def cost_of(d: Definition, w: Workload) -> Tuple[Optional[float], Optional[float]]:
    """(flops, bytes) of one call from the definition's cost expressions; None where absent or failing."""
    from .dataset import SAFE_BUILTINS

    if d.cost is None:
        return None, None
    env: Dict[str, Any] = {**d.const_axes, **w.axes}
    for name, source in w.inputs.items():
        if getattr(source, "type", None) == "scalar":
            env[name] = source.value
    if w.seq_lens is not None:
        env.setdefault("seq_lens", list(w.seq_lens))
        env.setdefault("num_seqs", len(w.seq_lens))
    values = []
    for expr in (d.cost.flops, d.cost.bytes):
        try:
            values.append(float(eval(compile(expr, "<cost>", "eval"), {"__builtins__": SAFE_BUILTINS}, env))  # noqa: S307
                          if expr and "__" not in expr else None)
        except Exception:  # noqa: BLE001 - a bad cost expression only loses the rate
            values.append(None)
    return values[0], values[1]


FLOOR_BANDWIDTH_MARGIN = 1.25
"""A solution is never reported faster than its bytes at this multiple of the device's measured copy bandwidth:
the margin covers a copy benchmark that misses the peak and writes that end in the L2 cache."""


def measure_copy_bandwidth(device: str, nbytes: int = 1 << 30, reps: int = 5) -> float:
    """Bytes per second of a device-to-device copy (read + write counted), the median of `reps`."""
    import statistics

    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    times = []
    for _ in range(reps + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    return 2 * nbytes / statistics.median(times[1:])


def _saved(host, reply: Dict[str, Any]) -> Dict[str, Any]:
    """After a "first" or "time" request asked with save_later: its outputs written now, in a request of their own,
    outside the turn that had the GPU alone (a state pool's outputs take up to a second to write, which other
    workers need not wait for). The request's reply, or the save's when that failed."""
    if reply.get("kind") == "status":
        return reply
    if not host.alive():
        from .solution_host import HostDied

        raise HostDied("the solution's process ended before its outputs were written")
    saved = host.request(kind="save")
    if saved.get("kind") == "saved":
        return reply
    if saved.get("kind") == "status":
        return saved
    return {"kind": "status", "status": S.RUNTIME_ERROR.value,
            "log": f"the solution's process answered a save with {str(saved)[:200]}"}


def _status(reply: Dict[str, Any]) -> S:
    """The failure a solution's process reported. Only the judge passes a solution: a process that claims
    PASSED is cheating; an unknown name is the process's fault (RUNTIME_ERROR)."""
    try:
        status = S(str(reply.get("status")))
    except ValueError:
        return S.RUNTIME_ERROR
    return S.REWARD_HACK if status == S.PASSED else status


def _repetitions_miscounted(reply: Dict[str, Any], timing) -> str:
    """Why the timing reply does not add up, or ''. The judge gave one seed per timed repetition but the last
    (SolutionHost.request counts them): the times and digests must number one more, and with two repetitions or
    more at least one digest must be there (the host always digests one)."""
    given, digests = reply.get("seeds_given"), reply.get("digests")
    n = len(timing.times_ms)
    if given is None or digests is None or given + 1 != n or len(digests) != n:
        return (f"the timing loop reported {n} times and {len(digests or [])} digests, but asked the judge for "
                f"{given} repetition seeds (one per repetition but the last): the harness's records were changed")
    if n >= 2 and not any(g is not None for g in digests):
        return f"none of {n} timed repetitions has a digest (the host always keeps one): the digests were removed"
    return ""


def release_cached_memory(device: str) -> None:
    """Give the GPU memory torch's allocator holds but no tensor uses back to the driver: the reference's
    temporaries would otherwise stay reserved in the worker while the solutions' processes run out of memory
    (H200, a 96-head chunk-states workload: 94 GiB held there, the solutions' allocations failed)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


class FreshReferences:
    """The timing loop's inputs for one workload: repetition i's seed is drawn from the OS when a solution's
    process first asks for it (just before timing that repetition) and given again to the workload's other
    solutions for their repetition i; digests use digest_seed. The reference's outputs on a repetition's
    inputs are made when a check needs them and kept for the other solutions of the workload (a later solution
    whose digested repetitions include that one is checked there: one reference call instead of another; the
    solution cannot tell, as the judge never says which repetition it checked unless the check failed).
    Also input set A's checksums, which every call's inputs must still have."""

    def __init__(self, d: Definition, w: Workload, reference, device: str, root, on_host: bool):
        self.d, self.w, self.reference, self.device, self.root, self.on_host = d, w, reference, device, root, on_host
        self.seeds: List[int] = []
        self.digest_seed = secrets.randbits(SEED_BITS)
        self._checksums: Optional[Dict[str, int]] = None
        self.made: Dict[int, Tuple[Dict[str, Any], Dict[str, Any], Optional[Dict[str, Any]]]] = {}
        self.reference_timing = None  # timing.TimingResult, made once per workload (WorkerContext.time_reference)

    def renewed(self) -> "FreshReferences":
        """The same workload with new seeds for the timing loop and the digests (a solution's second attempt),
        keeping input set A's checksums (the judge no longer holds all of A's inputs)."""
        other = FreshReferences(self.d, self.w, self.reference, self.device, self.root, self.on_host)
        other._checksums = self._checksums
        other.reference_timing = self.reference_timing
        return other

    def checked_repetition(self, digests) -> Optional[int]:
        """The timed repetition whose digest the judge checks (None when only the last, on input set B, was timed):
        one the reference already ran on for another solution of the workload, else one drawn at random."""
        drawn = [i for i, g in enumerate(digests or []) if g is not None and i < len(self.seeds)]  # seeds given
        if not drawn:
            return None
        reused = [r for r in drawn if r in self.made]
        return reused[0] if reused else drawn[secrets.randbelow(len(drawn))]

    def timed_reference_call(self, rep: Optional[int], sync: Callable[[], None]) -> float:
        """The reference's wall time in ms (between two `sync()`s) on repetition `rep`'s inputs, made and kept here
        for that repetition's check; on inputs of their own (kept nowhere) when `rep` is None or already made."""
        from .inputs import make_inputs
        from .timing import flush_l2

        if rep is None or rep in self.made:
            inputs = make_inputs(self.d, self.w, secrets.randbits(SEED_BITS), self.device, self.root)
            flush_l2(self.device)  # as before a solution's timed call: the inputs just made are not in the cache
            _, ms = call_reference(self.d, self.reference, inputs, sync)
            release_cached_memory(self.device)
            return ms
        return self._make(rep, sync, flush=True)

    def input_checksums(self, inputs_a: Dict[str, Any]) -> Dict[str, int]:
        """Input set A's checksums (integrity.bit_checksum), made once: a call's inputs must still have them."""
        from .integrity import input_checksums

        if self._checksums is None:
            self._checksums = input_checksums(self.d, inputs_a, self.device)
        return self._checksums

    def seed(self, rep: int) -> int:
        while len(self.seeds) <= rep:
            self.seeds.append(secrets.randbits(SEED_BITS))
        return self.seeds[rep]

    def _make(self, rep: int, sync: Callable[[], None] = lambda: None, flush: bool = False) -> Optional[float]:
        """Repetition `rep`'s judged inputs, reference outputs and digest, kept (one repetition at a time); the
        reference call's wall time in ms when it ran now (`flush`: with the L2 cache flushed before it)."""
        from .compare import nonfinite_counts
        from .inputs import make_inputs
        from .integrity import inplace_bases, output_digest
        from .timing import flush_l2

        ms = None
        if rep not in self.made:
            self.made = {}  # one at a time: a workload's inputs can be large
            inputs = make_inputs(self.d, self.w, self.seed(rep), self.device, self.root)
            if flush:
                flush_l2(self.device)
            out, ms = call_reference(self.d, self.reference, inputs, sync)
            finite = all(sum(nonfinite_counts(t)) == 0 for t in out.values() if hasattr(t, "dtype"))
            digest = output_digest(out, self.digest_seed, self.device, inplace_bases(self.d, inputs)) if finite else None
            # the judge reads cu_seqlens and the in-place inputs of these inputs (WorkerContext.correctness)
            inputs = judged_inputs(self.d, inputs)
            if self.on_host:
                inputs, out = to_host(inputs), to_host(out)
            self.made = {rep: (inputs, out, digest)}
            # the reference's temporaries: kept reserved, they left the next solutions' processes no room (H200,
            # kda_bwd_fused_h96's 65536-token workload: 116.9 GiB in the worker process)
            release_cached_memory(self.device)
        return ms

    def inputs(self, rep: int) -> Dict[str, Any]:
        self._make(rep)
        return self.made[rep][0]

    def outputs(self, rep: int) -> Dict[str, Any]:
        self._make(rep)
        return self.made[rep][1]

    def digest(self, rep: int) -> Optional[Dict[str, Any]]:
        self._make(rep)
        return self.made[rep][2]


def _out_of_gpu_memory(record: Trace) -> bool:
    return record.evaluation.status == S.RUNTIME_ERROR and OUT_OF_GPU_MEMORY_HINT in (record.evaluation.log or "")


def _failures(correctness: Correctness) -> str:
    """'output: reason; ...' for the outputs that failed, '' when all passed."""
    return "; ".join(f"{n}: {m.reason}" for n, m in correctness.outputs.items() if not m.passed)


def _skip(host) -> None:
    """Tell a solution's process that its first call failed (no timing); a process that does not answer is
    started afresh next time."""
    from .solution_host import HostDied

    try:
        if host.request(kind="skip").get("kind") != "skipped":
            host.stop()
    except HostDied:
        pass


def _timing_fields(timing) -> Dict[str, Any]:
    from dataclasses import asdict

    from .timing import TimingConfig

    return asdict(timing if timing is not None else TimingConfig())


CUBLAS_CONTEXT_WARNING = "Attempting to run cuBLAS, but there was no current CUDA context"
"""The start of a warning torch gives once per process when autograd's device thread first calls cuBLAS (the backward
references do) before a CUDA context is current on that thread; torch then makes the primary context current, so
it is harmless, and on the console of a GPU run it was the only thing printed between the workloads' lines (once
per worker)."""


def quiet_harmless_warnings() -> None:
    """Ignore, in this process, the warnings known to be harmless (CUBLAS_CONTEXT_WARNING)."""
    warnings.filterwarnings("ignore", message=CUBLAS_CONTEXT_WARNING, category=UserWarning)


def worker_main(conn, config: RunConfig, device: str) -> None:
    """Worker process: receive Tasks, send ('phase', spec, name) / ('record', json) / ('done',) messages."""
    from .reaper import die_with_parent

    die_with_parent()  # with the runner, however it ends
    quiet_harmless_warnings()
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(1)  # the runner ended before die_with_parent could see it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C
    if not device.startswith("cuda") and len(config.devices) > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // len(config.devices)))  # share the cores
    from .inputs import pin_input_files

    pin_input_files(config.input_files)
    try:
        ctx = WorkerContext(config, device, lambda spec, phase: conn.send(("phase", spec, phase)))
    except SourceChanged as e:
        conn.send(("refused", str(e)))
        return
    from .run_profile import PythonProfile

    profile = PythonProfile("worker")
    conn.send(("ready",))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            task = None
        if task is None:
            ctx.close()
            profile.write()
            return
        if isinstance(task, StartSolutions):
            ctx.start_hosts(task.specs)
            conn.send(("started",))
            continue
        alone, first = False, None
        while task is not None:
            ctx.begin_task(task, alone)
            recorded, again = set(), None
            try:
                for trace in ctx.evaluate_task(task):
                    if first is not None and first.solution in (None, trace.solution):
                        trace = _after_alone(ctx, task, first, trace)
                    conn.send(("record", trace.model_dump_json()))
                    recorded.add(trace.solution)
            except GpuAloneNeeded as e:  # the solutions still to record, from the start, with the GPU alone
                again = Task(task.definition, task.workload, [s for s in task.solutions
                                                              if task.names[s] not in recorded], task.names,
                             True if e.on_host else task.inputs_on_host)
                # a flag of hidden work from an earlier attempt stands through later ones (see _after_alone); the
                # attempt's frames (its input sets and references on the GPU) go with its traceback, before the next
                e.flagged = e.flagged or (first.flagged if first is not None else None)
                e.__traceback__ = e.__context__ = e.__cause__ = None
                first = e
            if not ctx.fatal:
                release_cached_memory(ctx.device)  # this workload's input sets and references
            ctx.end_task()
            task, alone = (again, True) if again is not None and again.solutions else (None, False)
        profile.checkpoint()
        if ctx.fatal:
            conn.send(("fatal",))
            os._exit(3)  # a CUDA fault poisons the context: start over in a fresh process
        conn.send(("done",))


# ============================================================================ main side


def _after_alone(ctx: WorkerContext, task: Task, first: GpuAloneNeeded, trace: Trace) -> Trace:
    """The record of the solution whose first attempt, on a shared GPU, ended in `first` (of every solution of the
    task when `first` names none), from its evaluation alone: that one with a note saying why, except that a flag of
    hidden work stands unless the evaluation alone passed or was REWARD_HACK itself."""
    if first.flagged is not None and trace.evaluation.status not in (S.PASSED, S.REWARD_HACK):
        kept = first.flagged
        kept.evaluation.log = (f"{kept.evaluation.log} [evaluated again with the GPU alone, it was "
                               f"{S(trace.evaluation.status).value}: {trace.evaluation.log[:200]}]")
        spec = next(s for s in task.solutions if task.names[s] == trace.solution)
        ctx.caught.setdefault(spec, f"workload {task.workload.uuid}: {kept.evaluation.log[:300]}")
        return kept
    if first.on_host:
        trace.evaluation.log = (f"[evaluated again with its input sets in host memory: the attempt before {first.what} "
                                f"with the GPU alone and them on it ({first.detail[:200]})] " + trace.evaluation.log)
    else:
        trace.evaluation.log = (f"[evaluated again with the GPU alone: the first attempt {first.what} while sharing it "
                                f"with other workers ({first.detail[:200]})] " + trace.evaluation.log)
    return trace


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@dataclass
class _Worker:
    device: str
    process: Any = None
    conn: Any = None
    task: Optional[Task] = None
    remaining: List[str] = field(default_factory=list)
    phase: Tuple[Optional[str], str] = (None, "starting")
    deadline: float = 0.0
    ready: bool = False
    phase_since: float = 0.0
    task_since: float = 0.0
    said_slow: bool = False
    started: bool = False
    """Whether this worker was told to start its solutions' processes (StartSolutions)."""
    prestarting: bool = False
    """Starting them now: no task is given to it meanwhile, and it has the start-up timeout."""


SLOW_EVALUATION_S = 30.0
"""A workload still being evaluated after this many seconds is named on the console (Runner.on_event "slow")."""


PHASE_LOG_ENV = "KDA_TRACE_PHASE_LOG"


class Runner:
    """Runs tasks on worker processes and hands every record to `on_record(definition, trace)`."""

    def __init__(self, config: RunConfig, on_record: Callable[[Definition, Trace], None],
                 main_environment: Environment, startup_timeout: float = 300.0, profile: Any = None,
                 on_event: Optional[Callable[..., None]] = None):
        """`profile`: a run_profile.RunProfile charged with every phase's time. `on_event(kind, task, **info)`:
        "begin" when a task goes to a worker, "end" when it is done (seconds=), "slow" once when it has taken
        SLOW_EVALUATION_S (phase=, seconds=, device=)."""
        self.config = config
        self.on_record = on_record
        self.profile = profile
        self.on_event = on_event or (lambda kind, task, **info: None)
        self.environment = main_environment
        self.startup_timeout = startup_timeout
        self.ctx = mp.get_context("spawn")
        self.restarts = 0
        self.strays: List[str] = []  # processes that solutions left behind, killed (kda_trace/reaper.py)

    def _start(self, w: _Worker) -> None:
        parent, child = self.ctx.Pipe()
        w.process = self.ctx.Process(target=worker_main, args=(child, self.config, w.device), daemon=False)  # it starts solution processes
        w.process.start()
        child.close()
        w.conn, w.ready, w.task, w.prestarting = parent, False, None, False
        w.phase, w.phase_since = (None, "starting"), time.monotonic()
        w.deadline = time.monotonic() + self.startup_timeout

    def _stop(self, w: _Worker) -> None:
        if w.process is not None and w.process.is_alive():
            from . import reaper

            # its solutions' processes first, and until they have exited: the worker's GPU turn ends with it, and a
            # process still running a kernel must not run beside another worker's timing
            try:
                os.kill(w.process.pid, signal.SIGSTOP)  # it starts no new process meanwhile
            except ProcessLookupError:
                pass
            below = [p for p in reaper.descendants(roots=[w.process.pid]) if p != w.process.pid]
            reaper.kill_trees(below)
            reaper.wait_exited(below)
            w.process.kill()
        if w.process is not None:
            w.process.join(5)
        if w.conn is not None:
            w.conn.close()

    def run(self, tasks: List[Task]) -> None:
        """Run the tasks. Processes that solutions leave behind (kda_trace/reaper.py) are killed as they turn up
        and at the end, and listed in `self.strays`."""
        from . import reaper

        queue = deque(tasks)
        solutions = list(dict.fromkeys(spec for task in tasks for spec in task.solutions))
        devices = self.config.devices or [self.config.device]
        turns = None
        if not self.config.gpu_turns_dir and any(devices.count(d) > 1 for d in devices if d.startswith("cuda")):
            from .gpu_turns import turns_folder

            turns = turns_folder()
            self.config = dataclasses.replace(self.config, gpu_turns_dir=turns)
        workers = [_Worker(dev) for dev in devices]
        reaping = reaper.become_subreaper()
        before = set(reaper.descendants())  # what this process had already (a test session's own helpers)
        # SIGTERM (`timeout`'s default signal, `kill`) ends the run as Ctrl-C does, with the cleanup below;
        # Python's default for it is to exit at once, leaving the workers to die_with_parent
        term = threading.current_thread() is threading.main_thread()
        previous_term = signal.signal(signal.SIGTERM, _interrupt) if term else None
        for w in workers:
            self._start(w)
        warming = self._start_precompile(tasks)  # while the workers start; no workload is given out before it ends
        interrupted = True  # until the loop ends normally: Ctrl-C, a `timeout` signal, an error of ours
        try:
            while queue or any(w.task is not None for w in workers):
                for w in workers:
                    if w.ready and not w.started and warming is not None and warming.is_alive():
                        # the solutions' processes start (imports, a CUDA context: about 10 s on an H200) while the
                        # precompile pass compiles, instead of after it
                        w.started = w.prestarting = True
                        w.deadline = time.monotonic() + self.startup_timeout
                        w.conn.send(StartSolutions(solutions))
                    if (w.ready and w.task is None and not w.prestarting and queue
                            and not (warming is not None and warming.is_alive())):
                        task = queue.popleft()
                        w.task, w.remaining = task, list(task.solutions)
                        self._set_phase(w, (None, "inputs"))
                        w.deadline = time.monotonic() + self.config.timeout
                        w.task_since, w.said_slow = time.monotonic(), False
                        self.on_event("begin", task)
                        w.conn.send(task)
                timeout = max(0.0, min(w.deadline for w in workers) - time.monotonic())
                if warming is not None and warming.is_alive():
                    timeout = max(timeout, 0.5)  # idle workers past their start-up deadline: no busy loop
                wait([w.conn for w in workers] + [w.process.sentinel for w in workers], timeout=min(timeout, 1.0))
                for w in workers:
                    self._poll(w, queue)
                    spent = time.monotonic() - w.task_since
                    if w.task is not None and not w.said_slow and spent > SLOW_EVALUATION_S:
                        w.said_slow = True
                        spec = w.phase[0]
                        self.on_event("slow", w.task, phase=w.phase[1], seconds=spent, device=w.device,
                                      solution=w.task.names.get(spec) if spec else None)
                # orphans that came to us: not a worker, not ours from before. Not while the precompile pass runs: its
                # processes are our children too, and nothing is timed then (orphans left by it are killed after)
                if reaping and not (warming is not None and warming.is_alive()):
                    self.strays += reaper.kill_strays(before | {w.process.pid for w in workers}, direct_only=True)
            interrupted = False
        finally:
            if interrupted:
                # A worker may be inside a long GPU call and not answer a polite stop for minutes, and whoever
                # interrupted us (`timeout -k`) may kill us first, orphaning the worker and its solutions' processes
                # with their GPU memory (an H200 calibration run met 31 GiB held by one): kill them all at once.
                pids = {w.process.pid for w in workers if w.process is not None and w.process.is_alive()}
                below = [p for p in reaper.descendants(roots=pids) if p not in pids]
                for w in workers:
                    if w.process is not None and w.process.pid in pids:
                        w.process.kill()  # multiprocessing's own child: reaped by it, in _stop
                reaper.kill_trees(below)
            else:
                for w in workers:
                    try:
                        w.conn.send(None)
                    except (OSError, ValueError):
                        pass
                deadline = time.monotonic() + 20.0  # a worker closes its solutions' processes before it exits
                for w in workers:
                    if w.process is not None:
                        w.process.join(max(0.0, deadline - time.monotonic()))
            for w in workers:
                self._stop(w)
            if reaping:  # the workers are gone: whatever is left under us now was left by a solution
                self.strays += reaper.kill_strays(before, direct_only=False)
            if term:
                signal.signal(signal.SIGTERM, previous_term)
            if turns is not None:
                shutil.rmtree(turns, ignore_errors=True)

    def _start_precompile(self, tasks: List[Task]) -> Optional[threading.Thread]:
        """The precompile pass (kda_trace/precompile.py) in a thread of its own, or None when the run has none. Told
        through on_event: "precompile" (items=, large=: the calls over PRECOMPILE_MAX_BYTES, processes=, max_s=: its
        limit) when it starts, "precompiled" (ran=, failed=, left=, seconds=, ended=: per solution name, when its
        calls ended) when it ends; its calls' seconds go to
        the profile as the "precompile" of their definitions."""
        from .precompile import limit_s, plan, precompile

        items = plan(tasks, task_bytes) if self.config.precompile > 0 else []
        if not items:
            return None
        max_s = limit_s(len({item.spec for item in items}))
        lock = threading.Lock()

        def charge(definition: str, solution: str, seconds: float) -> None:
            if self.profile is not None:
                with lock:
                    self.profile.charge("precompile", definition, solution, "precompile", seconds)

        def run() -> None:
            started = time.monotonic()
            large = sum(item.large for item in items)
            self.on_event("precompile", None, items=len(items) - large, large=large, processes=self.config.precompile,
                          max_s=max_s)
            ended: Dict[str, float] = {}
            ran, failed, left = precompile(items, self.config, self.config.precompile,
                                           lambda w: pinned_files(self.config, w), charge, max_s, ended)
            seconds = time.monotonic() - started
            if self.profile is not None:
                self.profile.precompiled(seconds, ended)
            self.on_event("precompiled", None, ran=ran, failed=failed, left=left, seconds=seconds, ended=ended)

        thread = threading.Thread(target=run, daemon=True, name="kda-trace precompile")
        thread.start()
        return thread

    def _set_phase(self, w: _Worker, phase: Tuple[Optional[str], str]) -> None:
        """Charge the time since the last phase change to that phase (self.profile), then enter `phase`."""
        now = time.monotonic()
        if self.profile is not None:
            spec, name = w.phase
            task = w.task
            self.profile.charge(w.device, task.definition.name if task is not None else None,
                                task.names.get(spec, spec) if task is not None and spec is not None else spec,
                                name, now - w.phase_since, task.workload.uuid if task is not None else None)
        w.phase, w.phase_since = phase, now

    def _log_phase(self, w: _Worker) -> None:
        """A line per phase in $KDA_TRACE_PHASE_LOG when set: where a long evaluation spends its time, and how
        much host memory the machine had left at each step (tab-separated: unix time, device, workload,
        solution, phase, MemAvailable in GB)."""
        path = os.environ.get(PHASE_LOG_ENV)
        if not path or w.task is None:
            return
        try:
            with open("/proc/meminfo") as f:
                available = next((int(line.split()[1]) / 1e6 for line in f if line.startswith("MemAvailable:")), -1.0)
        except OSError:
            available = -1.0
        with open(path, "a") as f:
            f.write(f"{time.time():.2f}\t{w.device}\t{w.task.workload.uuid[:8]}\t{w.phase[0] or '-'}\t"
                    f"{w.phase[1]}\t{available:.1f}\n")

    def _poll(self, w: _Worker, queue: deque) -> None:
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "ready":
                    w.ready = True
                    self._set_phase(w, (None, "idle"))
                elif msg[0] == "refused":
                    raise RuntimeError(f"worker process for {w.device}: {msg[1]}")
                elif msg[0] == "phase":
                    allowed = self.startup_timeout if msg[2] == HOST_STARTING else self.config.timeout
                    if msg[2] == WAITING_FOR_GPU:
                        allowed = math.inf
                    self._set_phase(w, (msg[1], msg[2]))
                    w.deadline = time.monotonic() + allowed
                    self._log_phase(w)
                elif msg[0] == "record":
                    try:
                        trace = Trace.model_validate_json(msg[1])
                    except ValueError as e:  # a bug of ours: keep the run going and say so
                        spec = w.phase[0] or w.remaining[0]
                        trace = make_record(w.task.definition, w.task.workload, w.task.names[spec], S.RUNTIME_ERROR,
                                            self.environment, f"internal error: unreadable record: {e}")
                    spec = next((s for s in w.remaining if w.task.names[s] == trace.solution), None)
                    if spec is not None:
                        w.remaining.remove(spec)
                    self.on_record(w.task.definition, trace)
                elif msg[0] == "started":
                    w.prestarting = False
                    self._set_phase(w, (None, "idle"))
                elif msg[0] == "done":
                    self._set_phase(w, (None, "idle"))
                    self.on_event("end", w.task, seconds=time.monotonic() - w.task_since)
                    w.task, w.remaining = None, []
                elif msg[0] == "fatal":
                    pass  # the process exits; handled below as a restart without blame
        except (EOFError, OSError):
            pass
        alive = w.process.is_alive()
        timed_out = time.monotonic() > w.deadline and (w.task is not None or not w.ready or w.prestarting)
        if alive and not timed_out:
            return
        if not w.ready and w.task is None:  # died or hung while starting
            if not alive:
                raise RuntimeError(f"worker process for {w.device} failed to start (exit code {w.process.exitcode})")
            raise RuntimeError(f"worker process for {w.device} did not start within {self.startup_timeout:.0f} s")
        if alive:
            self._stop(w)
            blame = f"timed out after {self.config.timeout:g} s (--timeout) in phase {w.phase[1]!r}"
            status = S.TIMEOUT
        else:
            w.process.join(5)
            blame = f"the worker process died ({describe_exit(w.process.exitcode)}) in phase {w.phase[1]!r}"
            status = S.RUNTIME_ERROR
            self._stop(w)
        task, remaining, (spec, phase) = w.task, list(w.remaining), w.phase
        if task is not None:
            self.on_event("end", task, seconds=time.monotonic() - w.task_since)
        self.restarts += 1
        self._start(w)
        if task is None:
            return
        if spec is None and remaining:  # the worker's own phases, before any solution ran
            kind = S.INVALID_WORKLOAD if phase.startswith("inputs") else S.INVALID_REFERENCE
            for s in remaining:
                self.on_record(task.definition, make_record(task.definition, task.workload, task.names[s], kind,
                                                            self.environment, f"{phase} of workload "
                                                            f"{task.workload.uuid}: {blame}"))
            return
        if spec is not None and spec in remaining:
            self.on_record(task.definition, make_record(task.definition, task.workload, task.names[spec], status,
                                                        self.environment, f"workload {task.workload.uuid}: {blame}"))
            remaining.remove(spec)
        if remaining:
            queue.appendleft(Task(task.definition, task.workload, remaining, task.names))
