"""Every solution runs in a process of its own, apart from the judge.

The worker (runner.WorkerContext) makes the inputs, runs the reference and judges; it never imports solution
code. Each solution gets a `SolutionHost`: a spawned process that imports the solution, makes its own copies of
the workload's inputs from the same seeds, calls it, times it and hands back its outputs. So:
- a solution cannot read the reference's outputs, or memory that held them: they live in another process
  (KernelBench's freed-memory reuse, a `gc` scan for the expected tensor);
- whatever it patches (torch, time, the runner's modules) stays in its own process and cannot touch another
  solution's record; the host still reports it (integrity.HarnessFingerprint, checked after every call), so
  that its own record does not lie either;
- what comes back is data only: metadata as JSON and tensors as safetensors files, never a pickle that could
  run code in the judge.

Per evaluation the host: builds the solution for the definition (once), calls it on input set A, copies the
outputs on the caller's stream the moment it returns, checks them (threads left running, outputs changed after
return, memory shared with an input, a patched harness, changed inputs) and writes the copies; then, if the
judge found them correct, times it (every repetition on inputs of its own, from a seed the host asks the judge
for just before that repetition, so that no solution knows a repetition's inputs before it is timed; the last
repetition on input set B), writes the last call's outputs and replies with the digests of 8 repetitions'
outputs; the judge may then ask for one more, untimed call on one repetition's inputs (`check`).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

from .call_results import HIDDEN_WORK_LOG, HOST_STARTING
from .sandbox import SandboxUnavailable, enter_sandbox, is_sandboxed, is_sealed, sandbox_support, seal_sandbox

# ============================================================================ the solution's process


def host_main(conn, spec: str, device: str, trust_code: bool, dataset_root: str, workdir: str,
              code_digest: Optional[str] = None, sandbox: bool = False, ramdir: Optional[str] = None,
              env: Optional[Dict[str, str]] = None, seal: bool = False) -> None:
    """The solution process: requests in, JSON replies and safetensors files out (in `ramdir` when it has room,
    else in `workdir`); with `sandbox`, in a sandbox of its own (enter_sandbox), under its seccomp filter too with
    `seal` (seal_sandbox, once the CUDA context exists); `env` set first."""
    from .reaper import SOLUTION_ENV, die_with_parent

    os.environ.update(env or {})

    die_with_parent()  # with its worker
    sandboxed = False
    if sandbox:
        try:
            enter_sandbox(workdir, [ramdir] if ramdir else [], seal=seal)
            sandboxed = True
        except SandboxUnavailable as e:  # sandbox_support said it would work: say so, and run as without one
            print(f"kda_trace: solution {spec} runs without its sandbox: {e}", file=sys.stderr)
    # inherited by the processes the solution starts, so that one it leaves behind can be named (reaper.py)
    os.environ[SOLUTION_ENV] = spec
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from .environment import SourceChanged, check_code_digest

    try:
        check_code_digest(code_digest)
    except SourceChanged as e:
        conn.send_bytes(json.dumps({"kind": "refused", "log": str(e), "nonce": None}).encode())
        return
    try:
        baseline, registry = _start(device)
    except Exception as e:  # noqa: BLE001 - e.g. no room on the GPU for this process's CUDA context: said, not lost
        from .call_results import short_traceback

        conn.send_bytes(json.dumps({"kind": "start_failed", "log": short_traceback(e, limit=2),
                                    "nonce": None}).encode())
        return
    if sandboxed and seal:
        seal_sandbox()  # its CUDA context exists (the driver does not initialise under the filter); no solution code ran
    host = _Host(conn, spec, device, trust_code, Path(dataset_root), Path(workdir), baseline, registry,
                 Path(ramdir) if ramdir else None)
    from .run_profile import PythonProfile

    profile = PythonProfile("solution")
    conn.send_bytes(json.dumps({"kind": "ready", "nonce": None}).encode())
    while True:
        try:
            request = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            request = {"kind": "stop"}
        if request.get("kind") == "stop":
            profile.write()
            return
        host.handle(request)
        profile.checkpoint()
        if host.exit_after_reply:
            os._exit(3)


def _start(device: str):
    """The process's CUDA context and everything the checks use, imported before the harness's fingerprint is
    taken, and that before the solution is imported; torch._dynamo too, which wraps torch.manual_seed (and more)
    when a library first imports it. Returns (the fingerprint, the solution registry)."""
    from .platform import ensure_triton_can_run

    ensure_triton_can_run(device)
    import torch

    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        torch.cuda.synchronize(device)  # the CUDA context, made before the sandbox is sealed (seal_sandbox)
    import torch._dynamo  # noqa: F401

    from . import call_results, compare, inputs, integrity, timing  # noqa: F401
    from .solutions import registry

    return integrity.HarnessFingerprint.capture(), registry


UNTIMED_CONFIGS = [0]
"""Autotuning configs this process was asked to time, under `tune_by_compiling_only`: a precompile reply says
whether there were any (the pass then also calls its solution's large workloads, kda_trace/precompile.py)."""


def tune_by_compiling_only() -> None:
    """Make Triton's autotuner, in this process, compile and run each of a kernel's configs once instead of timing it
    (every config scores 0, so the first that compiles is taken). For the precompile pass only: its picks are thrown
    away (kda_trace/precompile.py removes the tuning results it leaves), and timings taken beside the pass's other
    processes would be disturbed. The run's own processes tune over the kernels compiled here. An autotuner that is
    not Triton's (or a subclass of it) is left as it is."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return

    def call_once(kernel_call, quantiles=None, **_):
        UNTIMED_CONFIGS[0] += 1
        kernel_call()  # compiles the config, as the timing would; what it fails with fails the same way
        return [0.0] * len(quantiles) if quantiles else 0.0

    # a property on the class: it takes precedence over an autotuner's own do_bench (a cached_property)
    Autotuner.do_bench = property(lambda self: call_once)


class _Host:
    def __init__(self, conn, spec, device, trust_code, dataset_root, workdir, baseline, registry, ramdir=None):
        self.conn, self.spec, self.device, self.trust_code = conn, spec, device, trust_code
        self.dataset_root, self.workdir, self.baseline, self.registry = dataset_root, workdir, baseline, registry
        self.ramdir = ramdir
        self.solution = None
        self.built: Dict[str, Any] = {}
        self.exit_after_reply = False
        self.pending = None  # (definition, workload, run, inputs_a, inputs_b, first_call_s, make): first -> time
        self.checkable = None  # (definition, workload, run) after "time", for a "check"
        self.unsaved = None  # (label, outputs) of a "first" or "time" asked with save_later, for a "save"
        self.nonce = None

    def reply(self, **fields) -> None:
        self.conn.send_bytes(json.dumps({**fields, "nonce": self.nonce}, default=str).encode())

    def phase(self, name: str) -> None:
        self.reply(kind="phase", phase=name)

    def fail(self, status: str, log: str, fatal: bool = False) -> None:
        self.pending = self.checkable = self.unsaved = None
        self.exit_after_reply = self.exit_after_reply or fatal
        self.reply(kind="status", status=status, log=log)

    def tampered(self, when: str) -> bool:
        changed = self.baseline.changes()
        if changed:
            from .integrity import describe

            self.fail("REWARD_HACK", f"the solution replaced parts of the harness or of torch ({when}): "
                      f"{describe(changed)}", fatal=True)  # a patched process is not reused
        return bool(changed)

    def handle(self, request: Dict[str, Any]) -> None:
        self.nonce = request.get("nonce")
        try:
            self._handle(request)
        finally:
            if self.device.startswith("cuda"):
                import torch

                # a process per solution: cached blocks would add up on the GPU. Between the requests of one
                # evaluation too: the worker reads this request's outputs back next (H200: our backward's 107 GiB
                # of cached blocks left the worker no room for 1.5 GiB of outputs); the next timed call's warm-up
                # takes the allocations again, outside the timed repetitions
                try:
                    ended = self.pending is None and self.unsaved is None
                    if ended and torch.cuda.memory_allocated() > CACHE_LIMIT_BYTES:
                        # an evaluation ended (or failed): tensors still allocated may sit in reference cycles. Seen
                        # once, cause not established: a process held a pool's size (8.7 GiB) after its evaluation
                        # ended with REWARD_HACK, and the next solution ran out of memory
                        gc.collect()
                    unused = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
                    if unused > CACHE_LIMIT_BYTES or (ended and torch.cuda.memory_reserved() > CACHE_LIMIT_BYTES):
                        torch.cuda.empty_cache()
                except Exception:  # noqa: BLE001 - a lost CUDA context: the process ends after its reply
                    self.exit_after_reply = True

    def _handle(self, request: Dict[str, Any]) -> None:
        try:
            if request["kind"] == "first":
                self.first(request)
            elif request["kind"] == "time":
                self.time(request)
            elif request["kind"] == "check":
                self.check(request)
            elif request["kind"] == "precompile":
                self.precompile(request)
            elif request["kind"] == "save":
                self.save_kept()
            elif request["kind"] == "skip":  # the judge found the first call wrong: no timing
                self.pending = None
                self.reply(kind="skipped")
        except Exception as e:  # noqa: BLE001 - the harness's own failure: still one record, not a hang
            from .call_results import is_fatal_cuda_error, short_traceback

            self.fail("RUNTIME_ERROR", f"{short_traceback(e)}", fatal=is_fatal_cuda_error(e))

    # ------------------------------------------------------------------ the first call, on input set A

    def first(self, request: Dict[str, Any]) -> None:
        from . import integrity
        from .inputs import InputError, RemadeInputs, clone_inputs, make_inputs, pin_input_files
        from .schema import Definition, Workload

        d = Definition.model_validate_json(request["definition"])
        w = Workload.model_validate_json(request["workload"])
        self.checkable = None
        run = self.build(d, request["name"])
        if run is None or self.tampered("while being imported or built"):
            return

        self.phase("inputs")
        pin_input_files({path: tuple(ident) for path, ident in (request.get("input_files") or {}).items()})
        # too large to keep (on_host): each set is made again from its seed whenever it is read
        make = RemadeInputs if request["on_host"] else make_inputs
        try:
            inputs_a = make(d, w, request["seed"], self.device, self.dataset_root)
            inputs_b = make(d, w, request["seed_b"], self.device, self.dataset_root)
            args = clone_inputs(inputs_a, self.device)
        except InputError as e:  # a stored input file changed during the run: nobody is judged on it
            self.fail("INVALID_WORKLOAD", str(e))
            return

        self.phase("run")
        called = self.call("the first call", f"workload {w.uuid}", d, run, args)
        if called is None:
            return
        copies, first_call_s = called
        checksums = integrity.input_checksums(d, args)  # compared by the judge with its own inputs
        del args
        if self.device.startswith("cuda"):
            self.phase("held-back call")
            if self.unjoined_streams(d, run, inputs_a, _syncer(self.device)):
                return
        self.save_or_keep("first", copies, request)
        self.pending = (d, w, run, inputs_a, inputs_b, first_call_s, make)
        self.reply(kind="first", first_call_s=first_call_s, input_checksums={n: str(c) for n, c in checksums.items()})

    def build(self, d, name: str):
        """The solution's callable for definition `d` (built once), or None after a failure reply."""
        from .call_results import is_fatal_cuda_error, short_traceback

        self.phase("build")
        try:
            if self.solution is None:
                self.solution = self.registry.resolve(self.spec, self.device, self.trust_code)
            if d.name not in self.built:
                reason = self.solution.supports(d) if hasattr(self.solution, "supports") else None
                self.built[d.name] = reason if reason is not None else self.solution.build(d, self.device)
            run = self.built[d.name]
        except Exception as e:  # noqa: BLE001
            self.fail("COMPILE_ERROR", f"building {name} for {d.name} failed: {short_traceback(e)}",
                      fatal=is_fatal_cuda_error(e))
            return None
        if isinstance(run, str):
            self.fail("UNSUPPORTED", run)
            return None
        return run

    def precompile(self, request: Dict[str, Any]) -> None:
        """One call on input set A whose outputs nobody reads (kda_trace/precompile.py): what it compiles stays in
        Triton's on-disk cache for the run's own processes."""
        from .call_results import is_fatal_cuda_error, short_traceback
        from .inputs import make_inputs, pin_input_files
        from .schema import Definition, Workload

        d = Definition.model_validate_json(request["definition"])
        w = Workload.model_validate_json(request["workload"])
        self.pending = self.checkable = None
        tune_by_compiling_only()
        run = self.build(d, request["name"])
        if run is None:
            return
        pin_input_files({path: tuple(ident) for path, ident in (request.get("input_files") or {}).items()})
        try:
            run(**make_inputs(d, w, request["seed"], self.device, self.dataset_root))
            _syncer(self.device)()
        except Exception as e:  # noqa: BLE001
            self.fail("RUNTIME_ERROR", short_traceback(e), fatal=is_fatal_cuda_error(e))
            return
        self.reply(kind="precompiled", autotuned=UNTIMED_CONFIGS[0] > 0)

    def call(self, which: str, where: str, d, run, args) -> Optional[tuple]:
        """One untimed call of `run` on `args`: (its outputs copied the moment it returned, seconds), or None
        after a failure reply (an exception, outputs of the wrong count, or what `after_call_problems` finds).
        `where` names the inputs in the error message."""
        from . import integrity
        from .call_results import is_fatal_cuda_error, normalize_outputs, short_traceback

        threads = integrity.live_threads()
        sync = _syncer(self.device)
        try:
            sync()
            t0 = time.perf_counter()
            outputs, why = normalize_outputs(d, run(**args))
            copies = integrity.snapshot(outputs) if outputs is not None else None
            sync()
            seconds = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001
            self.fail("RUNTIME_ERROR", f"{where}: {short_traceback(e)}", fatal=is_fatal_cuda_error(e))
            return None
        if outputs is None:
            self.fail("INCORRECT_SHAPE", f"{where}: {why}")
            return None
        if self.after_call_problems(which, d, outputs, copies, args, threads, sync):
            return None
        integrity.poison(outputs)
        return copies, seconds

    def unjoined_streams(self, d, run, inputs_a, sync) -> bool:
        """A second call with the caller's stream held back on the GPU (GATE_CYCLES) until the call has returned
        and its outputs' copies are queued behind the hold: work the call put on another stream after waiting
        for the caller's stream runs at the same moment as those copies, so the copies differ from the final
        outputs. (The first call cannot do this: it may include compilation, which outlasts any hold.)"""
        import torch

        from . import integrity
        from .call_results import normalize_outputs
        from .inputs import clone_inputs

        args = clone_inputs(inputs_a, self.device)
        sync()
        torch.cuda._sleep(GATE_CYCLES)
        outputs, _ = normalize_outputs(d, run(**args))
        if outputs is None:
            return False  # judged on the first call's outputs
        copies = integrity.snapshot(outputs)
        changed = integrity.changed_after_return(outputs, copies, sync, wait_s=0.0)
        if changed:
            self.fail("REWARD_HACK", f"outputs {changed} were still being written after the call returned: work on "
                      "another stream that the caller's stream does not wait for")
        return bool(changed)

    def after_call_problems(self, which, d, outputs, copies, args, threads, sync) -> bool:
        """REWARD_HACK for what a call left behind; True when one was found."""
        from . import integrity

        problems = integrity.unusual_outputs(outputs, self.device) + integrity.foreign_memory(outputs, args, d.inplace)
        problems += [f"output {n!r} changed after the call returned (work left running on another stream or "
                     "thread)" for n in integrity.changed_after_return(outputs, copies, sync)]
        alive = integrity.new_threads(threads)
        if alive:
            problems.append(f"threads started by the call were still running after it returned: {alive}")
        if problems:
            self.fail("REWARD_HACK", f"{which}: {integrity.describe(problems)}", fatal=bool(alive))
            return True
        return self.tampered(f"during {which}")

    # ------------------------------------------------------------------ timing, the last call on input set B

    def time(self, request: Dict[str, Any]) -> None:
        from . import integrity
        from .call_results import is_fatal_cuda_error, normalize_outputs, short_traceback
        from .inputs import InputError
        from .timing import TimingConfig, TimingTampered, measure

        if self.pending is None:
            self.fail("RUNTIME_ERROR", "internal error: timing asked for before a first call")
            return
        d, w, run, inputs_a, inputs_b, first_call_s, make = self.pending
        self.pending = None
        self.phase("timing")
        # every timed repetition but the last on inputs of its own, made as the first call's were (kept off the GPU:
        # one input at a time, as they are copied into the call's tensors)
        digest_seed = int(request["digest_seed"])
        rep_inputs = lambda i: make(d, w, self.ask_seed(i), self.device, self.dataset_root)  # noqa: E731
        digest = lambda outputs, inputs: _digest(d, outputs, inputs, digest_seed, self.device)  # noqa: E731
        threads = integrity.live_threads()
        try:
            timing = measure(run, inputs_a, self.device, TimingConfig(**request["timing"]), final_inputs=inputs_b,
                             estimate_s=first_call_s, mutable=set(d.inplace.values()), rep_inputs=rep_inputs,
                             digest=digest)
        except TimingTampered as e:
            self.fail("REWARD_HACK", f"timing: {e}")
            return
        except InputError as e:  # input set B, made again from its seed (inputs.RemadeInputs)
            self.fail("INVALID_WORKLOAD", str(e))
            return
        except Exception as e:  # noqa: BLE001
            self.fail("RUNTIME_ERROR", f"failed while timing: {short_traceback(e)}", fatal=is_fatal_cuda_error(e))
            return
        final, why = normalize_outputs(d, timing.final_outputs)
        copies, _ = normalize_outputs(d, timing.final_snapshot)
        if final is None or copies is None:
            self.fail("INCORRECT_SHAPE", f"second input set (last call of the timing loop): {why}")
            return
        if self.after_call_problems("the timing loop's last call", d, final, copies, {}, threads, _syncer(self.device)):
            return
        unusual = [(i, g[UNUSUAL]) for i, g in enumerate(timing.digests) if isinstance(g, dict) and UNUSUAL in g]
        if unusual:
            i, problems = unusual[0]
            self.fail("REWARD_HACK", f"timed repetition {i} of {len(timing.digests)}: {'; '.join(problems)}")
            return
        if timing.outside_stream_ms is not None:
            overhead = f", {timing.overhead_ms * 1e3:.3g} us of it this process's cost of an empty event pair" \
                if timing.overhead_ms is not None else ""
            if timing.honest_excess_ms is not None:
                overhead += f"; an honest GPU sleep as long showed {timing.honest_excess_ms * 1e3:.3g} us"
            self.fail("REWARD_HACK", f"{HIDDEN_WORK_LOG} {timing.median_ms:.4g} ms "
                      f"but each call took {timing.outside_stream_ms:.4g} ms between device-wide synchronisations "
                      f"(median excess {timing.excess_ms * 1e3:.3g} us{overhead}): work the events did not see (on "
                      "another stream not joined to the caller's, or before a timing event recorded again)")
            return
        self.save_or_keep("final", copies, request)
        self.checkable = (d, w, run)
        self.reply(kind="timed", times_ms=timing.times_ms, mode=timing.mode, notes=timing.notes,
                   wall_ms=timing.wall_ms, digests=timing.digests if digest is not None else None)

    def ask_seed(self, rep: int) -> int:
        """The seed of timed repetition `rep`, from the judge, asked for just before that repetition."""
        self.reply(kind="seed", rep=rep)
        answer = json.loads(self.conn.recv_bytes())
        if answer.get("kind") != "seed" or answer.get("nonce") != self.nonce:
            raise RuntimeError(f"the judge did not answer the seed request of repetition {rep}: {str(answer)[:200]}")
        return int(answer["seed"])

    def check(self, request: Dict[str, Any]) -> None:
        """One untimed call on the inputs of seed `seed` (a timed repetition's), its outputs written as 'check'."""
        from .inputs import make_inputs

        if self.checkable is None:
            self.fail("RUNTIME_ERROR", "internal error: a check asked for before timing")
            return
        d, w, run = self.checkable
        self.checkable = None
        self.phase("check")
        args = make_inputs(d, w, int(request["seed"]), self.device, self.dataset_root)
        called = self.call("the check call", f"the check call (seed {request['seed']})", d, run, args)
        if called is not None:
            self.save("check", called[0])
            self.reply(kind="checked")

    def save_or_keep(self, label: str, outputs: Dict[str, Any], request: Dict[str, Any]) -> None:
        """Write the outputs now, or keep them for the judge's "save" request when it asked with save_later (it
        holds the GPU alone for the request and writes outside that turn)."""
        self.unsaved = None
        if request.get("save_later"):
            self.unsaved = (label, outputs)
            return
        self.phase("save")
        self.save(label, outputs)

    def save_kept(self) -> None:
        if self.unsaved is None:
            self.fail("RUNTIME_ERROR", "internal error: a save asked for with no outputs kept")
            return
        (label, outputs), self.unsaved = self.unsaved, None
        self.phase("save")
        self.save(label, outputs)
        self.reply(kind="saved")

    def save(self, label: str, outputs: Dict[str, Any]) -> None:
        import torch

        tensors = {}
        for name, value in outputs.items():
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"output {name!r} is a {type(value).__name__}, not a tensor")
            tensors[name] = value.detach().contiguous()
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        folder = self.workdir
        if self.ramdir is not None and _room(self.ramdir) + _spare_bytes(self.ramdir) > nbytes + RAM_MARGIN_BYTES:
            folder = self.ramdir
        path = folder / _file_name(label, self.nonce)
        try:  # the file the judge read last, its pages kept: written over, not allocated again (SPARE_FILE)
            os.rename(folder / SPARE_FILE, path)
        except OSError:
            pass
        write_safetensors(path, tensors)


