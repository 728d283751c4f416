"""Resolve a `--solution` argument into a Solution.

Forms:
- a built-in name: `reference` (the definition's own code), `triton` (our kernels), `fla` (fla-core),
  `flashinfer` (flashinfer-python's recurrent_kda);
- a user file, `path/to/file.py::fn`: `fn(**inputs)` returns the outputs; the module may define
  `supports(definition) -> None | reason` to decline definitions;
- a FlashInfer-style Solution JSON file (schema.SolutionSpec): python / triton sources are written to a
  temporary directory and the entry point `file.py::fn` is imported from there; with
  `destination_passing_style` the function takes the outputs, allocated by the runner, after the inputs.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict

import torch
from pydantic import ValidationError

from ..dataset import pydantic_problems
from ..inputs import torch_dtype
from ..schema import Definition, SolutionSpec

BUILTIN = ("reference", "triton", "fla", "flashinfer")
DEFAULT_SOLUTIONS = ["triton"]
_module_ids = itertools.count()


class SolutionError(ValueError):
    """A --solution argument that cannot be resolved; the message names the argument."""


def _import_file(path: Path, extra_path: Path | None = None):
    name = f"kda_trace_user_{path.stem}_{next(_module_ids)}"
    if extra_path is not None and str(extra_path) not in sys.path:
        sys.path.insert(0, str(extra_path))  # let a multi-file solution import its siblings
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SolutionError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class FileSolution:
    """`path.py::fn` from the user's disk. Its module is imported only in the solution's own process
    (solution_host.py), so its optional `supports()` is asked there, per workload, not while the run is planned."""

    imports_user_code = True

    def __init__(self, path: str, fn: str):
        self.path, self.fn = Path(path), fn
        self.name = f"{self.path.name}::{fn}"
        self._module = None

    def _load(self):
        if self._module is None:
            self._module = _import_file(self.path.resolve())
        return self._module

    def supports(self, definition: Definition) -> str | None:
        try:
            module = self._load()
        except Exception:  # noqa: BLE001 - a module that fails to import fails in build: COMPILE_ERROR
            return None
        check = getattr(module, "supports", None)
        return check(definition) if callable(check) else None

    def build(self, definition: Definition, device: str) -> Callable[..., Any]:
        fn = getattr(self._load(), self.fn, None)
        if not callable(fn):
            raise SolutionError(f"{self.path}: no function named {self.fn!r}")
        return fn


class JsonSolution:
    """A FlashInfer-style Solution JSON file."""

    LANGUAGES = ("python", "triton")

    def __init__(self, path: str, spec: SolutionSpec):
        self.path, self.spec = path, spec
        self.name = spec.name
        self._fn = None

    def supports(self, definition: Definition) -> str | None:
        if definition.name != self.spec.definition:
            return f"solution {self.name!r} implements {self.spec.definition!r}"
        if self.spec.spec.language not in self.LANGUAGES:
            return f"language {self.spec.spec.language!r} is not supported (only {', '.join(self.LANGUAGES)})"
        return None

    def _entry(self) -> Callable[..., Any]:
        if self._fn is None:
            file_name, sep, fn_name = self.spec.spec.entry_point.partition("::")
            if not sep:
                raise SolutionError(f"{self.path}: entry_point {self.spec.spec.entry_point!r} is not 'file.py::function'")
            tmp = Path(tempfile.mkdtemp(prefix=f"kda_trace_{self.name}_"))
            for source in self.spec.sources:
                target = (tmp / source.path).resolve()
                if tmp.resolve() not in target.parents:
                    raise SolutionError(f"{self.path}: source path {source.path!r} leaves the solution directory")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(source.content)
            entry = tmp / file_name
            if not entry.is_file():
                raise SolutionError(f"{self.path}: entry_point file {file_name!r} is not among the sources")
            fn = getattr(_import_file(entry, tmp), fn_name, None)
            if not callable(fn):
                raise SolutionError(f"{self.path}: {file_name} has no function {fn_name!r}")
            self._fn = fn
        return self._fn

    def build(self, definition: Definition, device: str) -> Callable[..., Any]:
        fn = self._entry()
        if not self.spec.spec.destination_passing_style:
            return fn

        def run(**inputs):
            axes = _axes_from_inputs(definition, inputs)
            outs = [torch.empty(definition.shape_of(spec, axes) or [], dtype=torch_dtype(spec.dtype), device=device)
                    for spec in definition.outputs.values()]
            fn(*inputs.values(), *outs)
            return tuple(outs)

        return run


def _axes_from_inputs(definition: Definition, inputs: Dict[str, Any]) -> Dict[str, int]:
    """Axis values read off the input tensors' shapes (to allocate outputs for destination passing)."""
    axes = dict(definition.const_axes)
    for name, spec in definition.inputs.items():
        value = inputs.get(name)
        if isinstance(value, torch.Tensor) and spec.shape:
            for axis, size in zip(spec.shape, value.shape):
                axes.setdefault(axis, int(size))
    missing = [a for a in definition.axes if a not in axes]
    if missing:
        raise SolutionError(f"{definition.name}: cannot infer axes {missing} from the inputs to allocate outputs")
    return axes


def resolve(spec: str, device: str = "cpu", trust_code: bool = False):
    """The Solution named by a --solution argument; SolutionError when it cannot be resolved."""
    if spec == "reference":
        from .reference_solution import ReferenceSolution

        return ReferenceSolution(trust_code)
    if spec == "triton":
        from .triton_kda import TritonSolution

        return TritonSolution(device)
    if spec == "fla":
        from .fla_adapters import FlaSolution

        return FlaSolution(device)
    if spec == "flashinfer":
        from .flashinfer_adapters import FlashInferSolution

        return FlashInferSolution(device)
    if "::" in spec:
        path, _, fn = spec.rpartition("::")
        if not Path(path).is_file():
            raise SolutionError(f"--solution {spec!r}: file {path!r} does not exist")
        if not fn.isidentifier():
            raise SolutionError(f"--solution {spec!r}: {fn!r} is not a function name")
        return FileSolution(path, fn)
    if spec.endswith(".json"):
        if not Path(spec).is_file():
            raise SolutionError(f"--solution {spec!r}: file does not exist")
        try:
            data = json.loads(Path(spec).read_text())
        except json.JSONDecodeError as e:
            raise SolutionError(f"{spec}: line {e.lineno}: not valid JSON: {e.msg}") from None
        try:
            return JsonSolution(spec, SolutionSpec.model_validate(data))
        except ValidationError as e:
            raise SolutionError(f"{spec}: not a Solution: " + "; ".join(pydantic_problems(e))) from None
    raise SolutionError(f"--solution {spec!r}: not a built-in ({', '.join(BUILTIN)}), "
                        "a 'file.py::function' or a Solution .json file")
