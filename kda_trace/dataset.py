"""Find, load and validate a dataset root: definitions/<op_type>/<name>.json and
workloads/<op_type>/<name>.jsonl.

Loading never stops at the first problem: every problem is collected with the file, the line (for
JSONL) and the field, and whatever is valid is still loaded, so one bad workload never hides the others.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

import jsonschema
from pydantic import ValidationError

from .schema import Definition, Generator, RandomInput, ScalarInput, Workload

SAFE_BUILTINS = {"min": min, "max": max, "abs": abs, "len": len, "sum": sum, "all": all, "any": any,
                 "True": True, "False": False, "None": None}


@dataclass
class Problem:
    """One thing wrong with a dataset file."""

    file: str
    """Path relative to the dataset root."""
    where: str
    """Line and/or field, e.g. 'line 3, field axes.batch_size'."""
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.message}" if self.where else f"{self.file}: {self.message}"


@dataclass
class WorkloadEntry:
    """A workload and where it came from."""

    workload: Workload
    file: str
    line: int


@dataclass
class Dataset:
    """A loaded dataset root; `problems` lists everything invalid that was skipped."""

    root: Path
    definitions: Dict[str, Definition] = field(default_factory=dict)
    definition_files: Dict[str, str] = field(default_factory=dict)
    workloads: Dict[str, List[WorkloadEntry]] = field(default_factory=dict)
    problems: List[Problem] = field(default_factory=list)

    def select(self, op_type: Optional[str] = None, names: Iterable[str] = (),
               tags: Iterable[str] = ()) -> List[Definition]:
        """Definitions matching every filter (names match exactly or as substrings; tags all present)."""
        names, tags = list(names), list(tags)
        chosen = []
        for d in self.definitions.values():
            if op_type and d.op_type != op_type:
                continue
            if names and not any(n == d.name or n in d.name for n in names):
                continue
            if tags and not all(t in d.tags for t in tags):
                continue
            chosen.append(d)
        return sorted(chosen, key=lambda d: d.name)

    def workloads_of(self, name: str) -> List[Workload]:
        """The valid workloads of a definition, in file order."""
        return [e.workload for e in self.workloads.get(name, [])]


def default_root() -> Path:
    """The dataset to use when none is given: $KDA_TRACE_DATASET, else the one in this repository."""
    env = os.environ.get("KDA_TRACE_DATASET")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent


@lru_cache(maxsize=None)
def _validator(model_name: str) -> jsonschema.protocols.Validator:
    from . import schema as models

    model = getattr(models, model_name)
    schema = model.model_json_schema()
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def schema_problems(model_name: str, data: Any) -> List[str]:
    """JSON-Schema errors of `data` as 'field a.b.c: message', sorted by path."""
    errors = sorted(_validator(model_name).iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    out = []
    for e in errors:
        path = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        message = e.message if len(e.message) < 300 else e.message[:300] + "..."
        out.append(f"field {path}: {message}")
    return out


def pydantic_problems(error: ValidationError) -> List[str]:
    """Pydantic errors as 'field a.b: message'."""
    out = []
    for e in error.errors():
        path = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if not path:  # a model-level check: its message starts with the field it is about
            path, _, rest = msg.partition(": ")
            if rest and " " not in path:
                msg = rest
            else:
                path, msg = "(top level)", e["msg"].removeprefix("Value error, ")
        out.append(f"field {path}: {msg}")
    return out


def _parse_model(model_name: str, data: Any):
    """(model, problems): JSON Schema first so errors point at a JSON path, then the model's checks."""
    from . import schema as models

    problems = schema_problems(model_name, data)
    if problems:
        return None, problems
    try:
        return getattr(models, model_name).model_validate(data), []
    except ValidationError as e:
        return None, pydantic_problems(e)


def load_dataset(root: Optional[Path | str] = None) -> Dataset:
    """Load and validate every definition and workload under `root`."""
    root = Path(root) if root is not None else default_root()
    ds = Dataset(root=root)
    if not root.is_dir():
        ds.problems.append(Problem(str(root), "", "dataset root does not exist or is not a directory"))
        return ds
    if not (root / "definitions").is_dir():
        ds.problems.append(Problem(str(root), "", "no definitions/ directory in the dataset root"))
        return ds
    for path in sorted((root / "definitions").glob("*/*.json")):
        _load_definition(ds, path)
    seen_uuids: Dict[str, str] = {}
    wl_dir = root / "workloads"
    for path in sorted(wl_dir.glob("*/*.jsonl")) if wl_dir.is_dir() else []:
        _load_workloads(ds, path, seen_uuids)
    return ds