CACHE_LIMIT_BYTES = 1 << 30
"""A solution's process gives its cached GPU memory back after an evaluation when it holds more than this, and
after each request when more than this is cached but unused."""


RAM_MARGIN_BYTES = 1 << 30
"""Outputs go to the memory-backed directory only when it keeps this much free beside them."""
SPARE_FILE = "spare.safetensors"
"""An output file the judge has read is renamed to this in its folder (when the folder has room for another as
large: keep_as_spare), and the process's next output file is written over it: on a memory-backed file system,
allocating the pages is most of a write's cost (2.4 GB/s into a new file, 4.1-5.1 GB/s over one, 2-core CPU
machine). Only the solution's own earlier outputs are in it, and the judge reads only files named by a request's
nonce. A worker keeps one spare (runner.WorkerContext.end_task drops the others): spares are memory."""
SPARE_MAX_BYTES = 8 << 30
"""The largest output file kept as a spare (the main job's largest output, chunk states of 96 heads, is 8.1 GB)."""
RAM_DIR_PARENT = "/dev/shm"
"""Where a solution's outputs are written when there is room: a memory-backed file system. Handing a 1 GiB state
pool over as a safetensors file took 2.7 s on a disk-backed /tmp and 0.5 s on /dev/shm (2-core CPU machine); the
H200 machine's decode workloads spent 0.4 s each on it, the backward's 16 fused workloads 71 s."""


