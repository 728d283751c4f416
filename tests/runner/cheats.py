"""Solutions that cheat, or hide one small defect, for any KDA definition (and the toy ones): test fixtures.

Each is used as `--solution tests/runner/cheats.py::NAME`. They compute the right answer with an honest
base (`CHEATS_BASE=reference`, the default, or `CHEATS_BASE=triton` for our kernels) and then break one small
thing or reach around the runner the way published benchmark exploits do:

| fixture | what it does | source |
|---|---|---|
| honest | the base, unchanged | |
| row_zeroed / row_from_neighbour / row_stale | one row (one token and head of the first output) zeroed, copied from the row before, or taken from another input set | the per-row bound's table |
| state_row_zeroed | one row of the last output (a final state, or a written slot of a state pool) zeroed | (ours) |
| patches_timer | `time.perf_counter` and `torch.cuda.Event.elapsed_time` report 1/100 of the time | kernelbot / pygpubench |
| patches_harness | replaces kda_trace.compare.compare_output (always passes) and torch.allclose, then returns zeros | KernelBench adversarial tests |
| thread_fill | returns empty outputs and fills them from a thread 2 ms later | pygpubench |
| side_stream | runs on a side stream and returns at once (GPU) | FlashInfer-Bench #228, kernelbot |
| side_stream_when_timed | in timed repetitions, runs on a side stream while the caller's stream sleeps for 0.6 of its time (GPU) | (ours: the host clock's slack) |
| returns_input_memory | writes its answer into an input's memory and returns that | KernelBench |
| gc_scan | looks for the expected outputs among live tensors (gc) and returns them | kernelbot |
| caller_frames | looks for the expected outputs in its callers' frames (inspect) | kernelbot |
| empty_like | returns torch.empty outputs, hoping for freed memory that held the reference's results | KernelBench |
| illegal_address | a Triton kernel writes far outside any tensor (GPU: the CUDA context is lost) | (ours) |
| forged_pass | sends 'PASSED' on the runner's own channel | (ours) |
| forges_trace_files | rewrites the run's trace files: others' passes become failures, a pass of its own is added | (ours) |
| content_cache | answers from a cache keyed on the inputs' shapes and a sample of their values | KernelBench, kernelbot |
| lazy_tensor | returns a torch.Tensor subclass that computes the answer when it is first read, after the clock stopped | SOL-ExecBench |
| lazy_when_timed | the same, but only inside the timing loop and not on its last repetition | SOL-ExecBench |
| pool_write_skipped_when_timed | right o, but in timed repetitions (not the last) the in-place state pool is returned unwritten | (ours: the digest of a pool is its difference from the input) |
| wrong_unless_judged_whole | zeros in timed repetitions (not the last) and in the untimed check call | (ours: the check call's verdict) |
| asks_seeds_ahead | in a call outside the timed repetitions, asks the judge for the first repetition's seed itself (to make those inputs and cache their answer ahead) | (ours: seeds are given just in time) |
| off_by_percent_when_timed | its first output 3% off in timed repetitions (not the last): beyond the tolerance, within a digest's 20% | (ours: the digest bound follows the output's tolerance) |
| rewrites_definitions | rewrites the dataset's definition files (tolerances 1e9): later runs would pass anything | (ours: same-user file access) |
| rewrites_stored_inputs | rewrites the dataset's stored input files with zeros (later workloads, everyone's) | (ours: same-user file access) |
| leaves_a_process | starts a detached process (double fork, new session) that rewrites its records to PASSED once the run has ended, and a child that stays | (ours: same-user processes) |
| timing_aware | inside the timing loop (found on its caller's stack), returns zeros except on the last repetition, the one it knows is checked | kernelbot, SOL-ExecBench |

`CHEATS_HONEST_DELAY_S` (seconds, default 0) makes every honest computation of the base that long, so that a
CPU test can tell a cached answer's time from an honest one.
"""

import gc
import os
import sys
import threading
import time

import torch

_definitions = {}


def supports(definition):
    _definitions["current"] = definition  # asked in the solution's process just before build
    return None


