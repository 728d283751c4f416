"""Checks that a solution did not reach around the runner, made in the solution's own process.

A solution runs in a process of its own (solution_host.py), so whatever it patches stays there. These checks
say whether it tried, so that its own record cannot lie either:
- `HarnessFingerprint`: the identity of every function and class attribute of the modules the harness relies
  on (torch, torch.cuda, time, threading, builtins, gc, kda_trace's own modules, the tensor and CUDA event
  classes) and the values of kda_trace's module constants (the checks' settings), taken before the solution
  is imported and compared after every call;
- `new_threads`: Python threads the solution left running after it returned;
- `foreign_memory`: outputs that share memory with an input (other than the in-place pairs the definition
  declares); `unusual_outputs`: outputs that are tensor subclasses or on another device;
- `snapshot` / `changed_after_return`: the outputs copied on the caller's stream the moment the call returned,
  then compared with the same tensors after the device is idle: work left on another stream or thread that is
  still writing them shows up as a difference;
- `output_digest` / `digest_mismatches`: a few numbers per output (its norm and random projections) taken after
  every timed repetition, so that the judge can check, afterwards, a repetition the solution could not know
  would be checked (runner.Worker.check_timed_repetition).
"""

from __future__ import annotations

import sys
import threading
import zlib
import time
import types
from typing import Any, Dict, Iterable, List, Optional, Set

import torch

WATCHED_MODULES = ("torch", "torch.cuda", "torch.nn.functional", "torch._C", "torch.testing", "torch.linalg",
                   "time", "threading", "builtins", "gc", "os", "multiprocessing.connection", "safetensors.torch",
                   "json", "pickle", "statistics")
WATCHED_CLASSES = (torch.Tensor, torch._C.TensorBase, torch.cuda.Event, torch._C._CudaEventBase, torch.cuda.Stream,
                   torch.Generator, threading.Thread)
AFTER_RETURN_WAIT_S = 0.02
"""How long the outputs must stay unchanged after the call returned and the device went idle (a thread that
fills them 2 ms later is seen)."""


_CONSTANT_TYPES = (int, float, str, bytes, bool, tuple, frozenset, type(None))


def _identity(value: Any) -> int:
    code = getattr(value, "__code__", None)  # a replaced function body keeps the function object
    return hash((id(value), id(code) if code is not None else 0))


class HarnessFingerprint:
    """Who is who among the harness's functions and classes; `changes` names what a solution replaced."""

    def __init__(self, entries: Dict[str, int]):
        self.entries = entries

    @classmethod
    def capture(cls) -> "HarnessFingerprint":
        entries: Dict[str, int] = {}
        names = list(WATCHED_MODULES) + sorted(n for n in sys.modules if n == "kda_trace" or n.startswith("kda_trace."))
        for name in names:
            module = sys.modules.get(name)
            if module is None:
                continue
            entries[f"sys.modules[{name!r}]"] = id(module)
            ours = name == "kda_trace" or name.startswith("kda_trace.")
            for attr, value in list(vars(module).items()):
                if callable(value) or isinstance(value, types.ModuleType):
                    entries[f"{name}.{attr}"] = _identity(value)
                    if isinstance(value, type) and getattr(value, "__module__", "").startswith("kda_trace"):
                        cls._add_class(entries, f"{name}.{attr}", value)
                elif ours and isinstance(value, _CONSTANT_TYPES):  # the checks' settings: GATE_CYCLES, slacks...
                    try:
                        entries[f"{name}.{attr}"] = hash(("constant", type(value).__name__, value))
                    except TypeError:  # a tuple holding something unhashable
                        pass
        for klass in WATCHED_CLASSES:
            cls._add_class(entries, f"{klass.__module__}.{klass.__qualname__}", klass)
        return cls(entries)

    @staticmethod
    def _add_class(entries: Dict[str, int], prefix: str, klass: type) -> None:
        # every name the class resolves, inherited ones included (a patch may shadow a base class's method),
        # read from the class dictionaries as they are: getattr would make a new bound method each time
        seen = set()
        for base in klass.__mro__:
            for attr, value in list(vars(base).items()):
                if attr in seen:
                    continue
                seen.add(attr)
                if callable(value) or isinstance(value, (property, staticmethod, classmethod)):
                    entries[f"{prefix}.{attr}"] = _identity(value)

    def changes(self, now: Optional["HarnessFingerprint"] = None) -> List[str]:
        """Entries replaced or removed since this fingerprint was taken (new names are not changes)."""
        now = now or HarnessFingerprint.capture()
        return sorted(k for k, v in self.entries.items() if now.entries.get(k) != v)


