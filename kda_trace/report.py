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
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(ts: TraceSet) -> dict:
    """The summary as a JSON-ready dict (totals, per definition and solution, skipped pairs, failures)."""
    by_pair: Dict[Tuple[str, str], List[Trace]] = defaultdict(list)
    for (dname, _, sol), t in sorted(ts.records.items()):
        by_pair[(dname, sol)].append(t)
    definitions: Dict[str, dict] = {}
    skipped, failures = [], []
    totals = Counter()
    for (dname, sol), traces in by_pair.items():
        statuses = Counter(t.evaluation.status.value for t in traces)
        totals.update(statuses)
        passed = [t for t in traces if t.evaluation.status == S.PASSED]
        perf = [t.evaluation.performance for t in passed if t.evaluation.performance]
        rms = [r for r in (_worst_rms(t) for t in traces if t.evaluation.status not in SKIP) if r is not None]
        entry = {
            "workloads": len(traces),
            "by_status": dict(sorted(statuses.items())),
            "passed": len(passed),
            "failed": sum(1 for t in traces if t.evaluation.status not in SKIP and t.evaluation.status != S.PASSED),
            "skipped": sum(1 for t in traces if t.evaluation.status in SKIP),
            "worst_rms_rel_error": max(rms) if rms else None,
            "median_latency_ms": statistics.median([p.latency_ms for p in perf]) if perf else None,
            "geomean_speedup": _geomean([p.speedup_factor for p in perf]),
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
        e = t.evaluation.environment.model_dump()
        if e not in envs:
            envs.append(e)
    n_skip = sum(totals[s.value] for s in SKIP)
    return {
        "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sources": ts.sources,
        "totals": {"records": sum(totals.values()), "passed": totals[S.PASSED.value],
                   "failed": sum(totals.values()) - totals[S.PASSED.value] - n_skip, "skipped": n_skip,
                   "by_status": dict(sorted(totals.items()))},
        "environments": envs,
        "definitions": definitions,
        "skipped": skipped,
        "failures": failures,
        "problems": ts.problems,
    }


def _fmt(x: Optional[float], spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def summary_rows(summary: dict) -> List[List[str]]:
    """Rows of the per (definition, solution) table shared by the terminal and markdown outputs."""
    rows = []
    for dname, sols in sorted(summary["definitions"].items()):
        for sol, e in sorted(sols.items()):
            evaluated = e["workloads"] - e["skipped"]
            other = ", ".join(f"{k} {v}" for k, v in e["by_status"].items() if k not in ("PASSED",))
            rows.append([dname, sol, f"{e['passed']}/{evaluated}" if evaluated else "skipped", other or "-",
                         _fmt(e["worst_rms_rel_error"]), _fmt(e["median_latency_ms"]), _fmt(e["geomean_speedup"]),
                         ",".join(e["timing_mode"] or []) or "-"])
    return rows


HEADERS = ["definition", "solution", "passed", "other statuses", "worst RMS-rel", "median ms", "speedup", "timing"]


def print_summary(summary: dict, console=None) -> None:
    """The summary table on the terminal (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = summary["totals"]
    table = Table(title=f"{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped")
    for h in HEADERS:
        table.add_column(h, overflow="fold")
    for row in summary_rows(summary):
        style = "green" if row[3] == "-" and row[2] != "skipped" else ("dim" if row[2] == "skipped" else "red")
        table.add_row(*row, style=style)
    console.print(table)
    if any("cpu_wall" in (e["timing_mode"] or []) for s in summary["definitions"].values() for e in s.values()):
        console.print("[yellow]Timing mode cpu_wall: CPU / Triton-interpreter wall time, not a GPU speed figure.[/]")


def _digests(env: dict) -> str:
    """'; dataset digest X; code digest Y' for the digests an environment has (older records have none)."""
    return "".join(f"; {label} {env[key]}" for key, label in (("dataset_digest", "dataset digest"),
                                                               ("code_digest", "code digest")) if env.get(key))


def render_markdown(summary: dict) -> str:
    """summary.md."""
    t = summary["totals"]
    lines = ["# kda-trace run summary", "",
             f"{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped ({t['records']} records; "
             f"generated {summary['generated']}).", ""]
    for env in summary["environments"]:
        libs = ", ".join(f"{k} {v}" for k, v in sorted(env.get("libs", {}).items()))
        lines.append(f"- environment: {env.get('hardware')}; {libs}; seed {env.get('seed')}; "
                     f"dataset revision {env.get('dataset_revision')}{_digests(env)}")
    lines += ["", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(r) + " |" for r in summary_rows(summary)]
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


# ------------------------------------------------------------------ HTML

CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}th{background:#f3f3f3}
.PASSED{background:#e5f5e0}.UNSUPPORTED{background:#eee;color:#777}.fail{background:#fde0dd}
code,pre{font-size:12px}pre{white-space:pre-wrap;background:#f8f8f8;padding:6px}h2{margin-top:2em}"""


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
    for edge in (lo, hi):  # label the ends too: a narrow range may hold a single decade line
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


def render_html(summary: dict, ts: TraceSet) -> str:
    """report.html: self-contained (inline CSS and SVG)."""
    e = html.escape
    t = summary["totals"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>kda-trace report</title><style>{CSS}</style>"
             "</head><body><h1>kda-trace report</h1>",
             f"<p>{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped ({t['records']} records). "
             f"Generated {e(summary['generated'])} from {e(', '.join(summary['sources']))}.</p><ul>"]
    for env in summary["environments"]:
        libs = ", ".join(f"{k} {v}" for k, v in sorted(env.get("libs", {}).items()))
        parts.append(f"<li>{e(str(env.get('hardware')))}; {e(libs)}; seed {env.get('seed')}; "
                     f"dataset revision {e(str(env.get('dataset_revision')))}{e(_digests(env))}</li>")
    parts.append("</ul><table><tr>" + "".join(f"<th>{h}</th>" for h in HEADERS) + "</tr>")
    for row in summary_rows(summary):
        parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>")
    parts.append("</table>")
    if any("cpu_wall" in (x["timing_mode"] or []) for s in summary["definitions"].values() for x in s.values()):
        parts.append("<p><b>Timing mode cpu_wall</b>: CPU / Triton-interpreter wall time, not a GPU speed figure.</p>")

    by_def: Dict[str, List[Trace]] = defaultdict(list)
    for (dname, _, _), tr in sorted(ts.records.items()):
        by_def[dname].append(tr)
    for dname, traces in sorted(by_def.items()):
        sols = sorted({tr.solution for tr in traces})
        uuids = list(dict.fromkeys(tr.workload.uuid for tr in traces))
        cell = {(tr.workload.uuid, tr.solution): tr for tr in traces}
        parts.append(f"<h2 id='{e(dname)}'>{e(dname)}</h2><table><tr><th>workload</th><th>axes</th>"
                     + "".join(f"<th>{e(s)}</th>" for s in sols) + "</tr>")
        for u in uuids:
            wl = next(tr.workload for tr in traces if tr.workload.uuid == u)
            axes = ", ".join(f"{k}={v}" for k, v in wl.axes.items())
            parts.append(f"<tr><td><code>{e(u)}</code></td><td>{e(axes)}</td>")
            for s in sols:
                tr = cell.get((u, s))
                if tr is None:
                    parts.append("<td>-</td>")
                    continue
                ev = tr.evaluation
                klass = ev.status.value if ev.status in (S.PASSED, S.UNSUPPORTED) else "fail"
                bits = [ev.status.value]
                rms = _worst_rms(tr)
                if rms is not None:
                    bits.append(f"rms-rel {rms:.2e}")
                if ev.performance:
                    bits.append(f"{ev.performance.latency_ms:.3g} ms ({ev.performance.mode})")
                    if ev.performance.speedup_factor:
                        bits.append(f"x{ev.performance.speedup_factor:.3g} vs ref")
                parts.append(f"<td class='{klass}' title='{e(ev.log[:1000])}'>{'<br>'.join(e(b) for b in bits)}</td>")
            parts.append("</tr>")
        parts.append("</table>")
        parts += _plots(dname, traces, sols)
        fails = [tr for tr in traces if tr.evaluation.status not in SKIP and tr.evaluation.status != S.PASSED]
        if fails:
            parts.append("<details><summary>failure details</summary>")
            for tr in fails:
                parts.append(f"<p><b>{e(tr.solution)}</b> on <code>{e(tr.workload.uuid)}</code>: "
                             f"{tr.evaluation.status.value}</p><pre>{e(tr.evaluation.log[:4000])}</pre>")
                worst = [w for m in (tr.evaluation.correctness.outputs.values() if tr.evaluation.correctness else [])
                         for w in m.worst[:3]]
                if worst:
                    parts.append("<ul>" + "".join(f"<li>{e(w.where)}: ref {w.reference:.4g}, got {w.value:.4g}</li>"
                                                   for w in worst) + "</ul>")
            parts.append("</details>")
    parts.append("</body></html>")
    return "".join(parts)


def _plots(dname: str, traces: List[Trace], sols: List[str]) -> List[str]:
    color = {s: COLORS[i % len(COLORS)] for i, s in enumerate(sols)}
    outputs: Dict[str, List[Tuple[str, str, List[float], int]]] = defaultdict(list)
    for tr in traces:
        c = tr.evaluation.correctness
        if c is None:
            continue
        lengths = (c.extra or {}).get("sequence_lengths", {})
        for name, m in c.outputs.items():
            if m.error_by_position and name in lengths:
                outputs[name].append((f"{tr.solution} / {tr.workload.uuid}", color[tr.solution],
                                      m.error_by_position, int(lengths[name])))
    return [_error_plot(f"{dname}: {name}, RMS-relative error vs token position", series)
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


def write_reports(ts: TraceSet, out: Path) -> Tuple[dict, List[Path]]:
    """Write summary.json, summary.md and report.html into `out`; return the summary and the paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(ts)
    paths = [out / "summary.json", out / "summary.md", out / "report.html"]
    paths[0].write_text(json.dumps(_json_safe(summary), indent=2, default=str) + "\n", encoding="utf-8")
    paths[1].write_text(render_markdown(summary), encoding="utf-8")
    paths[2].write_text(render_html(summary, ts), encoding="utf-8")
    return summary, paths
