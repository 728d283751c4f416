"""The solution interface every source of solutions (built-in, user file, Solution JSON) implements."""

from __future__ import annotations

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