def live_threads() -> Set[int]:
    return {t.ident for t in threading.enumerate() if t.is_alive()}


def new_threads(before: Set[int]) -> List[str]:
    """Names of Python threads alive now that were not alive in `before`."""
    return [t.name for t in threading.enumerate() if t.is_alive() and t.ident not in before]


def _storage_span(t: torch.Tensor) -> Optional[tuple]:
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    start = storage.data_ptr()
    return (t.device, start, start + storage.nbytes()) if storage.nbytes() else None


def foreign_memory(outputs: Dict[str, Any], inputs: Dict[str, Any], inplace: Dict[str, str]) -> List[str]:
    """'output o shares memory with input q' for every output that lives in an input's memory, except an
    in-place output in its own input (Definition.inplace)."""
    spans = {name: _storage_span(v) for name, v in inputs.items() if isinstance(v, torch.Tensor)}
    found = []
    for out_name, value in outputs.items():
        if not isinstance(value, torch.Tensor):
            continue
        mine = _storage_span(value)
        if mine is None:
            continue
        for in_name, span in spans.items():
            if span is None or inplace.get(out_name) == in_name or span[0] != mine[0]:
                continue
            if mine[1] < span[2] and span[1] < mine[2]:
                found.append(f"output {out_name!r} shares memory with input {in_name!r}")
    return found


def unusual_outputs(outputs: Dict[str, Any], device: str) -> List[str]:
    """Outputs that are not plain tensors on `device`. A tensor subclass can compute when it is first read
    (after the clock stopped: SOL-ExecBench's lazy-evaluation hack); a tensor elsewhere than the solution's
    device was made by work the device's clock did not see."""
    found = []
    want = torch.device(device)
    for name, value in outputs.items():
        if not isinstance(value, torch.Tensor):
            continue
        if type(value) is not torch.Tensor:
            found.append(f"output {name!r} is a {type(value).__module__}.{type(value).__qualname__}, not a plain "
                         "torch.Tensor")
        elif value.device.type != want.type or (want.index is not None and value.device.index != want.index):
            found.append(f"output {name!r} is on {value.device}, not on {device}")
    return found


_clone = torch.Tensor.clone  # captured at import, before any solution code runs


def snapshot(outputs: Any) -> Any:
    """Copies of the output tensors (in a dict, tuple or list, or one tensor), made on the current stream (so
    after everything the solution ordered there, and before anything it left elsewhere)."""
    if isinstance(outputs, torch.Tensor):
        return _clone(outputs)
    if isinstance(outputs, (tuple, list)):
        return type(outputs)(snapshot(o) for o in outputs)
    if isinstance(outputs, dict):
        return {k: snapshot(v) for k, v in outputs.items()}
    return outputs


def poison(outputs: Dict[str, Any]) -> None:
    """Overwrite a call's output tensors (NaN, or -1) once their copies are taken. Freed, their blocks may come back
    from torch's caching allocator as a later call's outputs (the held-back call's, on the same inputs); still holding
    this call's results, they would hide work that call left running on another stream, its outputs reading right
    the moment it returned."""
    with torch.inference_mode():  # which also writes inference tensors and leaves that require grad
        for value in outputs.values():
            if isinstance(value, torch.Tensor):
                value.fill_(float("nan") if value.is_floating_point() or value.is_complex() else -1)


def changed_after_return(live: Dict[str, Any], copies: Dict[str, Any], sync, wait_s: float = AFTER_RETURN_WAIT_S,
                         sleep=time.sleep) -> List[str]:
    """Outputs whose bits differ between the copies taken at return and the live tensors once the device is
    idle and `wait_s` has passed."""
    from .compare import bits_equal

    sync()
    sleep(wait_s)
    sync()
    changed = []
    for name, value in live.items():
        copy = copies.get(name)
        if isinstance(value, torch.Tensor) and isinstance(copy, torch.Tensor) and value.shape == copy.shape \
                and value.dtype == copy.dtype and not bool(bits_equal(value, copy).all()):
            changed.append(name)
    return changed


