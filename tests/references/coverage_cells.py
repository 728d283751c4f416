"""Coverage cells: which option values a definition claims, and which reference tests exercise them.

A cell is (family, axis, value), e.g. ("prefill", "gate", "safe"). A definition *claims* the cells read
from its tags, axes and inputs (`claimed_cells`). A test *declares* the cells it exercises with the
`@covers(family, axis=(values...))` decorator; the declaration is read two ways:
- statically, from the test files' syntax trees (`declarations`), so `kda-trace coverage` can show which
  tests cover which cells without running anything, and tests/references/test_coverage.py fails when a
  definition claims a cell that no test declares;
- at run time (conftest.py): the ground-truth adapters record what they really did (`observe`), and a
  test that declares an axis but did not exercise the value its definition claims fails, so a
  declaration cannot drift away from what the test does.

This module imports nothing from pytest at import time: `kda-trace coverage` can load it by path
(`load_module()` below shows how) and call `coverage_rows(dataset)`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# The axes of the coverage matrix and their values (in the order of the dataset's tags).
AXES: dict[str, tuple[str, ...]] = {
    "batch": ("dense", "varlen", "pool"),
    "direction": ("forward", "backward"),
    "gate": ("safe", "unbounded", "precomputed"),
    "beta": ("prob", "logits"),
    "qk_norm": ("l2", "none"),
    "initial_state": ("given", "absent"),
    "final_state": ("returned",),
    "gva": ("on", "off"),
    "kv_dims": ("equal", "differ"),
    "state_layout": ("kv", "vk"),
}
TAG_AXES = ("batch", "gate", "beta", "qk_norm", "state_layout")  # read from `key:value` tags
TESTS_DIR = Path(__file__).resolve().parent

Cells = dict[str, set[str]]


def family_of(definition) -> str:
    """The op family (`stage:` tag): prefill, forward, decode, mtp, backward or gate."""
    return definition.tag("stage") or definition.name.split("_")[1]


def _state_size(d):
    return d.const_axes.get("num_v_heads", 0) * d.const_axes.get("head_dim_v", 0), d.name


def representative(definitions):
    """The definition of a family that tests with fast='one' run in the fast tier: the smallest state."""
    return min(definitions, key=_state_size)


def covering(definitions) -> list:
    """The definitions of a family that tests with fast='cells' run in the fast tier: from the smallest state up,
    each one that claims a cell the ones before it do not (so together they claim every cell of the family)."""
    chosen, seen = [], set()
    for d in sorted(definitions, key=_state_size):
        cells = {(axis, value) for axis, values in claimed_cells(d).items() for value in values}
        if cells - seen:
            chosen.append(d)
            seen |= cells
    return chosen


def claimed_cells(definition) -> Cells:
    """Axis -> values this definition claims, from its tags, axes and inputs."""
    cells: Cells = {}
    for axis in TAG_AXES:
        for value in definition.tag_values.get(axis, []):
            cells.setdefault(axis, set()).add(value)
    family = family_of(definition)
    if "o" in definition.outputs or family == "backward":
        cells["direction"] = {"backward" if family == "backward" else "forward"}
    inputs, outputs = definition.inputs, definition.outputs
    if "initial_state" in inputs:
        cells["initial_state"] = {"given", "absent"} if inputs["initial_state"].optional else {"given"}
    elif "state_pool" in inputs:
        cells["initial_state"] = {"given"}
    if {"final_state", "new_state_pool"} & set(outputs) or "dht" in inputs:
        cells["final_state"] = {"returned"}
    axes = definition.const_axes
    if "num_heads" in axes and "num_v_heads" in axes:
        cells["gva"] = {"on" if axes["num_v_heads"] > axes["num_heads"] else "off"}
    if "head_dim_k" in axes and "head_dim_v" in axes:
        cells["kv_dims"] = {"differ" if axes["head_dim_k"] != axes["head_dim_v"] else "equal"}
    return cells


# ------------------------------------------------------------------------------------ declarations
def covers(family: str, **cells: Iterable[str]):
    """Decorator: this test exercises these cells of `family` (literal arguments only: they are also
    read from the source). Each value must be in AXES."""
    for axis, values in cells.items():
        unknown = set(values) - set(AXES.get(axis, ()))
        if unknown:
            raise ValueError(f"covers({family!r}): unknown {axis} values {sorted(unknown)} (known: {AXES.get(axis)})")
    import pytest

    return pytest.mark.kda_covers(family=family, cells={a: set(v) for a, v in cells.items()})


@dataclass
class Declaration:
    """One `@covers` on one test function."""

    test: str
    """`file.py::function`."""
    family: str
    cells: Cells
    tier: str
    """fast, slow or gpu (from the function's or module's pytest marks)."""
    fast: str = "all"
    """Parametrized with family_params(..., fast=...): "one" (in the fast tier for representative() only), "cells"
    (for covering() only) or "all"."""

    def tier_for(self, definition, family_definitions) -> str:
        if self.tier != "fast" or self.fast == "all":
            return self.tier
        fast = [representative(family_definitions)] if self.fast == "one" else covering(family_definitions)
        return self.tier if any(definition is d for d in fast) else "slow"


def _marks(decorators: list[ast.expr]) -> set[str]:
    names = set()
    for d in decorators:
        node = d.func if isinstance(d, ast.Call) else d
        if isinstance(node, ast.Attribute) and node.attr in ("slow", "large", "gpu", "stress"):
            names.add(node.attr)
    return names


def _slow_params(call: ast.Call) -> bool:
    """A parametrization whose params are all marked slow (or stress): conftest.workload_params(...) and
    test_ref_gate.gate_workloads(fast=False)."""
    name = getattr(call.func, "id", "")
    fast = [kw.value for kw in call.keywords if kw.arg == "fast"]
    return name == "workload_params" or (name == "gate_workloads" and bool(fast)
                                         and isinstance(fast[0], ast.Constant) and fast[0].value is False)


def declarations(tests_dir: Path = TESTS_DIR) -> list[Declaration]:
    """Every `@covers(...)` in tests_dir/test_*.py, read from the syntax trees (nothing is imported)."""
    out = []
    for path in sorted(Path(tests_dir).glob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        module_marks: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
                values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                module_marks |= _marks(values)
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            marks = module_marks | _marks(node.decorator_list)
            calls = [c for dec in node.decorator_list for c in ast.walk(dec) if isinstance(c, ast.Call)]
            if any(_slow_params(c) for c in calls):
                marks.add("slow")
            tier = "gpu" if "gpu" in marks else "slow" if marks & {"slow", "large", "stress"} else "fast"
            fast = next((ast.literal_eval(kw.value) for dec in node.decorator_list for c in ast.walk(dec)
                         if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "family_params"
                         for kw in c.keywords if kw.arg == "fast"), "all")
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "covers":
                    family = ast.literal_eval(d.args[0])
                    cells = {kw.arg: set(ast.literal_eval(kw.value)) for kw in d.keywords}
                    out.append(Declaration(f"{path.name}::{node.name}", family, cells, tier, fast))
    return out


# ------------------------------------------------------------------------------------ the matrix
@dataclass
class Row:
    """One claimed cell of one definition and the tests that cover it."""

    definition: str
    family: str
    axis: str
    value: str
    tests: list[tuple[str, str]] = field(default_factory=list)
    """(test, tier) pairs."""

    @property
    def covered(self) -> bool:
        return bool(self.tests)


def coverage_rows(definitions, decls: list[Declaration] | None = None) -> list[Row]:
    """For every definition and every cell it claims: the tests declaring that cell for its family."""
    decls = declarations() if decls is None else decls
    definitions = list(definitions)
    families: dict[str, list] = {}
    for d in definitions:
        families.setdefault(family_of(d), []).append(d)
    rows = []
    for d in sorted(definitions, key=lambda d: d.name):
        family = family_of(d)
        claimed = claimed_cells(d)
        # a test declared for some batch kinds (dense, varlen, pool) runs on those definitions only (the
        # backward family has dense and packed definitions, tested by different functions)
        mine = [x for x in decls if x.family == family
                and ("batch" not in x.cells or "batch" not in claimed or x.cells["batch"] & claimed["batch"])]
        for axis, values in sorted(claimed.items(), key=lambda kv: list(AXES).index(kv[0])):
            for value in sorted(values):
                tests = [(x.test, x.tier_for(d, families[family])) for x in mine if value in x.cells.get(axis, ())]
                rows.append(Row(d.name, family, axis, value, tests))
    return rows


def render_text(rows: list[Row]) -> str:
    """The matrix as plain text: one line per claimed cell; uncovered cells are marked."""
    lines = []
    for r in rows:
        tests = ", ".join(f"{t} [{tier}]" for t, tier in r.tests) or "NOT COVERED"
        lines.append(f"{r.definition:40s} {r.axis + '=' + r.value:26s} {tests}")
    return "\n".join(lines)


def load_module():
    """How code outside pytest (e.g. `kda-trace coverage`) loads this file by path."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("kda_reference_coverage", Path(__file__))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------ run-time records
class Observed:
    """What the ground-truth adapters did during one test: definition name -> axis -> values."""

    def __init__(self) -> None:
        self.cells: dict[str, Cells] = {}

    def add(self, definition_name: str, **cells: str) -> None:
        for axis, value in cells.items():
            assert value in AXES[axis], (axis, value)
            self.cells.setdefault(definition_name, {}).setdefault(axis, set()).add(value)


CURRENT: list[Observed] = []  # the record of the running test (set by conftest's fixture)


def observe(definition_name: str, **cells: str) -> None:
    """Record that the running test exercised these cells (no-op outside a guarded test)."""
    if CURRENT:
        CURRENT[-1].add(definition_name, **cells)


def missing_cells(definition, declared: Cells, observed: Cells) -> list[str]:
    """Declared axes whose claimed values this run did not exercise, as 'axis=value' strings."""
    claimed = claimed_cells(definition)
    out = []
    for axis, values in declared.items():
        for value in sorted(values & claimed.get(axis, set())):
            if value not in observed.get(axis, set()):
                out.append(f"{axis}={value}")
    return out