_SAFETENSORS_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
                       "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
                       "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}


def write_safetensors(path: Path, tensors: Dict[str, Any]) -> None:
    """Contiguous tensors -> a safetensors file, written from host memory as it is, or from a GPU through two
    pinned staging buffers (_write_staged): one pass of the host's memory, where safetensors' save_file makes
    three (a pageable copy to host memory, to bytes, to the file)."""
    import itertools

    import torch

    header, offset = {}, 0
    for name, t in tensors.items():
        dtype = _SAFETENSORS_DTYPES.get(str(t.dtype).replace("torch.", ""))
        if dtype is None:
            raise TypeError(f"output {name!r} has dtype {t.dtype}, which a safetensors file cannot hold")
        size = t.numel() * t.element_size()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    flats = [t.reshape(-1).view(torch.uint8) for t in tensors.values()]
    # an existing file (SPARE_FILE renamed) is written over and cut to length at the end, never truncated first
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "wb", buffering=0) as f:
        _write_all(f, len(head).to_bytes(8, "little") + head)
        for on_host, group in itertools.groupby(flats, key=lambda flat: flat.device.type == "cpu"):
            if on_host:
                for flat in group:
                    _write_all(f, flat.numpy())
            else:
                _write_staged(f, list(group))
        f.truncate()


