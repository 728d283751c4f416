"""The solution interface every source of solutions (built-in, user file, Solution JSON) implements."""

from __future__ import annotations

import ast
from typing import Any, Callable, Protocol

RunFn = Callable[..., Any]
"""`run(**inputs)` returns the outputs: a tuple in the definition's output order, one tensor when the
definition has one output, or a dict keyed by output name."""


class Solution(Protocol):
    """A named implementation that may support some definitions."""

    name: str

    def supports(self, definition) -> str | None:
        """None when this solution can run `definition`, else the reason it cannot (listed as skipped)."""

    def build(self, definition, device: str) -> RunFn:
        """Return the `run` callable for `definition` on `device` (compile once, call many times)."""


def reference_constant(definition, name: str, default: Any = None) -> Any:
    """The value of a top-level `NAME = <literal>` in the definition's reference (e.g. the fused decode's
    NORM_EPS), else `default` (absent, not a literal, or a reference that does not parse)."""
    try:
        body = ast.parse(definition.reference or "").body
    except SyntaxError:
        return default
    for node in body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == name):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return default
    return default