def _rel(ds: Dataset, path: Path) -> str:
    try:
        return str(path.relative_to(ds.root))
    except ValueError:
        return str(path)


def _load_definition(ds: Dataset, path: Path) -> None:
    rel = _rel(ds, path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        ds.problems.append(Problem(rel, f"line {e.lineno}", f"not valid JSON: {e.msg}"))
        return
    except OSError as e:
        ds.problems.append(Problem(rel, "", f"cannot read: {e}"))
        return
    definition, problems = _parse_model("Definition", data)
    for p in problems:
        ds.problems.append(Problem(rel, p.split(":", 1)[0], p.split(":", 1)[1].strip()))
    if definition is None:
        return
    if definition.name != path.stem:
        ds.problems.append(Problem(rel, "field name", f"name {definition.name!r} does not match the file name {path.stem!r}"))
        return
    if definition.op_type != path.parent.name:
        ds.problems.append(Problem(rel, "field op_type", f"op_type {definition.op_type!r} does not match its directory {path.parent.name!r}"))
        return
    if definition.name in ds.definitions:
        ds.problems.append(Problem(rel, "field name", f"definition {definition.name!r} is also defined in {ds.definition_files[definition.name]}"))
        return
    ds.definitions[definition.name] = definition
    ds.definition_files[definition.name] = rel


def _load_workloads(ds: Dataset, path: Path, seen_uuids: Dict[str, str]) -> None:
    rel = _rel(ds, path)
    definition = ds.definitions.get(path.stem)
    if definition is None or definition.op_type != path.parent.name:
        ds.problems.append(Problem(rel, "", f"no valid definition named {path.stem!r} for these workloads"))
        return
    entries = ds.workloads.setdefault(definition.name, [])
    for lineno, text in enumerate(path.read_text().splitlines(), start=1):
        if not text.strip():
            continue
        where = f"line {lineno}"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            ds.problems.append(Problem(rel, where, f"not valid JSON: {e.msg} (column {e.colno})"))
            continue
        workload, problems = _parse_model("Workload", data)
        for p in problems:
            ds.problems.append(Problem(rel, f"{where}, {p.split(':', 1)[0]}", p.split(":", 1)[1].strip()))
        if workload is None:
            continue
        problems = check_workload(definition, workload)
        if workload.uuid in seen_uuids:
            problems.append(f"field uuid: duplicate uuid {workload.uuid!r} (first at {seen_uuids[workload.uuid]})")
        for p in problems:
            ds.problems.append(Problem(rel, f"{where}, {p.split(':', 1)[0]}", p.split(":", 1)[1].strip()))
        if problems:
            continue
        seen_uuids[workload.uuid] = f"{rel} line {lineno}"
        entries.append(WorkloadEntry(workload, rel, lineno))


def check_workload(definition: Definition, workload: Workload) -> List[str]:
    """Cross-checks of a workload against its definition, as 'field x: message' strings."""
    problems = []
    var_axes = set(definition.var_axes)
    for axis in sorted(var_axes - set(workload.axes)):
        problems.append(f"field axes.{axis}: missing value for var axis {axis!r}")
    for axis in sorted(set(workload.axes) - var_axes):
        kind = "a const axis" if axis in definition.axes else "not an axis of the definition"
        problems.append(f"field axes.{axis}: {axis!r} is {kind}")
    for name in definition.inputs:
        if name not in workload.inputs:
            problems.append(f"field inputs.{name}: missing input {name!r}")
    for name, source in workload.inputs.items():
        spec = definition.inputs.get(name)
        if spec is None:
            problems.append(f"field inputs.{name}: {name!r} is not an input of the definition")
        elif isinstance(source, ScalarInput) and spec.shape is not None:
            problems.append(f"field inputs.{name}: a scalar value for a tensor input of shape {spec.shape}")
        elif spec.shape is None and not isinstance(source, ScalarInput):
            problems.append(f"field inputs.{name}: scalar input needs {{'type': 'scalar', 'value': ...}}")
        elif isinstance(source, RandomInput):
            gen = source.generator or spec.generator
            if gen is not None and gen.kind == "none" and not spec.optional:
                problems.append(f"field inputs.{name}.generator: 'none' for an input that is not optional")
    if problems:
        return problems
    axes = {**definition.const_axes, **workload.axes}
    problems += _check_generators(definition, workload, axes)
    problems += check_constraints(definition, workload, axes)
    return problems


def generator_problem(name: str, gen: Generator, shape: Optional[list[int]], workload: Workload,
                      axes: Dict[str, int]) -> Optional[tuple[str, str]]:
    """(field, message) when a structural generator (`cu_seqlens`, `slot_indices`) cannot serve this
    workload, else None. The loader reports it; make_input raises it."""
    if gen.kind == "cu_seqlens":
        lens = workload.seq_lens
        if lens is None:
            return "seq_lens", f"input {name!r}: generator 'cu_seqlens' needs the workload's 'seq_lens'"
        if shape != [len(lens) + 1]:
            return "seq_lens", (f"input {name!r}: {len(lens)} seq_lens need shape [{len(lens) + 1}], "
                                f"the definition gives {shape}")
        if gen.total_axis and sum(lens) != axes.get(gen.total_axis):
            return "seq_lens", (f"input {name!r}: seq_lens sum to {sum(lens)} but axis {gen.total_axis!r} "
                                f"is {axes.get(gen.total_axis)}")
    elif gen.kind == "slot_indices":
        count = 1
        for d in shape or []:
            count *= d
        pad = gen.pad_rows or 0
        if pad:
            if not shape or pad > shape[0]:
                return "inputs", f"input {name!r}: pad_rows {pad} > the {shape[0] if shape else 0} rows of {shape}"
            count = count // shape[0] * (shape[0] - pad)
        first = gen.first_slot or 0
        if count > axes.get(gen.pool_axis, 0) - first:
            return f"axes.{gen.pool_axis}", (f"input {name!r}: {count} distinct slots asked from a pool of "
                                             f"{axes.get(gen.pool_axis)}"
                                             + (f" whose first {first} slot(s) are reserved" if first else ""))
    return None


def _check_generators(definition: Definition, workload: Workload, axes: Dict[str, int]) -> List[str]:
    problems = []
    for name, spec in definition.inputs.items():
        source = workload.inputs[name]
        gen = (source.generator if isinstance(source, RandomInput) else None) or spec.generator
        if not isinstance(source, RandomInput) or gen is None:
            continue
        problem = generator_problem(name, gen, definition.shape_of(spec, axes), workload, axes)
        if problem is not None:
            problems.append(f"field {problem[0]}: {problem[1]}")
    return problems


def check_constraints(definition: Definition, workload: Workload, axes: Dict[str, int]) -> List[str]:
    """Evaluate the definition's constraints for a workload. A constraint naming a tensor input cannot
    be checked before the tensor exists and is skipped here."""
    env: Dict[str, Any] = dict(axes)
    for name, source in workload.inputs.items():
        if isinstance(source, ScalarInput):
            env[name] = source.value
    if workload.seq_lens is not None:
        env["seq_lens"] = list(workload.seq_lens)
    problems = []
    for i, expr in enumerate(definition.constraints):
        if "__" in expr:
            problems.append(f"field constraints[{i}]: {expr!r}: dunder names are not allowed in constraints")
            continue
        try:
            ok = eval(compile(expr, "<constraint>", "eval"), {"__builtins__": SAFE_BUILTINS}, env)  # noqa: S307
        except NameError as e:
            missing = getattr(e, "name", None)
            if missing in definition.inputs:
                continue
            problems.append(f"field constraints[{i}]: {expr!r} names something unknown: {e}")
            continue
        except Exception as e:  # noqa: BLE001 - any failure is reported against the constraint
            problems.append(f"field constraints[{i}]: {expr!r} cannot be evaluated: {type(e).__name__}: {e}")
            continue
        if not ok:
            values = ", ".join(f"{k}={v}" for k, v in sorted(env.items()) if k in expr and k != "seq_lens")
            problems.append(f"field constraints[{i}]: {expr!r} does not hold ({values})")
    return problems


def resolve_root(spec: Optional[str]) -> Path:
    """A dataset given on the command line: a local directory, `hf://ORG/NAME[@rev]` (downloaded into
    the Hugging Face cache), or None for the default."""
    if spec is None:
        return default_root()
    if spec.startswith("hf://"):
        from .hub_download import download_dataset

        return download_dataset(spec)
    return Path(spec)


def is_remote(spec: Optional[str]) -> bool:
    """Whether a dataset spec points at the Hub (its references are untrusted code)."""
    return bool(spec) and spec.startswith("hf://")