def _base_outputs(**inputs):
    d = _definitions["current"]
    if os.environ.get("CHEATS_BASE", "reference") == "triton" and d.op_type == "kda":
        from kda_trace.solutions.triton_kda import TritonSolution

        key = ("triton", d.name)
        if key not in _definitions:  # built once: the honest base costs the caller no more than the kernel itself
            _definitions[key] = TritonSolution(str(_device(inputs))).build(d, str(_device(inputs)))
    else:
        from kda_trace.reference import compile_reference

        key = ("reference", d.name)
        if key not in _definitions:
            _definitions[key] = compile_reference(d.reference, d.name, True)
    result = _definitions[key](**inputs)
    delay = float(os.environ.get("CHEATS_HONEST_DELAY_S", "0"))
    if delay:  # time.sleep(0) is no free call: it costs ~80 us on Linux (timer slack), a decode step's whole time
        time.sleep(delay)
    names = list(d.outputs)
    if isinstance(result, dict):
        return {n: result[n] for n in names}
    if isinstance(result, (tuple, list)):
        return dict(zip(names, result))
    return {names[0]: result}


def _device(inputs):
    return next(v.device for v in inputs.values() if isinstance(v, torch.Tensor))


def _rows(name, tensor):
    from kda_trace.compare import row_layout

    spec = _definitions["current"].outputs[name]
    size, _, _ = row_layout(tensor.shape, spec.shape or [])
    return tensor.view(-1, size)


def honest(**inputs):
    return _base_outputs(**inputs)


def row_zeroed(**inputs):
    out = _base_outputs(**inputs)
    name = next(iter(out))
    _rows(name, out[name])[-1] = 0
    return out


def row_from_neighbour(**inputs):
    out = _base_outputs(**inputs)
    name = next(iter(out))
    rows = _rows(name, out[name])
    rows[-1] = rows[-2]
    return out


def row_stale(**inputs):
    """The last row as another input set would give it (inputs with the signs of the floats flipped)."""
    out = _base_outputs(**inputs)
    other = _base_outputs(**{k: (-v if isinstance(v, torch.Tensor) and v.is_floating_point() and k not in
                                 _definitions["current"].inplace.values() else v) for k, v in inputs.items()})
    name = next(iter(out))
    _rows(name, out[name])[-1] = _rows(name, other[name])[-1]
    return out


def state_row_zeroed(**inputs):
    d = _definitions["current"]
    original = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    out = _base_outputs(**inputs)
    name = list(out)[-1]
    rows = _rows(name, out[name])
    source = d.inplace.get(name)
    if source is not None:  # a pool: zero a row that this call writes
        written = (rows != _rows(name, original[source])).any(dim=1).nonzero()
        rows[int(written[-1])] = 0
    else:
        rows[-1] = 0
    return out


def patches_timer(**inputs):
    real = time.perf_counter
    time.perf_counter = lambda: real() / 100
    if torch.cuda.is_available():
        real_elapsed = torch.cuda.Event.elapsed_time
        torch.cuda.Event.elapsed_time = lambda self, end: real_elapsed(self, end) / 100
    return _base_outputs(**inputs)


def patches_harness(**inputs):
    import kda_trace.compare as compare

    original = compare.compare_output

    def always_pass(*args, **kwargs):
        m = original(*args, **kwargs)
        m.passed, m.reason = True, ""
        return m

    compare.compare_output = always_pass
    torch.allclose = lambda *a, **k: True
    return {k: torch.zeros_like(v) for k, v in _base_outputs(**inputs).items()}


def thread_fill(**inputs):
    right = _base_outputs(**inputs)
    empty = {k: torch.zeros_like(v) for k, v in right.items()}

    def fill():
        time.sleep(0.002)
        for k in empty:
            empty[k].copy_(right[k])

    threading.Thread(target=fill).start()
    return empty


def side_stream(**inputs):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = _base_outputs(**inputs)
    return out  # no current_stream().wait_stream(stream): the caller's stream does not wait


def _shapes(inputs):
    """A key for the inputs' shapes."""
    return tuple((n, tuple(v.shape)) for n, v in sorted(inputs.items()) if isinstance(v, torch.Tensor))