def _write_staged(f, flats: list) -> None:
    """Flat uint8 tensors -> `f` through the two staging buffers: the copy of chunk i+1 to the host is queued
    (non_blocking, an event behind it) before chunk i is written (the write releases the GIL), so that the two
    overlap. A buffer is reused two chunks later, when its chunk was written."""
    with _STAGING_LOCK:
        buffers = _staging_buffers(pinned=any(flat.is_cuda for flat in flats))
        pending = None  # (staging slice, event): the chunk being copied, written next
        k = 0
        for flat in flats:
            for begin, end in _chunks(flat.numel()):
                part = buffers[k % 2][:end - begin]
                k += 1
                part.copy_(flat[begin:end], non_blocking=True)
                if pending is not None:
                    _write_part(f, *pending)
                pending = part, _recorded_event(flat.device)
        if pending is not None:
            _write_part(f, *pending)


def _write_part(f, part, event) -> None:
    if event is not None:
        event.synchronize()
    _write_all(f, part.numpy())


def _write_all(f, data) -> None:
    """All of `data` to the unbuffered file `f` (one write(2) may write less: at most 2 GiB on Linux)."""
    view, done = memoryview(data).cast("B"), 0
    while done < len(view):
        n = f.write(view[done:])
        if not n:
            raise OSError(f"a write of {len(view) - done} bytes wrote nothing")
        done += n


