"""Where the main job's wall time goes: `kda-trace run` end to end from a cold start, per family and per kind of
work (start-up and compilation, input making, the reference, each solution's calls, transfers between
processes, the judge's comparisons).

It runs `kda-trace run` in a new process (nothing compiled or cached in it beforehand; Triton's on-disk cache is
pointed at an empty directory unless --warm-cache) and prints the run's profile.json as a table. With
--max-workloads N it runs the first N workloads of each definition, from a copy of the dataset, so that the same
subset can be timed before and after a change. --profile DIR only prints an existing run's profile.
--python-profile runs the worker and solution processes under cProfile and prints, per kind of process, the
functions that took the most time (where a category's seconds go inside a process). From a cold cache it also says
which kernels were compiled after the first workload began (what the precompile pass did not compile). It lists the
--slowest N workloads with each category's seconds, the records' statuses, and for a run that ends the ETA's range
against the real remaining time.

A run longer than one sitting (a device call of at most 10 minutes): `--time-limit S --out DIR` stops it with the
records it has; `--out DIR --resume` (passed on to `kda-trace run`) later runs only the rest, repeating the start-up
and the precompile of what is left: their seconds are the profile's "start-up" and "precompile".

Usage:
  python benchmarks/bench_runner.py                                   # the main job (every non-stress workload)
  python benchmarks/bench_runner.py --solution triton --solution fla  # two solutions
  python benchmarks/bench_runner.py --max-workloads 2 --definition kda_bwd --json out.json
  python benchmarks/bench_runner.py --profile kda-trace-out           # a finished run's profile
  python benchmarks/bench_runner.py --max-workloads 4 --definition kda_decode_h12 --python-profile
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def subset_dataset(src: Path, dest: Path, max_workloads: int) -> None:
    """A copy of the dataset at `src` with the first `max_workloads` non-stress workloads of each definition."""
    shutil.copytree(src / "definitions", dest / "definitions")
    for path in sorted((src / "workloads").rglob("*.jsonl")):
        kept = []
        for line in path.read_text().splitlines():
            if line.strip() and "stress" not in json.loads(line).get("tags", []):
                kept.append(line)
        out = dest / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(line + "\n" for line in kept[:max_workloads]))
    for extra in ("blobs", "inputs"):  # stored input files, where the dataset has them
        if (src / extra).exists():
            shutil.copytree(src / extra, dest / extra)


def table(profile: dict, slowest: int = 5) -> str:
    """The profile as a markdown table: a row per family, a column per category, seconds summed over workers; then
    the `slowest` workloads with where their time went."""
    categories = profile["categories"]
    cells = defaultdict(lambda: defaultdict(float))
    for row in profile["phases"]:
        cells[row["family"]][row["category"]] += row["seconds"]
    counts = defaultdict(int)
    for e in profile["evaluations"]:
        counts[e["definition"]] += 1
    from kda_trace.run_profile import family_of

    per_family = defaultdict(int)
    for name, n in counts.items():
        per_family[family_of(name)] += n
    lines = ["| family | workloads | " + " | ".join(categories) + " | total |",
             "|---" * (len(categories) + 3) + "|"]
    totals = defaultdict(float)
    for family in sorted(cells):
        row = cells[family]
        for c in categories:
            totals[c] += row[c]
        lines.append(f"| {family} | {per_family.get(family, '') or ''} | "
                     + " | ".join(f"{row[c]:.1f}" for c in categories) + f" | {sum(row.values()):.1f} |")
    lines.append(f"| all | {sum(per_family.values())} | " + " | ".join(f"{totals[c]:.1f}" for c in categories)
                 + f" | {sum(totals.values()):.1f} |")
    lines.append("")
    lines.append(f"wall time {profile['wall_s']:.1f} s on {profile['device']} with {profile['workers']} worker(s); "
                 "seconds summed over workers.")
    slow = sorted(profile["evaluations"], key=lambda e: -e["seconds"])[:slowest]
    if slow:
        lines += ["", f"The {len(slow)} slowest workloads (wall seconds from the task's start to its end; then each "
                  "category's seconds in it):", ""]
        for e in slow:
            spent = ", ".join(f"{c} {s:.1f}" for c, s in (e.get("categories") or {}).items() if s >= 0.05)
            lines.append(f"- {e['definition']}/{e['workload'][:8]} {e['seconds']:.1f} s: {spent}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default=str(ROOT), help="dataset root (default: this repository)")
    p.add_argument("--definition", action="append", default=[], help="only definitions whose name contains this")
    p.add_argument("--solution", action="append", default=[], help="solution spec (repeatable; default triton)")
    p.add_argument("--size", default=None, help="kda-trace run --size (default: all on a GPU, smoke on the CPU)")
    p.add_argument("--max-workloads", type=int, default=None, help="the first N workloads of each definition")
    p.add_argument("--warm-cache", action="store_true", help="keep Triton's on-disk cache (default: an empty one)")
    p.add_argument("--out", default=None, help="the run's output directory (default: a temporary one)")
    p.add_argument("--profile", default=None, metavar="DIR", help="only print DIR/profile.json")
    p.add_argument("--json", default=None, help="also write the profile here")
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="stop the run after S seconds (SIGTERM: it writes what it has)")
    p.add_argument("--slowest", type=int, default=5, metavar="N",
                   help="list the N slowest workloads with where their time went (default 5)")
    p.add_argument("--python-profile", action="store_true",
                   help="cProfile the worker and solution processes; print their most expensive functions")
    args, extra = p.parse_known_args()
    sys.path.insert(0, str(ROOT))

    from kda_trace.run_profile import first_use_line

    if args.profile:
        profile = json.loads((Path(args.profile) / "profile.json").read_text())
        print(table(profile, args.slowest))
        print(first_use_line(profile, profile.get("wall_s")))
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench_runner_"))
    dataset = Path(args.dataset)
    if args.max_workloads:
        subset_dataset(dataset, work / "dataset", args.max_workloads)
        dataset = work / "dataset"
    out = Path(args.out) if args.out else work / "out"
    cmd = [sys.executable, "-m", "kda_trace.cli", "run", "--op-type", "kda", "--dataset", str(dataset),
           "--out", str(out)]
    for name in args.definition:
        cmd += ["--definition", name]
    for spec in args.solution or ["triton"]:
        cmd += ["--solution", spec]
    if args.size:
        cmd += ["--size", args.size]
    cmd += extra
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    if not args.warm_cache:
        env["TRITON_CACHE_DIR"] = str(work / "triton-cache")
    from kda_trace.runner import PHASE_LOG_ENV

    env[PHASE_LOG_ENV] = str(work / "phases.tsv")
    pyprof = work / "python-profile"
    if args.python_profile:
        from kda_trace.run_profile import PYTHON_PROFILE_ENV
        from kda_trace.sandbox import SANDBOX_WRITABLE_ENV

        pyprof.mkdir()
        env[PYTHON_PROFILE_ENV] = str(pyprof)
        env[SANDBOX_WRITABLE_ENV] = os.pathsep.join(filter(None, [env.get(SANDBOX_WRITABLE_ENV), str(pyprof)]))
    print(" ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    run = subprocess.Popen(cmd, env=env)
    try:
        rc = run.wait(args.time_limit)
    except subprocess.TimeoutExpired:
        run.terminate()
        rc = run.wait()
        print(f"stopped after the time limit of {args.time_limit:g} s", file=sys.stderr)
    wall = time.perf_counter() - t0
    profile_path = out / "profile.json"
    if not profile_path.exists():
        print(f"the run wrote no profile (exit code {rc})", file=sys.stderr)
        return rc or 1
    profile = json.loads(profile_path.read_text())
    profile["command_wall_s"] = round(wall, 3)
    print(table(profile, args.slowest))
    print(first_use_line(profile, profile.get("wall_s")))
    print(f"the command took {wall:.1f} s (exit code {rc}); records: {record_statuses(out)}")
    from kda_trace.run_profile import eta_accuracy

    accuracy = eta_accuracy(profile) if rc == 0 else None
    if accuracy is not None:
        low, high, n = accuracy
        print(f"the ETA from the first minute until 30 s before the end: {low:.2f}x to {high:.2f}x the real "
              f"remaining time ({n} samples, one per evaluation)")
    elif rc != 0:
        print("the run did not finish: the ETA cannot be checked against the real remaining time")
    if args.json:
        Path(args.json).write_text(json.dumps(profile, indent=1) + "\n")
    if not args.warm_cache:
        print(compiled_during_evaluations(work / "triton-cache", work / "phases.tsv"))
    if args.python_profile:
        print_python_profile(pyprof)
    return rc


def record_statuses(out: Path) -> str:
    """How many of the run's records have each status, and the workloads of those that did not pass or were
    evaluated twice."""
    statuses, failed = Counter(), []
    for path in sorted((out / "traces").glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            try:  # a run stopped by --time-limit can leave a last line cut short
                record = json.loads(line)
                status, log = record["evaluation"]["status"], record["evaluation"].get("log") or ""
            except (ValueError, KeyError, TypeError, AttributeError):
                statuses["unreadable"] += 1
                continue
            statuses[status] += 1
            if status not in ("PASSED", "UNSUPPORTED") or log.startswith("[evaluated"):
                failed.append(f"{record['definition']}/{record['workload']['uuid'][:8]} {status} {log[:300]}")
    return ", ".join(f"{n} {s}" for s, n in statuses.most_common()) + "".join(f"\n  {f}" for f in failed)


def compiled_during_evaluations(cache: Path, phases: Path) -> str:
    """Which Triton kernels entered the cache after the first workload began (the phase log's first line), and so
    were compiled by the evaluations rather than by the precompile pass, with the workload then evaluated."""
    if not phases.exists() or not cache.exists():
        return "compiled during the evaluations: unknown (no phase log or no Triton cache)"
    lines = [line.split("\t") for line in phases.read_text().splitlines() if line.strip()]
    began = float(lines[0][0])
    kernels, late = 0, []
    for entry in cache.iterdir():
        groups = list(entry.glob("__grp__*.json"))
        if not groups:
            continue  # a launcher or a utility module, not a kernel
        kernels += 1
        made = groups[0].stat().st_mtime
        if made > began:
            during = [f for f in lines if float(f[0]) <= made]
            late.append((made - began, groups[0].name[len("__grp__"):-len(".json")], during[-1][2]))
    said = [f"compiled during the evaluations: {len(late)} of {kernels} kernels"]
    said += [f"  {t:7.1f} s  {name}  (workload {uuid})" for t, name, uuid in sorted(late)]
    return "\n".join(said)


def print_python_profile(folder: Path, top: int = 25) -> None:
    """The functions with the most time of their own, and the most time under them, per kind of process."""
    import pstats

    for role in ("worker", "solution"):
        files = sorted(str(p) for p in folder.glob(f"{role}-*.prof"))
        if not files:
            print(f"\nno Python profile from the {role} processes")
            continue
        for order in ("tottime", "cumulative"):
            print(f"\n## {role} processes ({len(files)}), by {order}")
            pstats.Stats(*files, stream=sys.stdout).strip_dirs().sort_stats(order).print_stats(top)


if __name__ == "__main__":
    sys.exit(main())