def _event_ms(fn):
    """fn()'s GPU time on the current stream, by CUDA events, from an idle device."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def side_stream_when_timed(**inputs):
    """GPU: in timed repetitions but the last, the work on a side stream while the caller's stream sleeps for 0.6 of
    its time (measured once per input shapes): the caller's events see the sleep, the host clock between
    device-wide synchronisations sees it all, the outputs are complete once the device is idle. Honest elsewhere."""
    device = _device(inputs)
    if device.type != "cuda" or not _timed_but_not_last():
        return _base_outputs(**inputs)
    key = ("honest_ms", _shapes(inputs))
    if key not in _definitions:
        _definitions[key] = _event_ms(lambda: _base_outputs(**inputs))
    if "sleep_ms_per_cycle" not in _definitions:
        _definitions["sleep_ms_per_cycle"] = _event_ms(lambda: torch.cuda._sleep(10_000_000)) / 10_000_000
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    torch.cuda._sleep(int(0.6 * _definitions[key] / _definitions["sleep_ms_per_cycle"]))
    with torch.cuda.stream(side):
        out = _base_outputs(**inputs)
    return out


def returns_input_memory(**inputs):
    """Writes each output into an input tensor of the same shape and dtype and returns that input."""
    out = _base_outputs(**inputs)
    for name, value in out.items():
        for k, v in inputs.items():
            if isinstance(v, torch.Tensor) and v.shape == value.shape and v.dtype == value.dtype \
                    and k not in _definitions["current"].inplace.values():
                v.copy_(value)
                out[name] = v
                break
    return out


def _shaped_like_outputs(inputs):
    d = _definitions["current"]
    from kda_trace.inputs import torch_dtype

    axes = dict(d.const_axes)
    for name, spec in d.inputs.items():
        value = inputs.get(name)
        if isinstance(value, torch.Tensor) and spec.shape:
            axes.update(zip(spec.shape, value.shape))
    if "len_cu_seqlens" in axes:
        axes.setdefault("num_seqs", axes["len_cu_seqlens"] - 1)
    if all(a in axes for s in d.outputs.values() for a in s.shape or ()):
        return {n: (d.shape_of(s, axes) or [], torch_dtype(s.dtype)) for n, s in d.outputs.items()}
    # an output axis that no input has (chunk_states' num_chunks): one honest call shows the shapes. Its results are
    # overwritten before they are freed, so that a later torch.empty cannot hand them back as this fixture's answer
    key = ("shapes", d.name, _shapes(inputs))
    if key not in _definitions:
        from kda_trace.integrity import poison

        probe = _base_outputs(**{n: v.clone() if n in d.inplace.values() else v for n, v in inputs.items()})
        _definitions[key] = {n: (list(t.shape), t.dtype) for n, t in probe.items()}
        poison(probe)
        del probe
    return _definitions[key]


def gc_scan(**inputs):
    wanted = _shaped_like_outputs(inputs)
    mine = {id(v) for v in inputs.values()}
    found = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and id(obj) not in mine:
            for name, (shape, dtype) in wanted.items():
                if name not in found and list(obj.shape) == shape and obj.dtype == dtype:
                    found[name] = obj.clone()
    return {n: found.get(n, torch.zeros(s, dtype=t, device=_device(inputs))) for n, (s, t) in wanted.items()}


def caller_frames(**inputs):
    wanted = _shaped_like_outputs(inputs)
    found = {}
    for frame in _callers():
        for value in list(frame.f_locals.values()):
            candidates = value.values() if isinstance(value, dict) else [value]
            for c in candidates:
                for name, (shape, dtype) in wanted.items():
                    if isinstance(c, torch.Tensor) and name not in found and list(c.shape) == shape \
                            and c.dtype == dtype and all(c is not v for v in inputs.values()):
                        found[name] = c.clone()
    return {n: found.get(n, torch.zeros(s, dtype=t, device=_device(inputs))) for n, (s, t) in wanted.items()}


def empty_like(**inputs):
    return {n: torch.empty(s, dtype=t, device=_device(inputs)) for n, (s, t) in _shaped_like_outputs(inputs).items()}


def illegal_address(**inputs):
    import triton
    import triton.language as tl

    @triton.jit
    def poke(ptr):
        tl.store(ptr + (1 << 40), 1.0)

    out = _base_outputs(**inputs)
    t = next(iter(out.values()))
    poke[(1,)](t)
    torch.cuda.synchronize()
    return out


def forged_pass(**inputs):
    """Finds the runner's pipe in its own process and reports PASSED on it."""
    import json
    from multiprocessing.connection import Connection

    for obj in gc.get_objects():
        if isinstance(obj, Connection):
            try:
                obj.send_bytes(json.dumps({"kind": "status", "status": "PASSED", "log": ""}).encode())
            except OSError:
                pass
    return {k: torch.zeros_like(v) for k, v in _base_outputs(**inputs).items()}