STAGING_BYTES = 64 << 20
"""The chunk in which outputs pass between a GPU and a file (both ways), through two pinned buffers of this size
per process (_staging_buffers)."""
MAX_HEADER_BYTES = 100 << 20
"""The longest header read_safetensors accepts (safetensors' own limit)."""
MAX_TENSORS = 4096
"""The most tensors a file read back may hold (a definition has a few outputs; a header of millions of empty tensors
would cost the judge time and memory)."""


class BadOutputFile(ValueError):
    """An output file that is not a well-formed safetensors file of the dtypes the runner writes."""


def read_safetensors(path: Path, device: str) -> Dict[str, Any]:
    """A safetensors file written by untrusted code -> its tensors on `device`. The header is checked first
    (_parse_header: known dtypes, byte counts that match the shapes, tensors that cover the data exactly, the
    file's size); then each tensor is allocated on `device` and filled by one read of the file into memory the
    judge owns (no mapping that could change after the check), by READ_THREADS threads (_read_parallel): straight
    into the tensor on the CPU (one copy, where safetensors.torch.load(read_bytes()) makes two: 1 GiB from
    /dev/shm in 0.65 s instead of 2.2 s, medians on a 2-core CPU machine), through pinned staging buffers for a
    GPU. Any problem with the file raises BadOutputFile; no room for its tensors raises
    torch's OutOfMemoryError (the judge's, not the file's: load_checked passes it on)."""
    import stat

    import torch

    try:  # not a link (to a device, say), and no wait for a writer on a FIFO
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise BadOutputFile(f"cannot open {path.name}: {e.strerror}") from None
    with open(fd, "rb", buffering=0):  # closes fd
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadOutputFile(f"{path.name} is not a regular file")
        size = st.st_size
        if size < 8:
            raise BadOutputFile(f"the file is truncated: {size} bytes, fewer than the header's 8-byte length")
        head_len = int.from_bytes(_pread_exact(fd, 8, 0), "little")
        if head_len > size - 8:
            raise BadOutputFile(f"the header's length ({head_len} bytes) is more than the file holds after it "
                                f"({size - 8} bytes)")
        if head_len > MAX_HEADER_BYTES:
            raise BadOutputFile(f"the header's length ({head_len} bytes) is over the limit of {MAX_HEADER_BYTES}")
        entries, data_len = _parse_header(_pread_exact(fd, head_len, 8))
        if size != 8 + head_len + data_len:
            raise BadOutputFile(f"the file has {size} bytes where its header says {8 + head_len + data_len} "
                                f"(8 + a {head_len}-byte header + {data_len} bytes of tensors): "
                                f"{'truncated' if size < 8 + head_len + data_len else 'bytes after the last tensor'}")
        target = torch.device(device)
        try:
            out = {name: torch.empty(shape, dtype=dtype, device=target) for name, dtype, shape in entries}
        except torch.OutOfMemoryError:
            raise
        except RuntimeError as e:  # a shape whose element count overflows (its bytes were 0: e.g. [0, 2**61, 2**61])
            raise BadOutputFile(f"a tensor's shape cannot be allocated: {e}") from None
        _read_parallel(fd, 8 + head_len, [t.reshape(-1).view(torch.uint8) for t in out.values()])
        if os.pread(fd, 1, size):
            raise BadOutputFile("the file grew while it was read")
    return out


