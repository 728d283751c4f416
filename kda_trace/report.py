"""Trace records -> summaries: a terminal table, summary.json, summary.md and a self-contained report.html.

Records are read from one or more run directories (`<dir>/traces/<op_type>/<definition>.jsonl`), so the
outputs of `--shard` runs merge by listing their directories. When several records share a
(definition, workload, solution) key, the last one read wins (a re-run replaces an older result).
The HTML report has a table per definition and, for outputs with a `sequence_axis`, a plot of the
RMS-relative error against the token position (inline SVG, no scripts, no network).
"""

from __future__ import annotations

import html
import json
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from pydantic import ValidationError

from .schema import EvaluationStatus, Trace

S = EvaluationStatus
SKIP = {S.UNSUPPORTED}
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


@dataclass
class TraceSet:
    """Records keyed by (definition, workload uuid, solution), and problems met while reading."""

    records: Dict[Tuple[str, str, str], Trace] = field(default_factory=dict)
    problems: List[str] = field(default_factory=list)
    sources: List[str] = field(default_factory=list)


def load_traces(dirs: Iterable[Path | str]) -> TraceSet:
    """Read every trace file under each `<dir>/traces`; unreadable lines are listed with file and line."""
    ts = TraceSet()
    for d in dirs:
        d = Path(d)
        ts.sources.append(str(d))
        files = sorted((d / "traces").glob("*/*.jsonl"))
        if not files:
            ts.problems.append(f"{d}: no trace files under {d / 'traces'}")
        for path in files:
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    t = Trace.model_validate_json(line)
                except ValidationError as e:
                    first = e.errors()[0]
                    where = ".".join(str(x) for x in first["loc"])
                    ts.problems.append(f"{path}: line {lineno}: not a trace record ({where}: {first['msg']})")
                    continue
                if t.evaluation is None or t.solution is None:
                    ts.problems.append(f"{path}: line {lineno}: record without solution or evaluation skipped")
                    continue
                ts.records[(t.definition, t.workload.uuid, t.solution)] = t
    return ts


def _worst_rms(t: Trace) -> Optional[float]:
    c = t.evaluation.correctness
    if c is None or not c.outputs:
        return None
    return max(m.rms_rel_error if m.rms_rel_error == m.rms_rel_error else math.inf for m in c.outputs.values())