def forges_trace_files(**inputs):
    """Rewrites the run's trace files: other solutions' records become failures, and a PASSED record is added
    under its own name. (The trace directory comes from CHEATS_TRACE_DIR, or ./kda-trace-out.)"""
    import json
    from pathlib import Path

    root = Path(os.environ.get("CHEATS_TRACE_DIR", "kda-trace-out")) / "traces"
    for path in root.glob("*/*.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        forged = []
        for r in records:
            if r["evaluation"]["status"] == "PASSED":
                mine = json.loads(json.dumps(r))
                mine["solution"] = "cheats.py::forges_trace_files"
                forged.append(mine)
                r["evaluation"]["status"] = "RUNTIME_ERROR"
        path.write_text("".join(json.dumps(r) + "\n" for r in records + forged))
    return {k: torch.zeros_like(v) for k, v in _base_outputs(**inputs).items()}


_cache = {}


def content_cache(**inputs):
    """A cache keyed on every input's shape and first and last few values: it hits whenever the same inputs
    come back, which a timing loop that repeats one input set does."""
    key = []
    for name, value in sorted(inputs.items()):
        if isinstance(value, torch.Tensor):
            flat = value.reshape(-1)
            key.append((name, tuple(value.shape), tuple(flat[:4].tolist()), tuple(flat[-4:].tolist())))
        else:
            key.append((name, value))
    key = tuple(key)
    if key not in _cache:
        _cache[key] = _base_outputs(**inputs)
    return {k: v.clone() for k, v in _cache[key].items()}


def _callers():
    """The frames on the caller's stack. Not inspect.stack(), which reads every frame's source lines: milliseconds
    per call, which hid the cheats' gains in their own host time."""
    f = sys._getframe(1)
    while f is not None:
        yield f
        f = f.f_back


def _timed_but_not_last():
    """True inside the harness's timing loop (found on the caller's stack) on a repetition before the last."""
    for f in _callers():
        if f.f_code.co_name in ("_time_cpu", "_time_gpu") and "reps" in f.f_locals and "i" in f.f_locals:
            return f.f_locals["i"] != f.f_locals["reps"] - 1
    return False


def _in_check_call():
    return any(f.f_code.co_name == "check" and "self" in f.f_locals
               and type(f.f_locals["self"]).__name__ == "_Host" for f in _callers())


def wrong_unless_judged_whole(**inputs):
    """Zeros in timed repetitions but the last and in the untimed check call too: right only on the calls it
    knows are compared whole (the first, and the last repetition)."""
    if _timed_but_not_last() or _in_check_call():
        return {n: torch.zeros(s, dtype=t, device=_device(inputs)) for n, (s, t) in _shaped_like_outputs(inputs).items()}
    return _base_outputs(**inputs)


def timing_aware(**inputs):
    """Honest, except inside the harness's timing loop on a repetition that is not the last one: zeros."""
    if _timed_but_not_last():
        return {n: torch.zeros(s, dtype=t, device=_device(inputs)) for n, (s, t) in _shaped_like_outputs(inputs).items()}
    return _base_outputs(**inputs)


def pool_write_skipped_when_timed(**inputs):
    """Right o, but in timed repetitions before the last an in-place state pool is left as it came (the state
    write, half of a decode step's memory traffic, skipped)."""
    d = _definitions["current"]
    skip = _timed_but_not_last()
    before = {source: inputs[source].clone() for source in d.inplace.values()} if skip else {}
    out = _base_outputs(**inputs)
    for name, source in d.inplace.items() if skip else ():
        inputs[source].copy_(before[source])  # the base may have written it in place: undo that
        out[name] = inputs[source]
    return out


class _Lazy(torch.Tensor):
    """Zeros until torch first touches it; then the honest answer is copied in."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for a in args:
            if isinstance(a, _Lazy) and getattr(a, "_pending", None) is not None:
                pending, a._pending = a._pending, None
                with torch._C.DisableTorchFunctionSubclass():
                    a.copy_(pending())
        return super().__torch_function__(func, types, args, kwargs or {})


def _lazy_outputs(inputs):
    right = {}

    def answer(name):
        if not right:
            right.update(_base_outputs(**inputs))
        return right[name]

    out = {}
    for name, (shape, dtype) in _shaped_like_outputs(inputs).items():
        t = torch.zeros(shape, dtype=dtype, device=_device(inputs)).as_subclass(_Lazy)
        t._pending = (lambda n=name: answer(n))
        out[name] = t
    return out


def lazy_tensor(**inputs):
    return _lazy_outputs(inputs)


def lazy_when_timed(**inputs):
    return _lazy_outputs(inputs) if _timed_but_not_last() else _base_outputs(**inputs)


def asks_seeds_ahead(**inputs):
    """Outside the timed repetitions (the first call, warm-ups), asks the judge for repetition 0's seed through
    the harness's own channel, as a cache that makes the timed inputs ahead would."""
    if not _timed_but_not_last():
        for obj in gc.get_objects():
            if type(obj).__name__ == "_Host" and hasattr(obj, "ask_seed"):
                try:
                    obj.ask_seed(0)
                except Exception:  # noqa: BLE001 - the judge may close the channel
                    pass
    return _base_outputs(**inputs)


def off_by_percent_when_timed(**inputs):
    """Right on the calls it knows are compared whole; in timed repetitions before the last its first output is 3%
    too large (what a cheaper, less exact path taken only when timed looks like: wrong by more than any
    output's tolerance, but within the 20% that a digest alone would let through)."""
    out = _base_outputs(**inputs)
    if _timed_but_not_last():
        first = next(iter(out))  # o (y for the toy): a state pool written in place would be judged by its writes
        out[first] = out[first] * 1.03
    return out


def rewrites_stored_inputs(**inputs):
    """Honest, but on its first call it rewrites every stored input file (safetensors) of the dataset with zeros
    of the same shapes: the later workloads' inputs, for everyone. It runs as the same user as the runner, so the
    files are writable. (The dataset directory comes from CHEATS_DATASET here; a real one would read it from
    its parent's command line.)"""
    root = os.environ.get("CHEATS_DATASET")
    if root and not _definitions.get("rewrote"):
        from pathlib import Path

        from safetensors.torch import load_file, save_file

        for path in Path(root).rglob("*.safetensors"):
            save_file({k: torch.zeros_like(v) for k, v in load_file(str(path)).items()}, str(path))
        _definitions["rewrote"] = True
    return _base_outputs(**inputs)


_LEFT_BEHIND = """
import json, os, sys, time
from pathlib import Path
if os.fork():  # double fork into a new session: an orphan that init (or a subreaper) adopts
    os._exit(0)
os.setsid()
out = Path(sys.argv[1])
for _ in range(600):  # at most a minute: until the runner has written its summary
    if (out / "summary.json").exists():
        break
    time.sleep(0.1)
time.sleep(0.5)
for path in (out / "traces").glob("*/*.jsonl"):
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in records:
        if r["solution"].endswith("leaves_a_process"):
            r["evaluation"]["status"] = "PASSED"
    path.write_text("".join(json.dumps(r) + "\\n" for r in records))
(out / "FORGED_BY_leaves_a_process").write_text("the run's records were rewritten after it ended")
"""


def leaves_a_process(**inputs):
    """Zeros; on its first call it starts a detached process (double fork, new session) that waits for the run's
    summary.json and then rewrites its own records to PASSED, and a plain child that just stays: the records
    on disk would say PASSED after the runner is done. (The run directory comes from CHEATS_TRACE_DIR.)"""
    import subprocess
    import sys

    if not _definitions.get("left"):
        _definitions["left"] = True
        out = os.environ.get("CHEATS_TRACE_DIR", "kda-trace-out")
        quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.Popen([sys.executable, "-c", _LEFT_BEHIND, out], start_new_session=True, **quiet)
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # leaves_a_process"], **quiet)
    return {k: torch.zeros_like(v) for k, v in _base_outputs(**inputs).items()}


def rewrites_definitions(**inputs):
    """Honest, but on its first call it rewrites every definition JSON of the dataset: every rtol / atol set to
    1e9 (later runs would pass anything), the description marked. (The dataset directory comes from
    CHEATS_DATASET.)"""
    import json
    from pathlib import Path

    root = os.environ.get("CHEATS_DATASET")
    if root and not _definitions.get("rewrote_definitions"):
        _definitions["rewrote_definitions"] = True

        def loosen(node):
            if isinstance(node, dict):
                return {k: (1e9 if k in ("rtol", "atol") else loosen(v)) for k, v in node.items()}
            if isinstance(node, list):
                return [loosen(v) for v in node]
            return node

        for path in Path(root).glob("definitions/**/*.json"):
            d = loosen(json.loads(path.read_text()))
            d["description"] = d.get("description", "") + " (rewritten by a solution)"
            path.write_text(json.dumps(d, indent=2))
    return _base_outputs(**inputs)