def _parse_header(head: bytes) -> tuple:
    """A safetensors header -> ([(name, torch dtype, shape)] in the order of their data, the data's length), or
    BadOutputFile: a JSON object of entries {dtype, shape, data_offsets} (and an ignored __metadata__), each of a
    known dtype, a shape of non-negative ints and offsets [begin, end] with end - begin the shape's byte count, the
    entries side by side from offset 0 without gaps or overlaps."""
    import torch

    def unique(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise BadOutputFile(f"the header names a key twice: {sorted(k for k in set(keys) if keys.count(k) > 1)}")
        return dict(pairs)

    try:
        header = json.loads(head.decode("utf-8"), object_pairs_hook=unique)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # ValueError: JSONDecodeError, an int of 4300+ digits
        raise BadOutputFile(f"the header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise BadOutputFile(f"the header is a JSON {type(header).__name__}, not an object")
    tensors = len(header) - ("__metadata__" in header)
    if tensors > MAX_TENSORS:
        raise BadOutputFile(f"the header names {tensors} entries, over the limit of {MAX_TENSORS} tensors")
    dtypes = {code: getattr(torch, name) for name, code in _SAFETENSORS_DTYPES.items()}
    entries = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise BadOutputFile(f"tensor {name!r}: an entry needs exactly dtype, shape and data_offsets, not "
                                f"{str(entry)[:100]}")
        dtype = dtypes.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
        if dtype is None:
            raise BadOutputFile(f"tensor {name!r}: unknown dtype {str(entry['dtype'])[:50]!r} (known: "
                                f"{', '.join(dtypes)})")
        shape, offsets = entry["shape"], entry["data_offsets"]
        if not isinstance(shape, list) or not all(type(n) is int and 0 <= n < 1 << 62 for n in shape):
            raise BadOutputFile(f"tensor {name!r}: the shape {str(shape)[:100]} is not a list of non-negative ints")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(n) is int for n in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise BadOutputFile(f"tensor {name!r}: data_offsets {str(offsets)[:100]} are not [begin, end] with "
                                f"0 <= begin <= end")
        numel = 1
        for n in shape:
            numel *= n
        nbytes = numel * dtype.itemsize
        if offsets[1] - offsets[0] != nbytes:
            raise BadOutputFile(f"tensor {name!r}: data_offsets {offsets} hold {offsets[1] - offsets[0]} bytes, "
                                f"where shape {shape} of {entry['dtype']} needs {nbytes}")
        entries.append((offsets[0], offsets[1], name, dtype, shape))
    entries.sort(key=lambda e: (e[0], e[1]))
    end = 0
    for begin, stop, name, _, _ in entries:
        if begin != end:
            raise BadOutputFile(f"tensor {name!r} starts at byte {begin} of the data, where the tensor before it "
                                f"ends at {end}: {'overlapping' if begin < end else 'a gap between'} tensors")
        end = stop
    return [(name, dtype, shape) for _, _, name, dtype, shape in entries], end


READ_THREADS = 4
"""Threads that read an output file back at once: reading a memory-backed file is bound by each thread's copy (2
threads: 4.5 -> 8.3 GB/s, 4: 10 GB/s, from /dev/shm on a 2-core CPU machine)."""


def _read_parallel(fd: int, offset: int, flats: list, staged: Optional[bool] = None) -> None:
    """Flat uint8 tensors filled from file `fd` (their bytes one after the other from byte `offset`), in chunks of
    STAGING_BYTES read by up to READ_THREADS threads: straight into tensors in host memory, or, `staged` (the
    default for GPU tensors), into one pinned staging buffer per thread, whose copy to the tensor is queued
    (non_blocking, an event behind it) before the thread reads its next chunk into the buffer once that copy is
    done. Returns when every copy is done; the first error of any thread is raised."""
    jobs, at = [], offset
    for flat in flats:
        jobs += [(flat, begin, end, at + begin) for begin, end in _chunks(flat.numel())]
        at += flat.numel()
    if not jobs:
        return
    staged = any(flat.is_cuda for flat in flats) if staged is None else staged
    threads = min(READ_THREADS, len(jobs))
    taken, errors, lock = iter(jobs), [], threading.Lock()

    def work(buffer) -> None:
        event = None
        try:
            while not errors:
                with lock:
                    job = next(taken, None)
                if job is None:
                    break
                flat, begin, end, where = job
                if not staged:
                    _pread_exact(fd, memoryview(flat.numpy())[begin:end], where)
                    continue
                if event is not None:
                    event.synchronize()
                part = buffer[:end - begin]
                _pread_exact(fd, memoryview(part.numpy()), where)
                flat[begin:end].copy_(part, non_blocking=True)
                event = _recorded_event(flat.device)
            if event is not None:
                event.synchronize()
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
            errors.append(e)

    with _STAGING_LOCK:
        buffers = _staging_buffers(pinned=any(flat.is_cuda for flat in flats), count=threads) if staged \
            else [None] * threads
        pool = [threading.Thread(target=work, args=(buffers[k],), daemon=True) for k in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    if errors:
        raise errors[0]


def _pread_exact(fd: int, into, where: int) -> Any:
    """Fill `into` (a writable buffer, or a byte count: new bytes) from file `fd` at byte `where`."""
    if isinstance(into, int):
        return bytes(_pread_exact(fd, bytearray(into), where))
    view, done = memoryview(into).cast("B"), 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], where + done)
        if not n:
            raise BadOutputFile("the file ended early (it shrank while it was read)")
        done += n
    return into


def _chunks(nbytes: int):
    return ((begin, min(begin + STAGING_BYTES, nbytes)) for begin in range(0, nbytes, STAGING_BYTES))


def _recorded_event(device):
    """A CUDA event recorded on `device`'s current stream (where copy_ queued its copy), None off a GPU."""
    if device.type != "cuda":
        return None
    import torch

    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


_STAGING_LOCK = threading.Lock()
_STAGING: Dict[tuple, list] = {}


def _staging_buffers(pinned: bool, count: int = 2) -> list:
    """`count` buffers of STAGING_BYTES, pinned for a GPU, kept for the process's next call (held with
    _STAGING_LOCK). Only the latest kind and size are kept: at most max(2, READ_THREADS) x STAGING_BYTES per
    process."""
    import torch

    key = (pinned, STAGING_BYTES)
    if key not in _STAGING:
        _STAGING.clear()
        _STAGING[key] = []
    kept = _STAGING[key]
    while len(kept) < count:
        kept.append(torch.empty(STAGING_BYTES, dtype=torch.uint8, pin_memory=pinned))
    return kept[:count]


def _room(folder: Path) -> int:
    try:
        st = os.statvfs(folder)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def ram_dir() -> Optional[Path]:
    """A new directory for a solution's outputs under RAM_DIR_PARENT, or None where there is none to write."""
    parent = Path(RAM_DIR_PARENT)
    if not parent.is_dir() or not os.access(parent, os.W_OK) or _room(parent) <= RAM_MARGIN_BYTES:
        return None
    try:
        return Path(tempfile.mkdtemp(prefix="kda_trace_solution_", dir=parent))
    except OSError:
        return None


def _file_name(label: str, nonce: Optional[str]) -> str:
    """Output files carry the request's nonce: another process of the same user cannot plant or prepare one
    ahead of the request (the work directory is in the shared temp directory)."""
    return f"{label}-{nonce}.safetensors"


STOPPED_CHECK_S = 0.5
"""How often the worker looks whether a solution's process it waits for was stopped by a signal."""
GATE_CYCLES = 50_000_000
"""About 30 ms of GPU clock: longer than a compiled call's host time, short beside a workload's evaluation."""


def _digest(d, outputs, inputs, seed: int, device: str):
    """A timed repetition's digest, or {UNUSUAL: [...]} for outputs that are not plain tensors on the device
    (checked before anything reads them: a lazy tensor would compute when read, after the clock stopped)."""
    from .call_results import normalize_outputs
    from .integrity import inplace_bases, output_digest, unusual_outputs

    named, _ = normalize_outputs(d, outputs)
    if named is None:
        return None
    unusual = unusual_outputs(named, device)
    return {UNUSUAL: unusual} if unusual else output_digest(named, seed, device, inplace_bases(d, inputs))


UNUSUAL = "(unusual outputs)"


def _syncer(device: str):
    from . import timing

    return lambda: timing._sync(device)


# ============================================================================ the sandbox

class HostDied(Exception):
    """The solution's process ended during a request."""


class SolutionHost:
    """The worker's handle on one solution's process: started on first use, kept across workloads, started
    afresh after it died or was caught patching the harness."""

    def __init__(self, ctx, spec: str, device: str, trust_code: bool, dataset_root: Path, notify,
                 code_digest: Optional[str] = None, env: Optional[Dict[str, str]] = None):
        self.ctx, self.spec, self.device, self.env = ctx, spec, device, env
        self.code_digest = code_digest
        self.trust_code, self.dataset_root, self.notify = trust_code, dataset_root, notify
        self.process = self.conn = None
        self.nonce: Optional[str] = None  # the current request's; its output files are named with it
        self.definitions_called: set = set()
        """Definitions this process has been called on (its first call on one compiles and autotunes)."""
        self.workdir = Path(tempfile.mkdtemp(prefix="kda_trace_solution_"))
        self.ramdir = ram_dir()

    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def start(self) -> None:
        self.notify(self.spec, HOST_STARTING)
        self.definitions_called = set()
        parent, child = self.ctx.Pipe()
        self.process = self.ctx.Process(target=host_main, daemon=True, args=(
            child, self.spec, self.device, self.trust_code, str(self.dataset_root), str(self.workdir), self.code_digest,
            is_sandboxed(sandbox_support()), str(self.ramdir) if self.ramdir else None, self.env,
            is_sealed(sandbox_support())))
        self.process.start()
        child.close()
        self.conn = parent
        reply = self.receive()
        if reply.get("kind") == "refused":
            from .environment import SourceChanged

            raise SourceChanged(str(reply.get("log")))
        if reply.get("kind") == "start_failed":
            self.stop()
            raise HostDied(f"the solution's process could not start: {reply.get('log')}")
        if reply.get("kind") != "ready":
            raise HostDied(f"the solution's process did not start properly: {reply}")

    def request(self, seeds: Any = None, **fields) -> Dict[str, Any]:
        """Send a request; return the first reply that is not a phase (phases go to `notify`) or a seed request
        (answered by `seeds.seed(rep)`, runner.FreshReferences: each repetition once and in order). In a sandbox
        the solution's processes run only while a request of theirs is served: between requests all of them are
        stopped (SIGSTOP), so that a process a solution left running cannot load the CPU or queue GPU work while
        another solution is judged or timed."""
        if not self.alive():
            self.start()
        self._signal_tree(signal.SIGCONT)
        try:
            return self._request(seeds, **fields)
        finally:
            if self.alive():
                self._signal_tree(signal.SIGSTOP)

    def _signal_tree(self, sig: int) -> None:
        """Send `sig` to every process under the one started here, in a sandbox (where none of them can leave
        that tree: every process a solution starts stays in its PID namespace)."""
        if self.process is None or self.process.pid is None or not is_sandboxed(sandbox_support()):
            return
        from .reaper import descendants

        done: set = set()
        for _ in range(10):  # a process may fork while the others are being stopped
            pids = [p for p in descendants(self.process.pid) if p not in done]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            done.update(pids)

    def _request(self, seeds: Any = None, **fields) -> Dict[str, Any]:
        import secrets

        nonce = self.nonce = secrets.token_hex(8)
        self.conn.send_bytes(json.dumps({**fields, "nonce": nonce}).encode())
        given = 0
        while True:
            reply = self.receive()
            if reply.get("nonce") != nonce:  # e.g. a message the solution wrote on this channel itself
                return self._forged(f"a message on the runner's channel did not answer the runner's request: "
                                    f"{str(reply)[:200]}")
            if reply.get("kind") != "seed":
                return {**reply, "seeds_given": given} if seeds is not None else reply
            if seeds is None:
                return self._forged("a timing-loop seed was asked for outside the timing loop (by the solution, "
                                    "on the runner's channel)")
            if reply.get("rep") != given:
                return self._forged(f"a seed was asked for out of turn (repetition {reply.get('rep')!r}, "
                                    f"{given} given so far): a second asker on the runner's channel")
            self.conn.send_bytes(json.dumps({"kind": "seed", "seed": seeds.seed(given), "nonce": nonce}).encode())
            given += 1

    def _forged(self, log: str) -> Dict[str, Any]:
        self.stop()
        return {"kind": "status", "status": "REWARD_HACK", "log": log}

    def receive(self) -> Dict[str, Any]:
        from .call_results import describe_exit

        while True:
            try:
                while not self.conn.poll(STOPPED_CHECK_S):
                    self._resume_if_stopped()
                raw = self.conn.recv_bytes()
            except (EOFError, OSError):
                self.process.join(5)
                code = self.process.exitcode
                self.stop()
                raise HostDied(f"the solution's process died ({describe_exit(code)})") from None
            try:
                reply = json.loads(raw)
                if not isinstance(reply, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                self.stop()
                raise HostDied(f"the solution's process sent an unreadable reply ({e})") from None
            if reply.get("kind") == "phase":
                self.notify(self.spec, str(reply.get("phase")))
                continue
            return reply

    def _resume_if_stopped(self) -> None:
        """SIGCONT for a process stopped by a signal (SIGSTOP from another process of the same user, or from one
        it forked itself): a stopped solution would otherwise hang the run until --timeout. In a sandbox the
        solution's process is a grandchild of the one started here: every process under that one is looked at."""
        from .reaper import descendants, process_state

        if self.process is None or self.process.pid is None:
            return
        pids = [self.process.pid] + (descendants(self.process.pid) if is_sandboxed(sandbox_support()) else [])
        for pid in pids:
            if process_state(pid) in ("T", "t"):
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass

    def load(self, label: str, device: str) -> Dict[str, Any]:
        """The outputs the process wrote for `label` ('first', 'final' or 'check'), read as plain tensors on
        `device` (read_safetensors: checked, then read once into the judge's own memory)."""
        name = _file_name(label, self.nonce)
        path = self.workdir / name
        if self.ramdir is not None and (self.ramdir / name).exists():
            path = self.ramdir / name
        try:
            outputs = read_safetensors(path, device)
        except Exception as e:
            if type(e).__name__ != "OutOfMemoryError":  # kept for the judge's second try, once it has room
                path.unlink(missing_ok=True)
            raise
        keep_as_spare(path)
        return outputs

    def drop_spare(self) -> None:
        """Remove this process's spare output files (SPARE_FILE): the memory they hold goes back."""
        for folder in (self.workdir, self.ramdir):
            if folder is not None:
                try:
                    (folder / SPARE_FILE).unlink()
                except OSError:
                    pass

    def stop(self) -> None:
        self.drop_spare()
        if self.process is not None:
            self._signal_tree(signal.SIGCONT)  # stopped between requests: it must read the stop request
            if self.process.is_alive():
                try:
                    self.conn.send_bytes(json.dumps({"kind": "stop"}).encode())
                    self.process.join(2)
                except (OSError, ValueError):
                    pass
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.ramdir is not None:
            shutil.rmtree(self.ramdir, ignore_errors=True)


def keep_as_spare(path: Path) -> None:
    """An output file the judge has read becomes its folder's SPARE_FILE (replacing the one before) when it is at most
    SPARE_MAX_BYTES and the folder has room for another file as large beside it; else it is removed."""
    try:
        size = path.lstat().st_size
        if size <= SPARE_MAX_BYTES and _room(path.parent) > size + RAM_MARGIN_BYTES:
            os.replace(path, path.parent / SPARE_FILE)
            return
    except OSError:
        pass
    path.unlink(missing_ok=True)


def _spare_bytes(folder: Path) -> int:
    try:
        return (folder / SPARE_FILE).lstat().st_size
    except OSError:
        return 0


def load_checked(host: SolutionHost, label: str, device: str) -> tuple[Optional[Dict[str, Any]], str]:
    """The outputs of `label`, or (None, why) when the file is missing or unreadable. The judge's own GPU running out
    of memory for them is raised (runner.WorkerContext.with_room makes room and tries again): not the solution's."""
    try:
        return host.load(label, device), ""
    except Exception as e:  # noqa: BLE001 - a file the solution's process may have tampered with
        if type(e).__name__ == "OutOfMemoryError":
            raise
        return None, f"the solution's outputs could not be read back ({type(e).__name__}: {e})"
