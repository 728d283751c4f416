"""`kda-trace compare RUN_A RUN_B`: what changed between two runs (e.g. before and after a kernel change).

Per (definition, workload, solution) present in either run: the two verdicts and, where both passed and
were timed, the latency ratio B / A. A row is

- `new failure`: failed in B, and passed in A or was not in A;
- `fixed`: failed in A, passed in B;
- `slower` / `faster`: both passed and B / A is above 1 + threshold / below 1 / (1 + threshold);
- `new` / `missing`: only in B / only in A, or skipped (UNSUPPORTED) in A / in B only (and not a failure);
- `same` otherwise (skipped pairs included).

The exit status is 1 when any row is a new failure or slower, so a kernel repository can gate its CI on
it; 0 otherwise; 2 for usage errors. Timings from different devices or timing modes are compared all the
same, and said so: such a ratio measures the machines as much as the kernels.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .report import TraceSet, load_traces, workload_size
from .schema import EvaluationStatus, Trace

S = EvaluationStatus
DEFAULT_THRESHOLD = 0.1
REGRESSIONS = ("new failure", "slower")


@dataclass
class Row:
    """One (definition, workload, solution) of the two runs."""

    definition: str
    workload: str
    size: str
    tokens: int
    solution: str
    status_a: Optional[str]
    status_b: Optional[str]
    latency_a_ms: Optional[float]
    latency_b_ms: Optional[float]
    ratio: Optional[float]
    """latency B / latency A (above 1: B is slower)."""
    verdict: str
    note: str = ""


@dataclass
class RunComparison:
    threshold: float
    rows: List[Row] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)

    @property
    def regressions(self) -> List[Row]:
        return [r for r in self.rows if r.verdict in REGRESSIONS]

    def count(self, verdict: str) -> int:
        return sum(r.verdict == verdict for r in self.rows)

    def geomean_ratios(self) -> Dict[Tuple[str, str], float]:
        """(definition, solution) -> geometric mean of B / A over the rows with a ratio."""
        logs: Dict[Tuple[str, str], List[float]] = {}
        for r in self.rows:
            if r.ratio is not None and r.ratio > 0:
                logs.setdefault((r.definition, r.solution), []).append(math.log(r.ratio))
        return {k: math.exp(sum(v) / len(v)) for k, v in sorted(logs.items())}


def _failed(t: Optional[Trace]) -> bool:
    return t is not None and t.evaluation.status not in (S.PASSED, S.UNSUPPORTED)


def _skipped(t: Optional[Trace]) -> bool:
    return t is not None and t.evaluation.status == S.UNSUPPORTED


def _latency(t: Optional[Trace]) -> Optional[float]:
    if t is None or t.evaluation.status != S.PASSED or t.evaluation.performance is None:
        return None
    ms = t.evaluation.performance.latency_ms
    return ms if ms and ms > 0 and math.isfinite(ms) else None


def compare_runs(a: TraceSet, b: TraceSet, threshold: float = DEFAULT_THRESHOLD) -> RunComparison:
    """Compare the records of run A (before) with those of run B (after)."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    out = RunComparison(threshold)
    hw_a = sorted({t.evaluation.environment.hardware for t in a.records.values()})
    hw_b = sorted({t.evaluation.environment.hardware for t in b.records.values()})
    if hw_a != hw_b:
        out.warnings.append(f"the runs used different devices (A: {', '.join(hw_a)}; B: {', '.join(hw_b)}): "
                            "the latency ratios compare the machines as much as the solutions")
    for key in sorted(set(a.records) | set(b.records)):
        ta, tb = a.records.get(key), b.records.get(key)
        w = (tb or ta).workload
        tokens, _, size = workload_size(w)
        la, lb = _latency(ta), _latency(tb)
        ratio = lb / la if la is not None and lb is not None else None
        note = ""
        if ratio is not None:
            mode_a, mode_b = ta.evaluation.performance.mode, tb.evaluation.performance.mode
            if mode_a != mode_b:
                note = f"timing modes differ ({mode_a} / {mode_b})"
        if _failed(tb) and not _failed(ta):
            verdict = "new failure"
        elif _failed(ta) and tb is not None and tb.evaluation.status == S.PASSED:
            verdict = "fixed"
        elif ta is None or (_skipped(ta) and not _skipped(tb)):
            verdict, note = "new", "" if ta is None else "skipped in A"
        elif tb is None or (_skipped(tb) and not _skipped(ta)):
            verdict, note = "missing", "" if tb is None else "skipped in B"
        elif ratio is not None and ratio > 1 + threshold:
            verdict = "slower"
        elif ratio is not None and ratio < 1 / (1 + threshold):
            verdict = "faster"
        else:
            verdict = "same"
        out.rows.append(Row(key[0], key[1], size, tokens, key[2],
                            ta.evaluation.status.value if ta else None, tb.evaluation.status.value if tb else None,
                            la, lb, ratio, verdict, note))
    out.rows.sort(key=lambda r: (r.definition, r.solution, r.tokens, r.workload))
    return out


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4g}"