def _geomean(xs: List[float]) -> Optional[float]:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _median(xs: List[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def workload_size(w) -> Tuple[int, Optional[int], str]:
    """(tokens, sequences or None, a readable label) of a workload, from its axes: `total_seq_len` (packed
    prefill), `batch_size` x `seq_len` (dense), `batch_size` x `num_tokens` (multi-token decode), `num_tokens`,
    `batch_size` (one token per request); else the product of the axis values."""
    a, n_seq = w.axes, None
    if "total_seq_len" in a:
        tokens, n_seq = a["total_seq_len"], a.get("num_seqs", len(w.seq_lens) if w.seq_lens else None)
    elif "seq_len" in a:
        tokens, n_seq = a.get("batch_size", 1) * a["seq_len"], a.get("batch_size")
    elif "num_tokens" in a:
        tokens, n_seq = a.get("batch_size", 1) * a["num_tokens"], a.get("batch_size")
    elif "batch_size" in a:
        tokens, n_seq = a["batch_size"], a["batch_size"]
    else:
        tokens = math.prod(a.values()) if a else 0
    label = f"{tokens:,} {'token' if tokens == 1 else 'tokens'}"
    if n_seq is not None:
        label += f" · {n_seq:,} {'sequence' if n_seq == 1 else 'sequences'}"
    return tokens, n_seq, label


def record_sol(t: Trace) -> Tuple[Optional[float], Optional[str], bool]:
    """(speed-of-light fraction, bound, derived) of a timed record: the record's own values, or, for records
    written before the runner stored them, derived from its TB/s, TFLOP/s and the roofline table for its
    device (derived=True). (None, None, False) on the CPU, an unknown device or without a cost."""
    from .roofline import device_peak, sol_fraction

    perf = t.evaluation.performance
    if perf is None or perf.mode == "cpu_wall":
        return None, None, False
    if perf.sol_fraction is not None:
        return perf.sol_fraction, perf.sol_bound, False
    env = t.evaluation.environment
    peak = env.peaks if env.peaks is not None else device_peak(env.hardware)
    fraction, bound = sol_fraction(perf.tbps, perf.tflops, peak)
    return fraction, bound, fraction is not None


def peaks_used(ts: TraceSet) -> List[dict]:
    """The rooflines the SOL fractions of these records are measured against: each record's own `peaks`, or,
    for older records, the table's entry for its device (as record_sol uses them)."""
    from .roofline import device_peak

    out: List[dict] = []
    for t in ts.records.values():
        env = t.evaluation.environment
        if t.evaluation.performance is None or t.evaluation.performance.mode == "cpu_wall":
            continue
        peak = env.peaks if env.peaks is not None else device_peak(env.hardware)
        if peak is None:
            continue
        entry = {"hardware": env.hardware, "model": peak.model, "tbps": peak.tbps, "tflops": peak.tflops,
                 "source": peak.source, "in_record": env.peaks is not None}
        if entry not in out:
            out.append(entry)
    return out


def baseline_speedups(ts: TraceSet, baseline: Optional[str]) -> Dict[Tuple[str, str, str], float]:
    """(definition, workload, solution) -> the baseline solution's latency / this solution's latency, where
    both passed and were timed on the same workload of the run."""
    if not baseline:
        return {}
    out = {}
    for (dname, uuid, sol), t in ts.records.items():
        base = ts.records.get((dname, uuid, baseline))
        if base is None or sol == baseline:
            continue
        p, q = t.evaluation.performance, base.evaluation.performance
        if t.evaluation.status == S.PASSED and base.evaluation.status == S.PASSED and p and q and p.latency_ms > 0:
            out[(dname, uuid, sol)] = q.latency_ms / p.latency_ms
    return out


def summarize(ts: TraceSet, baseline: Optional[str] = None) -> dict:
    """The summary as a JSON-ready dict (totals, per definition and solution, skipped pairs, failures).
    With a `baseline` solution, speedups against it per workload and as a geometric mean per definition."""
    by_pair: Dict[Tuple[str, str], List[Trace]] = defaultdict(list)
    for (dname, _, sol), t in sorted(ts.records.items()):
        by_pair[(dname, sol)].append(t)
    vs_base = baseline_speedups(ts, baseline)
    definitions: Dict[str, dict] = {}
    skipped, failures = [], []
    totals = Counter()
    for (dname, sol), traces in by_pair.items():
        statuses = Counter(t.evaluation.status.value for t in traces)
        totals.update(statuses)
        passed = [t for t in traces if t.evaluation.status == S.PASSED]
        perf = [t.evaluation.performance for t in passed if t.evaluation.performance]
        rms = [r for r in (_worst_rms(t) for t in traces if t.evaluation.status not in SKIP) if r is not None]
        sols = [s for s in (record_sol(t) for t in passed) if s[0] is not None]
        bounds = Counter(b for _, b, _ in sols)
        entry = {
            "workloads": len(traces),
            "by_status": dict(sorted(statuses.items())),
            "passed": len(passed),
            "failed": sum(1 for t in traces if t.evaluation.status not in SKIP and t.evaluation.status != S.PASSED),
            "skipped": sum(1 for t in traces if t.evaluation.status in SKIP),
            "worst_rms_rel_error": max(rms) if rms else None,
            "median_latency_ms": _median([p.latency_ms for p in perf]),
            "geomean_speedup": _geomean([p.speedup_factor for p in perf]),
            "geomean_speedup_vs_baseline": _geomean([vs_base[(dname, t.workload.uuid, sol)] for t in passed
                                                     if (dname, t.workload.uuid, sol) in vs_base]),
            "median_sol_fraction": _median([f for f, _, _ in sols]),
            "sol_bound": bounds.most_common(1)[0][0] if bounds else None,
            "sol_derived": any(d for _, _, d in sols),
            "timing_mode": sorted({p.mode for p in perf if p.mode}) or None,
        }
        definitions.setdefault(dname, {})[sol] = entry
        if entry["skipped"]:
            reasons = sorted({t.evaluation.log for t in traces if t.evaluation.status in SKIP})
            skipped.append({"definition": dname, "solution": sol, "workloads": entry["skipped"], "reason": "; ".join(reasons)})
        for t in traces:
            if t.evaluation.status not in SKIP and t.evaluation.status != S.PASSED:
                failures.append({"definition": dname, "workload": t.workload.uuid, "solution": sol,
                                 "status": t.evaluation.status.value, "log": t.evaluation.log[:2000]})
    envs = []
    for t in ts.records.values():
        e = t.evaluation.environment.model_dump(exclude_none=True)
        if e not in envs:
            envs.append(e)
    n_skip = sum(totals[s.value] for s in SKIP)
    return {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sources": ts.sources,
        "baseline": baseline,
        "totals": {"records": sum(totals.values()), "passed": totals[S.PASSED.value],
                   "failed": sum(totals.values()) - totals[S.PASSED.value] - n_skip, "skipped": n_skip,
                   "by_status": dict(sorted(totals.items()))},
        "solutions": _solution_totals(ts, definitions, vs_base),
        "peaks": peaks_used(ts),
        "environments": envs,
        "definitions": definitions,
        "baseline_speedups": [{"definition": d, "workload": u, "size": workload_size(ts.records[(d, u, s)].workload)[2],
                               "tokens": workload_size(ts.records[(d, u, s)].workload)[0], "solution": s, "speedup": v}
                              for (d, u, s), v in sorted(vs_base.items())],
        "skipped": skipped,
        "failures": failures,
        "problems": ts.problems,
    }


def _solution_totals(ts: TraceSet, definitions: Dict[str, dict], vs_base: dict) -> Dict[str, dict]:
    """Per solution over the whole run: pass counts, geomean speedup vs the baseline, median SOL fraction."""
    out: Dict[str, dict] = {}
    for sol in sorted({s for per in definitions.values() for s in per}):
        entries = [per[sol] for per in definitions.values() if sol in per]
        passed = [t for (_, _, s), t in ts.records.items() if s == sol and t.evaluation.status == S.PASSED]
        fractions = [f for f in (record_sol(t)[0] for t in passed) if f is not None]
        out[sol] = {"passed": sum(e["passed"] for e in entries), "failed": sum(e["failed"] for e in entries),
                    "skipped": sum(e["skipped"] for e in entries),
                    "geomean_speedup_vs_baseline": _geomean([v for (_, _, s), v in vs_base.items() if s == sol]),
                    "median_sol_fraction": _median(fractions)}
    return out


def _fmt(x: Optional[float], spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def _sol_text(fraction: Optional[float], bound: Optional[str]) -> str:
    if fraction is None:
        return "-"
    pct = fraction * 100
    return (f"{pct:.0f}%" if pct >= 10 else f"{pct:.2g}%") + (f" {bound}" if bound else "")


def headers(summary: dict) -> List[str]:
    """Columns of the per (definition, solution) table; the baseline column only with a baseline."""
    base = [f"vs {summary['baseline']}"] if summary.get("baseline") else []
    return ["definition", "solution", "passed", "other statuses", "worst RMS-rel", "median ms", *base,
            "SOL (median)", "timing"]


def summary_rows(summary: dict) -> List[List[str]]:
    """Rows of the per (definition, solution) table shared by the terminal and markdown outputs."""
    rows = []
    for dname, sols in sorted(summary["definitions"].items()):
        for sol, e in sorted(sols.items()):
            evaluated = e["workloads"] - e["skipped"]
            other = ", ".join(f"{k} {v}" for k, v in e["by_status"].items() if k not in ("PASSED",))
            base = []
            if summary.get("baseline"):
                base = ["(baseline)" if sol == summary["baseline"] else _fmt(e.get("geomean_speedup_vs_baseline"), ".3g")]
            rows.append([dname, sol, f"{e['passed']}/{evaluated}" if evaluated else "skipped", other or "-",
                         _fmt(e["worst_rms_rel_error"]), _fmt(e["median_latency_ms"]), *base,
                         _sol_text(e.get("median_sol_fraction"), e.get("sol_bound")),
                         ",".join(e["timing_mode"] or []) or "-"])
    return rows


def print_summary(summary: dict, console=None) -> None:
    """The summary table on the terminal (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = summary["totals"]
    table = Table(title=f"{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped")
    for h in headers(summary):
        table.add_column(h, overflow="fold")
    for row in summary_rows(summary):
        style = "green" if row[3] == "-" and row[2] != "skipped" else ("dim" if row[2] == "skipped" else "red")
        table.add_row(*row, style=style)
    console.print(table)
    if any("cpu_wall" in (e["timing_mode"] or []) for s in summary["definitions"].values() for e in s.values()):
        console.print("[yellow]Timing mode cpu_wall: CPU / Triton-interpreter wall time, not a GPU speed figure.[/]")


def environment_line(env: dict) -> str:
    """One line naming where records ran: device (index, uuid, peaks), kda-trace version and commit, libraries,
    seed, dataset revision and digests (older records lack some of these)."""
    where = ", ".join(x for x in (env.get("device"), env.get("device_uuid")) if x)
    bits = [f"{env.get('hardware')}" + (f" ({where})" if where else "")]
    peaks = env.get("peaks")
    if peaks:
        bits.append(f"peaks {_fmt(peaks.get('tbps'))} TB/s, {_fmt(peaks.get('tflops'), '.4g')} TFLOP/s bf16 "
                    f"({peaks.get('source')})")
    if env.get("project_version"):
        bits.append(f"kda-trace {env['project_version']}"
                    + (f" at {env['project_commit']}" if env.get("project_commit") else ""))
    bits.append(", ".join(f"{k} {v}" for k, v in sorted(env.get("libs", {}).items())))
    bits.append(f"seed {env.get('seed')}")
    bits.append(f"dataset revision {env.get('dataset_revision')}")
    bits += [f"{label} {env[key]}" for key, label in (("dataset_digest", "dataset digest"),
                                                      ("code_digest", "code digest")) if env.get(key)]
    return "; ".join(bits)


SOL_NOTE = ("SOL: speed-of-light fraction, max(achieved TB/s / peak TB/s, achieved TFLOP/s / peak TFLOP/s) with the "
            "definition's cost formulas and the device's peaks (kda_trace/roofline.py); the word after it names the "
            "larger term (memory or compute).")


def render_markdown(summary: dict) -> str:
    """summary.md."""
    t = summary["totals"]
    lines = ["# kda-trace run summary", "",
             f"{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped ({t['records']} records; "
             f"generated {summary['generated']}).", ""]
    lines += [f"- environment: {environment_line(env)}" for env in summary["environments"]]
    cols = headers(summary)
    lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(r) + " |" for r in summary_rows(summary)]
    lines += ["", SOL_NOTE + (" Some SOL figures were derived at report time from the device table (records "
                              "written before the runner stored them)." if _any_derived(summary) else "")]
    lines += [f"- {pk['hardware']}: peaks of {pk['model']}, {_fmt(pk['tbps'])} TB/s, {_fmt(pk['tflops'], '.4g')} "
              f"TFLOP/s ({pk['source']})" for pk in summary.get("peaks", [])]
    if summary.get("baseline"):
        lines += ["", f"`vs {summary['baseline']}`: geometric mean over the workloads where both passed of "
                      f"{summary['baseline']}'s latency / the solution's latency (above 1: faster than "
                      f"{summary['baseline']}). Per workload:", ""]
        lines += _markdown_speedups(summary)
    if summary["skipped"]:
        lines += ["", "## Skipped (unsupported)", ""]
        lines += [f"- {s['definition']} x {s['solution']} ({s['workloads']} workloads): {s['reason']}"
                  for s in summary["skipped"]]
    if summary["failures"]:
        lines += ["", "## Failures", ""]
        for f in summary["failures"]:
            first = f["log"].strip().splitlines()[0] if f["log"].strip() else ""
            lines.append(f"- {f['definition']} / {f['workload']} / {f['solution']}: **{f['status']}** {first}")
    if summary["problems"]:
        lines += ["", "## Problems reading traces", ""] + [f"- {p}" for p in summary["problems"]]
    return "\n".join(lines) + "\n"


def _any_derived(summary: dict) -> bool:
    return any(e.get("sol_derived") for per in summary["definitions"].values() for e in per.values())


def _markdown_speedups(summary: dict) -> List[str]:
    by_def: Dict[str, Dict[Tuple[int, str, str], Dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for row in summary["baseline_speedups"]:
        by_def[row["definition"]][(row["tokens"], row["size"], row["workload"])][row["solution"]] = row["speedup"]
    lines = []
    for dname, per in sorted(by_def.items()):
        sols = sorted({s for v in per.values() for s in v})
        lines += [f"<details><summary>{dname}</summary>", "", "| workload | uuid | " + " | ".join(sols) + " |",
                  "|" + "---|" * (len(sols) + 2)]
        lines += [f"| {size} | {u[:8]} | " + " | ".join(_fmt(v.get(s), ".3g") for s in sols) + " |"
                  for (_, size, u), v in sorted(per.items())]
        lines += ["", "</details>", ""]
    return lines


# ------------------------------------------------------------------ HTML

CSS = """body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1500px;padding:0 1.5em;
color:#222;line-height:1.35}
table{border-collapse:collapse;margin:.8em 0}td,th{border:1px solid #d4d4d4;padding:4px 8px;font-size:13px;
text-align:left;vertical-align:top}th{background:#f3f3f3;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.PASSED{background:#eef8ea}.UNSUPPORTED{background:#f1f1f1;color:#888}.fail{background:#fde0dd}
.status{font-weight:600}.dim{color:#777}.small{font-size:11px}.wl{min-width:16em}.desc{color:#555;font-size:12px}
.faster{color:#1a7f37;font-weight:600}.slower{color:#b42318;font-weight:600}
.plots{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}.plots svg{border:1px solid #e4e4e4}
.note{color:#555;font-size:13px;max-width:75em}.lead{font-size:15px}
code,pre{font-size:12px}pre{white-space:pre-wrap;background:#f8f8f8;padding:6px}h2{margin-top:2.2em;
border-bottom:1px solid #ddd;padding-bottom:.2em}nav a{margin-right:.8em;font-size:13px}"""


def _axis_label(v: float) -> str:
    """1, 10, 100, 1k, 10k, 1M for log-axis ticks (and 0.01, 0.1 below 1)."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def _latency_plot(dname: str, traces: List[Trace], color: Dict[str, str]) -> str:
    """Inline SVG: median latency (log) against the workload's token count (log), one line per solution,
    over the records that passed and were timed."""
    series: Dict[str, List[Tuple[int, int, float, str]]] = defaultdict(list)
    for tr in traces:
        perf = tr.evaluation.performance
        if tr.evaluation.status == S.PASSED and perf and perf.latency_ms > 0:
            tokens, n_seq, label = workload_size(tr.workload)
            series[tr.solution].append((max(tokens, 1), n_seq or 0, perf.latency_ms, label))
    if not series:
        return ""
    w, h, left, bottom, top, right = 640, 320, 70, 45, 30, 150
    xs = [p[0] for pts in series.values() for p in pts]
    ys = [p[2] for pts in series.values() for p in pts]
    x_lo, x_hi = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
    y_lo, y_hi = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    x_hi, y_hi = max(x_hi, x_lo + 1), max(y_hi, y_lo + 1)

    def x(v: float) -> float:
        return left + (w - left - right) * (math.log10(v) - x_lo) / (x_hi - x_lo)

    def y(v: float) -> float:
        return top + (h - top - bottom) * (y_hi - math.log10(v)) / (y_hi - y_lo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" style="background:#fff" '
           f'role="img" aria-label="latency vs size for {html.escape(dname)}">',
           f'<text x="{left}" y="18" font-size="13">latency vs size (median ms, passed records)</text>']
    for e in range(x_lo, x_hi + 1):
        out.append(f'<line x1="{x(10 ** e):.1f}" y1="{top}" x2="{x(10 ** e):.1f}" y2="{h - bottom}" stroke="#eee"/>'
                   f'<text x="{x(10 ** e):.1f}" y="{h - bottom + 15}" font-size="11" text-anchor="middle">'
                   f'{_axis_label(10 ** e)}</text>')
    for e in range(y_lo, y_hi + 1):
        out.append(f'<line x1="{left}" y1="{y(10 ** e):.1f}" x2="{w - right}" y2="{y(10 ** e):.1f}" stroke="#eee"/>'
                   f'<text x="{left - 5}" y="{y(10 ** e) + 4:.1f}" font-size="11" text-anchor="end">'
                   f'{_axis_label(10 ** e)} ms</text>')
    out += [f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#333"/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#333"/>',
            f'<text x="{(left + w - right) / 2}" y="{h - 10}" font-size="12" text-anchor="middle">'
            f'tokens in the workload</text>']
    for i, (sol, pts) in enumerate(sorted(series.items())):
        pts.sort()
        c = color.get(sol, "#333")
        coords = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, _, py, _ in pts)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" opacity="0.85" points="{coords}"/>')
        for px, _, py, label in pts:
            out.append(f'<circle cx="{x(px):.1f}" cy="{y(py):.1f}" r="2.5" fill="{c}"><title>{html.escape(sol)}: '
                       f'{html.escape(label)}, {py:.4g} ms</title></circle>')
        yy = top + 16 * i
        out.append(f'<rect x="{w - right + 10}" y="{yy}" width="10" height="10" fill="{c}"/>'
                   f'<text x="{w - right + 25}" y="{yy + 9}" font-size="11">{html.escape(sol)}</text>')
    out.append("</svg>")
    return "".join(out)


def _error_plot(title: str, series: List[Tuple[str, str, List[float], int]]) -> str:
    """Inline SVG: RMS-relative error (log scale) against token position, one line per series
    (label, color, bucket values, sequence length)."""
    w, h, left, bottom, top, right = 640, 300, 70, 40, 30, 160
    pts = [(v, n) for _, _, vals, n in series for v in vals]
    positive = [v for v, _ in pts if v > 0 and math.isfinite(v)]
    if not positive:
        return f"<p>{html.escape(title)}: no nonzero errors to plot.</p>"
    lo, hi = math.log10(min(positive)), math.log10(max(positive))
    if hi - lo < 1:
        lo, hi = lo - 0.5, hi + 0.5
    max_len = max(n for _, _, _, n in series) or 1

    def x(pos: float) -> float:
        return left + (w - left - right) * pos / max_len

    def y(v: float) -> float:
        v = max(v, 10 ** lo)
        return top + (h - top - bottom) * (hi - math.log10(v)) / (hi - lo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" style="background:#fff">',
           f'<text x="{left}" y="18" font-size="13">{html.escape(title)}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#333"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#333"/>',
           f'<text x="{(left + w - right) / 2}" y="{h - 8}" font-size="12" text-anchor="middle">token position in sequence</text>']
    for e in range(math.ceil(lo), math.floor(hi) + 1):
        out.append(f'<text x="{left - 5}" y="{y(10 ** e) + 4}" font-size="11" text-anchor="end">1e{e}</text>')
        out.append(f'<line x1="{left}" y1="{y(10 ** e)}" x2="{w - right}" y2="{y(10 ** e)}" stroke="#eee"/>')
    decades = [y(10 ** e) for e in range(math.ceil(lo), math.floor(hi) + 1)]
    for edge in (lo, hi):  # label the ends too: a narrow range may hold a single decade line
        if any(abs(y(10 ** edge) - d) < 12 for d in decades):
            continue  # a decade label is already there
        out.append(f'<text x="{left - 5}" y="{y(10 ** edge) + 4}" font-size="10" fill="#777" '
                   f'text-anchor="end">{10 ** edge:.1e}</text>')
    for frac in (0, 0.5, 1):
        out.append(f'<text x="{x(frac * max_len)}" y="{h - bottom + 15}" font-size="11" text-anchor="middle">{int(frac * max_len)}</text>')
    legend = {}
    for label, color, vals, n in series:
        if not vals:
            continue
        nb = len(vals)
        coords = " ".join(f"{x((i + 0.5) * n / nb):.1f},{y(v if math.isfinite(v) else 10 ** hi):.1f}"
                          for i, v in enumerate(vals))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" opacity="0.8" points="{coords}">'
                   f'<title>{html.escape(label)}</title></polyline>')
        legend.setdefault(label.split(" / ")[0], color)
    for i, (label, color) in enumerate(legend.items()):
        yy = top + 16 * i
        out.append(f'<rect x="{w - right + 10}" y="{yy}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{w - right + 25}" y="{yy + 9}" font-size="11">{html.escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def _speedup_html(v: Optional[float], baseline: str) -> str:
    if v is None:
        return ""
    klass = "faster" if v >= 1.0 else "slower"
    return f"<span class='{klass}'>×{v:.3g}</span> vs {html.escape(baseline)}"


def _overview(summary: dict, color: Dict[str, str]) -> List[str]:
    """Per-solution totals and the definition x solution matrix at the top of the report."""
    e = html.escape
    base = summary.get("baseline")
    sols = sorted(summary["solutions"])
    parts = ["<h2 id='summary'>Summary</h2><table><tr><th>solution</th><th>passed</th><th>failed</th><th>skipped</th>"
             + (f"<th>geomean vs {e(base)}</th>" if base else "") + "<th>median SOL</th></tr>"]
    for sol in sols:
        x = summary["solutions"][sol]
        vs = "(baseline)" if sol == base else _speedup_html(x["geomean_speedup_vs_baseline"], base) or "-"
        parts.append(f"<tr><td><span style='color:{color[sol]}'>&#9632;</span> <b>{e(sol)}</b></td>"
                     f"<td class='num'>{x['passed']}</td><td class='num'>{x['failed']}</td>"
                     f"<td class='num'>{x['skipped']}</td>" + (f"<td class='num'>{vs}</td>" if base else "")
                     + f"<td class='num'>{_sol_text(x['median_sol_fraction'], None)}</td></tr>")
    parts.append("</table>")
    parts.append("<table><tr><th>definition</th>" + "".join(f"<th>{e(s)}</th>" for s in sols) + "</tr>")
    for dname, per in sorted(summary["definitions"].items()):
        parts.append(f"<tr><td><a href='#{e(dname)}'>{e(dname)}</a></td>")
        for sol in sols:
            x = per.get(sol)
            if x is None:
                parts.append("<td class='dim'>-</td>")
                continue
            evaluated = x["workloads"] - x["skipped"]
            if not evaluated:
                parts.append("<td class='UNSUPPORTED'>skipped</td>")
                continue
            klass = "PASSED" if x["passed"] == evaluated else "fail"
            first = [f"<span class='status'>{x['passed']}/{evaluated}</span> passed"]
            if x["median_latency_ms"] is not None:
                first.append(f"median {x['median_latency_ms']:.3g} ms")
            second = []
            if base and sol != base and x.get("geomean_speedup_vs_baseline") is not None:
                second.append(_speedup_html(x["geomean_speedup_vs_baseline"], base))
            if x.get("median_sol_fraction") is not None:
                second.append(f"SOL {_sol_text(x['median_sol_fraction'], x['sol_bound'])}")
            lines = [" · ".join(first)] + ([" · ".join(second)] if second else [])
            parts.append(f"<td class='{klass}'>{'<br>'.join(lines)}</td>")
        parts.append("</tr>")
    parts.append("</table>")
    notes = [SOL_NOTE]
    for pk in summary.get("peaks", []):
        notes.append(f"{pk['hardware']}: peaks of {pk['model']}, {_fmt(pk['tbps'])} TB/s and "
                     f"{_fmt(pk['tflops'], '.4g')} TFLOP/s ({pk['source']}"
                     + ("" if pk["in_record"] else "; from the table at report time") + ").")
    if _any_derived(summary):
        notes.append("Some SOL figures were derived at report time from the device table (records written before "
                     "the runner stored them).")
    if base:
        notes.append(f"×N vs {base}: {base}'s median latency / the solution's, on the same workload (geometric "
                     "mean over the workloads where both passed); above 1 is faster.")
    else:
        notes.append("Pass --baseline SOLUTION to compare the solutions with one of them.")
    notes.append("The speedup over the Python reference loop stays in each record (speedup_factor) and in "
                 "summary.json (geomean_speedup).")
    parts.append("<p class='note'>" + " ".join(e(n) for n in notes) + "</p>")
    return parts


def render_html(summary: dict, ts: TraceSet) -> str:
    """report.html: self-contained (inline CSS and SVG, no scripts, nothing fetched)."""
    e = html.escape
    t = summary["totals"]
    base = summary.get("baseline")
    all_sols = sorted({s for (_, _, s) in ts.records})
    color = {s: COLORS[i % len(COLORS)] for i, s in enumerate(all_sols)}
    vs_base = {(r["definition"], r["workload"], r["solution"]): r["speedup"] for r in summary["baseline_speedups"]}
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>kda-trace report</title>"
             f"<style>{CSS}</style></head><body><h1>kda-trace report</h1>",
             f"<p class='lead'><b>{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped</b> "
             f"({t['records']} records)" + (f"; baseline <b>{e(base)}</b>" if base else "") + ".</p>",
             f"<p class='note'>Generated {e(summary['generated'])} from {e(', '.join(summary['sources']))}.</p>",
             "<nav>" + " ".join(f"<a href='#{e(d)}'>{e(d)}</a>" for d in sorted(summary["definitions"])) + "</nav>"]
    parts += _overview(summary, color)
    if any("cpu_wall" in (x["timing_mode"] or []) for s in summary["definitions"].values() for x in s.values()):
        parts.append("<p><b>Timing mode cpu_wall</b>: CPU / Triton-interpreter wall time, not a GPU speed figure.</p>")
    parts.append(f"<details><summary>Environments ({len(summary['environments'])})</summary><ul>"
                 + "".join(f"<li>{e(environment_line(env))}</li>" for env in summary["environments"]) + "</ul></details>")
    cols = headers(summary)
    parts.append("<details><summary>Table per definition and solution</summary><table><tr>"
                 + "".join(f"<th>{e(h)}</th>" for h in cols) + "</tr>")
    for row in summary_rows(summary):
        parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
    parts.append("</table></details>")

    by_def: Dict[str, List[Trace]] = defaultdict(list)
    for (dname, _, _), tr in sorted(ts.records.items()):
        by_def[dname].append(tr)
    for dname, traces in sorted(by_def.items()):
        sols = sorted({tr.solution for tr in traces})
        workloads = {tr.workload.uuid: tr.workload for tr in traces}
        order = sorted(workloads, key=lambda u: (*workload_size(workloads[u])[:2], u))
        cell = {(tr.workload.uuid, tr.solution): tr for tr in traces}
        parts.append(f"<h2 id='{e(dname)}'>{e(dname)}</h2><div class='plots'>{_latency_plot(dname, traces, color)}"
                     + "".join(_plots(dname, traces, sols, color)) + "</div>")
        parts.append("<table><tr><th>workload (by size)</th>" + "".join(f"<th>{e(s)}</th>" for s in sols) + "</tr>")
        for u in order:
            wl = workloads[u]
            _, _, label = workload_size(wl)
            axes = ", ".join(f"{k}={v}" for k, v in wl.axes.items())
            desc = f"<br><span class='desc'>{e(wl.description)}</span>" if wl.description else ""
            parts.append(f"<tr><td class='wl' title='{e(u)} ({e(axes)})'><b>{e(label)}</b>{desc}"
                         f"<br><span class='dim small'>{e(axes)} · {e(u[:8])}</span></td>")
            for s in sols:
                tr = cell.get((u, s))
                if tr is None:
                    parts.append("<td class='dim'>-</td>")
                    continue
                parts.append(_cell_html(tr, vs_base.get((dname, u, s)), base if s != base else None))
            parts.append("</tr>")
        parts.append("</table>")
        fails = [tr for tr in traces if tr.evaluation.status not in SKIP and tr.evaluation.status != S.PASSED]
        if fails:
            parts.append("<details><summary>failure details</summary>")
            for tr in fails:
                parts.append(f"<p><b>{e(tr.solution)}</b> on <code>{e(tr.workload.uuid)}</code> "
                             f"({e(workload_size(tr.workload)[2])}): {tr.evaluation.status.value}</p>"
                             f"<pre>{e(tr.evaluation.log[:4000])}</pre>")
                worst = [w for m in (tr.evaluation.correctness.outputs.values() if tr.evaluation.correctness else [])
                         for w in m.worst[:3]]
                if worst:
                    parts.append("<ul>" + "".join(f"<li>{e(w.where)}: ref {w.reference:.4g}, got {w.value:.4g}</li>"
                                                   for w in worst) + "</ul>")
            parts.append("</details>")
    parts.append("</body></html>")
    return "".join(parts)


def _cell_html(tr: Trace, vs_base: Optional[float], baseline: Optional[str]) -> str:
    """One (workload, solution) cell: status unless passed, latency, speedup vs the baseline, SOL, worst error."""
    e = html.escape
    ev = tr.evaluation
    klass = ev.status.value if ev.status in (S.PASSED, S.UNSUPPORTED) else "fail"
    bits = [] if ev.status == S.PASSED else [f"<span class='status'>{ev.status.value}</span>"]
    if ev.performance:
        bits.append(f"{ev.performance.latency_ms:.3g} ms")
        if baseline and vs_base is not None:
            bits.append(_speedup_html(vs_base, baseline))
        fraction, bound, _ = record_sol(tr)
        if fraction is not None:
            bits.append(f"SOL {_sol_text(fraction, bound)}")
    rms = _worst_rms(tr)
    if rms is not None:
        bits.append(f"<span class='dim'>rms-rel {rms:.1e}</span>")
    title = ev.log[:1000] + (f" (timing: {ev.performance.mode})" if ev.performance else "")
    return f"<td class='{klass}' title='{e(title)}'>{'<br>'.join(bits)}</td>"


def _plots(dname: str, traces: List[Trace], sols: List[str], color: Dict[str, str]) -> List[str]:
    """Error-vs-position plots, one per output with a sequence axis. Per solution, the workload with the
    longest sequence is drawn (where errors that grow along the sequence show most; shorter workloads would
    be squeezed into the left edge), and a series that is zero everywhere (the reference against itself) is
    left out."""
    longest: Dict[Tuple[str, str], Tuple[int, str, List[float]]] = {}
    for tr in traces:
        c = tr.evaluation.correctness
        if c is None:
            continue
        lengths = (c.extra or {}).get("sequence_lengths", {})
        for name, m in c.outputs.items():
            if m.error_by_position and name in lengths and any(v != 0 for v in m.error_by_position):
                n = int(lengths[name])
                key = (name, tr.solution)
                if key not in longest or n > longest[key][0]:
                    longest[key] = (n, workload_size(tr.workload)[2], m.error_by_position)
    outputs: Dict[str, List[Tuple[str, str, List[float], int]]] = defaultdict(list)
    for (name, sol), (n, label, values) in sorted(longest.items()):
        outputs[name].append((f"{sol} / {label}", color[sol], values, n))
    return [_error_plot(f"{name}: RMS-relative error vs token position (longest sequence per solution)", series)
            for name, series in sorted(outputs.items())]


def _json_safe(x):
    """Non-finite floats as the strings 'NaN' / 'Infinity' / '-Infinity' (strict JSON has none)."""
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


def write_reports(ts: TraceSet, out: Path, baseline: Optional[str] = None) -> Tuple[dict, List[Path]]:
    """Write summary.json, summary.md and report.html into `out`; return the summary and the paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(ts, baseline)
    paths = [out / "summary.json", out / "summary.md", out / "report.html"]
    paths[0].write_text(json.dumps(_json_safe(summary), indent=2, default=str) + "\n", encoding="utf-8")
    paths[1].write_text(render_markdown(summary), encoding="utf-8")
    paths[2].write_text(render_html(summary, ts), encoding="utf-8")
    return summary, paths