def describe(problems: Iterable[str], limit: int = 6) -> str:
    problems = list(problems)
    more = f" (+{len(problems) - limit} more)" if len(problems) > limit else ""
    return "; ".join(problems[:limit]) + more


DIGEST_PROJECTIONS = 4
DIGEST_SLICE = 1 << 22  # elements per slice: the projection vectors are drawn a slice at a time
DIGEST_RELATIVE = 0.2
"""How far two digests of one output may differ, relative to its norm. A projection of the difference
out - ref onto a random Gaussian vector has the size of |out - ref|: an honest output (RMS-relative error
<= 1e-2, the loosest default) moves it by about 1e-2 of the norm, 20x below this; a zeroed, stale or
wrong output moves it by about the whole norm (each of the 4 projections escapes with a chance of 0.16)."""


def output_digest(outputs: Dict[str, Any], seed: int, device: Optional[str] = None,
                  base: Optional[Dict[str, torch.Tensor]] = None) -> Dict[str, Dict[str, Any]]:
    """Per output tensor: its element count, 2-norm and DIGEST_PROJECTIONS projections onto Gaussian vectors
    drawn from `seed` (and the output's name) on `device` (default: the tensor's). Two processes that draw on
    the same kind of device get the same vectors, so the judge can digest its reference outputs and compare
    them with a digest made in the solution's process. An output named in `base` (an in-place state pool and
    the input it overwrites) is digested as its difference from that input: what the call wrote, not the
    untouched slots that would drown it (its own norm is kept too, as `full_norm`). Float64 sums; NaN and Inf
    carry through."""
    digests = {}
    base = base or {}
    for name, value in outputs.items():
        if not isinstance(value, torch.Tensor):
            continue
        before = base.get(name)
        before = before.detach().reshape(-1) if isinstance(before, torch.Tensor) and before.shape == value.shape \
            else None
        dev = torch.device(device) if device is not None else value.device
        gen = torch.Generator(device=dev)
        gen.manual_seed((seed ^ zlib.crc32(name.encode())) % (1 << 62))
        flat = value.detach().reshape(-1)
        proj = torch.zeros(DIGEST_PROJECTIONS, dtype=torch.float64, device=dev)
        square = torch.zeros((), dtype=torch.float64, device=dev)
        full = torch.zeros((), dtype=torch.float64, device=dev)
        for start in range(0, flat.numel(), DIGEST_SLICE):
            x = flat[start:start + DIGEST_SLICE].to(dev, torch.float64)
            if before is not None:
                full += x.square().sum()
                x = x - before[start:start + DIGEST_SLICE].to(dev, torch.float64)
            r = torch.randn(DIGEST_PROJECTIONS, x.numel(), generator=gen, device=dev, dtype=torch.float32)
            proj += r.to(torch.float64) @ x
            square += x.square().sum()
        digests[name] = {"n": flat.numel(), "norm": float(square.sqrt()), "proj": [float(p) for p in proj]}
        if before is not None:
            digests[name]["full_norm"] = float(full.sqrt())
    return digests


