"""Turn a definition's reference text into a callable, refusing unsafe code unless trusted.

A dataset can come from anywhere (a Hub download), so before executing its reference we read the
syntax tree: imports outside a small allowlist and any dunder attribute or name (the usual ways out of
a namespace: `__import__`, `().__class__.__mro__`, `__builtins__`) are refused unless `trust_code`.
This is a guard against a dataset running arbitrary code by accident or by casual malice, not a
sandbox for hostile code; `--trust-code` turns it off.
"""

from __future__ import annotations

import ast
from typing import Callable

ALLOWED_MODULES = frozenset({"torch", "math", "numpy", "typing", "functools", "itertools", "einops"})
# Builtins that reach outside the namespace or the file system.
FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "compile", "open", "input", "breakpoint", "globals", "locals", "vars",
    "getattr", "setattr", "delattr", "__import__", "memoryview",
})


class ReferenceError(Exception):
    """A reference that cannot be compiled or is refused; the message names the definition and line."""


def check_reference_source(source: str, name: str = "<reference>") -> list[str]:
    """Every reason to refuse `source` (empty when it is acceptable)."""
    try:
        tree = ast.parse(source, filename=name)
    except SyntaxError as e:
        return [f"line {e.lineno}: syntax error: {e.msg}"]
    problems = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in ALLOWED_MODULES:
                    problems.append(f"line {line}: import of {alias.name!r} is not allowed")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or module.split(".")[0] not in ALLOWED_MODULES:
                problems.append(f"line {line}: import from {module or '.'!r} is not allowed")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            problems.append(f"line {line}: access to dunder attribute {node.attr!r} is not allowed")
        elif isinstance(node, ast.Name) and (node.id.startswith("__") or node.id in FORBIDDEN_NAMES):
            problems.append(f"line {line}: use of {node.id!r} is not allowed")
    allowed = ", ".join(sorted(ALLOWED_MODULES))
    return [f"{p} (allowed imports: {allowed}; pass --trust-code to run it anyway)" for p in problems]


def compile_reference(source: str, name: str = "<reference>", trust_code: bool = False) -> Callable:
    """Execute `source` in a fresh namespace and return its top-level `run`.

    Raises ReferenceError naming `name` when the source is refused, fails to execute, or has no `run`.
    """
    if not trust_code:
        problems = check_reference_source(source, name)
        if problems:
            raise ReferenceError(f"{name}: reference refused: " + "; ".join(problems))
    try:
        code = compile(source, f"<reference of {name}>", "exec")
        namespace: dict = {"__name__": f"kda_trace_reference_{name}"}
        exec(code, namespace)
    except Exception as e:  # noqa: BLE001 - any failure of user code becomes one clear message
        raise ReferenceError(f"{name}: reference failed to load: {type(e).__name__}: {e}") from e
    run = namespace.get("run")
    if not callable(run):
        raise ReferenceError(f"{name}: reference has no top-level function 'run'")
    return run
