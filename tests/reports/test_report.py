"""summary.json / summary.md / report.html: baseline speedups, speed-of-light fractions, workloads by size,
the plots; the real H100 records re-rendered; report.html rendered in a real browser when one is installed."""

import json
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from kda_trace.cli import main
from kda_trace.report import load_traces, render_html, summarize
from kda_trace.schema import DevicePeaks

from .synthetic import record, write_run

REPO = Path(__file__).resolve().parents[2]
H100_RUN = REPO / "benchmarks" / "results" / "2026-11-22-h100" / "dataset-run"
D = "kda_prefill_x"
PEAKS = DevicePeaks(model="test GPU", tbps=2.0, tflops=100.0, source="user")


@pytest.fixture
def run(tmp_path):
    err = [1e-4, 2e-4, 4e-4, 8e-4]
    return write_run(tmp_path / "run", [
        # written in uuid order, which is not size order: big (4096 tokens), mid (512), small (9)
        record(D, "w-big", "triton", ms=4.0, sol=(0.5, "memory"), peaks=PEAKS, errors=err),
        record(D, "w-mid", "triton", ms=2.0, sol=(0.25, "memory"), peaks=PEAKS, errors=err),
        record(D, "w-small", "triton", ms=1.0, sol=(0.75, "compute"), peaks=PEAKS, errors=err),
        record(D, "w-big", "fla", ms=8.0, tbps=1.675),  # no stored SOL: derived from the H100 table
        record(D, "w-mid", "fla", ms=2.0),
        record(D, "w-small", "fla", ms=2.0),
        record(D, "w-small", "cpu-thing", ms=5.0, hardware="cpu (x86_64)", tbps=0.1),
        record(D, "w-mid", "cpu-thing", "INCORRECT_NUMERICAL"),
    ])


def test_baseline_speedups_per_workload_and_geomean(run):
    s = summarize(load_traces([run]), baseline="fla")
    triton = s["definitions"][D]["triton"]
    # fla / triton latency: 8/4, 2/2, 2/1
    assert triton["geomean_speedup_vs_baseline"] == pytest.approx((2 * 1 * 2) ** (1 / 3))
    per = {(r["workload"], r["solution"]): r["speedup"] for r in s["baseline_speedups"]}
    assert per[("w-big", "triton")] == 2 and per[("w-mid", "triton")] == 1 and per[("w-small", "triton")] == 2
    assert per[("w-small", "cpu-thing")] == pytest.approx(0.4)
    assert ("w-mid", "cpu-thing") not in per  # failed: no speedup
    assert s["definitions"][D]["fla"]["geomean_speedup_vs_baseline"] is None  # the baseline against itself
    assert s["solutions"]["triton"]["geomean_speedup_vs_baseline"] == pytest.approx(2 ** (2 / 3))
    assert summarize(load_traces([run]))["definitions"][D]["triton"]["geomean_speedup_vs_baseline"] is None


def test_sol_fractions_stored_derived_and_absent(run):
    s = summarize(load_traces([run]))
    triton, fla, cpu = (s["definitions"][D][k] for k in ("triton", "fla", "cpu-thing"))
    assert triton["median_sol_fraction"] == 0.5 and triton["sol_bound"] == "memory" and not triton["sol_derived"]
    # fla's record has TB/s but no stored fraction: 1.675 / 3.35 (the H100 datasheet bandwidth)
    assert fla["median_sol_fraction"] == pytest.approx(0.5) and fla["sol_bound"] == "memory" and fla["sol_derived"]
    assert cpu["median_sol_fraction"] is None  # the CPU has no roofline: absent, not zero


def test_markdown_and_terminal_table(run, capsys):
    assert main(["report", str(run), "--baseline", "fla"]) == 1  # cpu-thing failed once
    md = (run / "summary.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| definition"))
    assert "vs fla" in header and "SOL (median)" in header and "speedup" not in header
    triton_row = next(line for line in md.splitlines() if line.startswith(f"| {D} | triton"))
    assert "| 1.59 |" in triton_row and "| 50% memory |" in triton_row
    assert "| 512 tokens · 1 sequence | w-mid | - | 1 |" in md  # per workload, sorted by size
    assert "vs fla" in capsys.readouterr().err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["baseline"] == "fla" and summary["baseline_speedups"]


def test_report_refuses_an_unknown_baseline(run, capsys):
    assert main(["report", str(run), "--baseline", "nobody"]) == 2
    assert "nobody" in capsys.readouterr().err


def test_html_sorts_workloads_by_size_and_draws_the_plots(run):
    ts = load_traces([run])
    page = render_html(summarize(ts, "fla"), ts)
    section = page[page.index(f"<h2 id='{D}'>"):]
    labels = re.findall(r"<td class='wl'[^>]*><b>([^<]+)</b>", section)
    assert labels == ["9 tokens · 3 sequences", "512 tokens · 1 sequence", "4,096 tokens · 2 sequences"]
    assert "the small one" in section  # the workload's description
    latency_svg = section[section.index("latency vs size"):section.index("</svg>")]
    assert latency_svg.count("<polyline") == 3  # triton, fla, cpu-thing (its one passing record)
    assert "RMS-relative error vs token position" in section
    assert "×1.59</span> vs fla" in page and "SOL 50% memory" in page
    # self-contained: no scripts, nothing loaded from anywhere
    assert "<script" not in page and not re.search(r"""(src|href)=['"]?https?:""", page)


def test_the_checked_in_h100_records_render(tmp_path):
    out = tmp_path / "report"
    assert main(["report", str(H100_RUN), "--out", str(out), "--baseline", "fla"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["totals"]["records"] == 891 and s["totals"]["failed"] == 0
    fractions = [e["median_sol_fraction"] for per in s["definitions"].values() for e in per.values()
                 if e["median_sol_fraction"] is not None]
    assert fractions and all(0 < f < 1 for f in fractions)  # derived from the H100 table: below the roofline
    page = (out / "report.html").read_text()
    assert page.count("aria-label=\"latency vs size") == len(s["definitions"])  # one plot per definition


def _browser():
    return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed (apt-get install chromium)")
def test_report_renders_in_a_real_browser(run, tmp_path):
    """Headless Chromium parses the page (the DOM it builds has the tables and plots) and paints it."""
    main(["report", str(run), "--baseline", "fla"])
    url = (run / "report.html").resolve().as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run([_browser(), *flags, f"--user-data-dir={profile}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=120).stdout
        png = tmp_path / "report.png"
        subprocess.run([_browser(), *flags, f"--user-data-dir={profile}", f"--screenshot={png}",
                        "--window-size=1400,1800", url], capture_output=True, timeout=120)
    assert dom.count("<svg") >= 2 and "4,096 tokens · 2 sequences" in dom and "</table>" in dom
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1400, 1800)
    assert len(data) > 30_000  # a blank page compresses to a few kB


def test_the_peaks_used_are_named(run):
    s = summarize(load_traces([run]))
    used = {(p["model"], p["tbps"], p["tflops"], p["in_record"]) for p in s["peaks"]}
    assert used == {("test GPU", 2.0, 100.0, True), ("H100 SXM5 80GB", 3.35, 989.4, False)}