STYLES = {"new failure": "bold red", "slower": "red", "fixed": "green", "faster": "green", "missing": "yellow",
          "new": "cyan", "same": "dim"}


def print_comparison(cmp: RunComparison, dir_a: str, dir_b: str, show_all: bool = False, console=None) -> None:
    """The changed rows (all rows with `show_all`), the geometric-mean ratio per definition and solution,
    and the counts, on the terminal."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    for w in cmp.warnings:
        console.print(f"[yellow]warning: {w}[/]")
    shown = [r for r in cmp.rows if show_all or r.verdict != "same"]
    if shown:
        table = Table(title=f"A = {dir_a}, B = {dir_b} ({'all rows' if show_all else 'changed rows'}; "
                            f"noise threshold {cmp.threshold:.0%})")
        for h in ("definition", "workload", "solution", "A", "B", "A ms", "B ms", "B / A", "verdict"):
            table.add_column(h, overflow="fold", no_wrap=h == "workload",
                             justify="right" if h.endswith(("ms", "/ A")) else "left")
        for r in shown:
            table.add_row(r.definition, f"{r.size} ({r.workload[:8]})", r.solution, r.status_a or "-",
                          r.status_b or "-", _ms(r.latency_a_ms), _ms(r.latency_b_ms),
                          "-" if r.ratio is None else f"{r.ratio:.3f}",
                          r.verdict + (f" ({r.note})" if r.note else ""), style=STYLES.get(r.verdict))
        console.print(table)
    ratios = cmp.geomean_ratios()
    if ratios:
        table = Table(title="geometric mean of B / A latency (below 1: B is faster)")
        for h in ("definition", "solution", "B / A"):
            table.add_column(h)
        for (d, s), v in ratios.items():
            style = "red" if v > 1 + cmp.threshold else ("green" if v < 1 / (1 + cmp.threshold) else None)
            table.add_row(d, s, f"{v:.3f}", style=style)
        console.print(table)
    counts = ", ".join(f"{cmp.count(v)} {v}" for v in STYLES if cmp.count(v))
    console.print(f"{len(cmp.rows)} compared: {counts or 'nothing'}")
    if cmp.regressions:
        console.print(f"[bold red]{len(cmp.regressions)} regressions (new failures, or slower by more than "
                      f"{cmp.threshold:.0%})[/]")


def configure_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", metavar="RUN_A", help="the earlier run directory (before)")
    parser.add_argument("run_b", metavar="RUN_B", help="the later run directory (after)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="noise threshold: B / A latency above 1 + T is slower (exit 1), below 1 / (1 + T) "
                             f"faster (default: {DEFAULT_THRESHOLD})")
    parser.add_argument("--all", action="store_true", dest="show_all", help="print unchanged rows too")
    parser.add_argument("--json", metavar="FILE", default=None, help="also write every row to FILE as JSON")


def command_compare(args) -> int:
    """Compare two runs: verdict changes and speed ratios; exit 1 on a new failure or a slowdown."""
    from rich.console import Console

    console = Console(width=max(160, Console().width))
    for d in (args.run_a, args.run_b):
        if not Path(d).is_dir():
            print(f"kda-trace compare: error: not a directory: {d}", file=sys.stderr)
            return 2
    if not args.threshold >= 0:
        print("kda-trace compare: error: --threshold must be >= 0", file=sys.stderr)
        return 2
    a, b = load_traces([args.run_a]), load_traces([args.run_b])
    for p in a.problems + b.problems:
        console.print(f"[yellow]{p}[/]")
    for d, ts in ((args.run_a, a), (args.run_b, b)):
        if not ts.records:
            print(f"kda-trace compare: error: no trace records in {d}", file=sys.stderr)
            return 2
    cmp = compare_runs(a, b, args.threshold)
    print_comparison(cmp, args.run_a, args.run_b, args.show_all, console)
    if args.json:
        Path(args.json).write_text(json.dumps({"run_a": args.run_a, "run_b": args.run_b, "threshold": cmp.threshold,
                                               "warnings": cmp.warnings, "rows": [asdict(r) for r in cmp.rows]},
                                              indent=2) + "\n", encoding="utf-8")
    return 1 if cmp.regressions else 0