def inplace_bases(definition, inputs: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """{output: the input it overwrites} for a definition's in-place outputs (`output_digest`'s `base`)."""
    return {out: inputs[name] for out, name in definition.inplace.items() if isinstance(inputs.get(name), torch.Tensor)}


DIGEST_TOLERANCE_FACTOR = 2.0
"""With an output's RMS-relative tolerance `rel`, a timed repetition's digest may also differ from the
reference's by no more than this x rel x the reference's norm: usually far below DIGEST_RELATIVE, it is what
keeps a timed repetition from being a few percent wrong (cheats.py::off_by_percent_when_timed). An honest output
is within rel x norm, so a projection of its difference passes this with a chance of 95% at the very edge of
the tolerance and all but surely at a third of it; a mismatch only costs an untimed call on the same inputs,
which settles it (runner.check_timed_repetition, SAME_INPUTS_TOLERANCE_FACTOR)."""

SAME_INPUTS_TOLERANCE_FACTOR = 1.0
"""After a digest mismatch whose untimed call passed: the timed repetition's digest may differ from the untimed
call's by no more than this x rel x norm (a deterministic solution's are identical; atomics differ far less).
Further apart is INCORRECT_NUMERICAL: the solution's results vary from call to call by its whole tolerance."""


SAME_INPUTS_RELATIVE = 0.05
"""How far the digests of two calls of one solution on the same inputs (a timed repetition and the untimed
check call) may differ: run-to-run differences of an honest solution (atomics, another autotuned
configuration) are far below this; a timed call that missed the reference's digest by DIGEST_RELATIVE while an
untimed one is correct is far above it."""


def digest_mismatches(got: Dict[str, Dict[str, Any]], want: Dict[str, Dict[str, Any]],
                      atol: Dict[str, float], relative: Optional[float] = DIGEST_RELATIVE,
                      rms_rel: Optional[Dict[str, Optional[float]]] = None,
                      factor: float = DIGEST_TOLERANCE_FACTOR) -> Dict[str, float]:
    """Outputs whose digests differ by more than the smaller of two bounds: `relative` x the wanted norm + atol x
    sqrt(n) (none when `relative` is None) and, where `rms_rel` gives an output's RMS-relative tolerance rel,
    `factor` (DIGEST_TOLERANCE_FACTOR) x rel x the wanted norm (`full_norm` for an in-place output), or x atol x
    sqrt(n) where the reference's RMS is below atol: what compare_output lets an honest output be off by. The
    largest difference is given as a fraction of the bound (inf when non-finite or missing). The wanted digest is
    the judge's own: the bound never depends on what the solution's process reports."""
    bad = {}
    for name, w in want.items():
        g = got.get(name)
        if g is None or g.get("n") != w["n"] or len(g.get("proj", [])) != len(w["proj"]):
            bad[name] = float("inf")
            continue
        floor = atol.get(name, 0.0) * w["n"] ** 0.5
        bounds = [relative * w["norm"] + floor] if relative is not None else []
        rel = (rms_rel or {}).get(name)
        if rel is not None:
            whole = w.get("full_norm", w["norm"])  # compare_output's RMS-relative test, or atol below RMS atol
            bounds.append(factor * (rel * whole if whole >= floor else floor))
        if not bounds:
            continue
        bound = min(bounds)
        diffs = [0.0 if a == b or (a != a and b != b) else abs(a - b)  # equal, or both NaN (x != x: NaN)
                 for a, b in zip(g["proj"] + [g["norm"]], w["proj"] + [w["norm"]])]
        worst = max(diffs) if all(d == d for d in diffs) else float("inf")
        if worst != 0 and not worst <= bound:  # (worst 0: identical, even where the wanted norm is NaN)
            bad[name] = worst / bound if bound > 0 else float("inf")
    return bad


_WORD = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_CHECKSUM_SLICE = 1 << 24


def bit_checksum(t: torch.Tensor, device: Optional[str] = None) -> int:
    """A checksum of a tensor's bits, the same on every device: sum of word_i * (i * A + B) in wrapping 64-bit
    integer arithmetic, whose order does not matter. Any change of one element changes it; the judge compares
    the checksums of the inputs after a call (made in the solution's process) with its own. `device` (default:
    the tensor's) does the arithmetic, a slice at a time: a GPU sums a stress workload's inputs kept in host
    memory in seconds, where the host's cores took minutes."""
    flat = t.detach().contiguous().reshape(-1)
    words = flat.view(_WORD[flat.element_size()])
    where = torch.device(device) if device is not None else flat.device
    total = torch.zeros((), dtype=torch.int64, device=where)
    for start in range(0, words.numel(), _CHECKSUM_SLICE):
        w = words[start:start + _CHECKSUM_SLICE].to(where).to(torch.int64)
        idx = torch.arange(start, start + w.numel(), dtype=torch.int64, device=where)
        total += (w * (idx * 0x9E3779B97F4A7C1 + 0x632BE59BD9B4E01)).sum()
    return int(total)


def input_checksums(definition, inputs: Dict[str, Any], device: Optional[str] = None) -> Dict[str, int]:
    """bit_checksum (on `device`) of every tensor input a call may not write (all but the in-place ones)."""
    inplace = set(definition.inplace.values())
    return {n: bit_checksum(v, device) for n, v in inputs.items() if isinstance(v, torch.Tensor) and n not in inplace}
