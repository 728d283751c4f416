"""`kda-trace run` (evaluate solutions on workloads) and `kda-trace report` (re-render and merge)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import List, Tuple

from .cli_args import add_dataset_argument, add_filter_arguments

DEFAULT_OUT = "kda-trace-out"
WORKERS_PER_GPU = 3
"""Workers per GPU by default: most of an evaluation is untimed work that several workers can do side by side, while
their timing loops take the GPU one at a time (gpu_turns.py). A worker and its solution's process keep up to two
cores busy: fewer workers where there are under 4 cores each."""


def _shard(text: str) -> Tuple[int, int]:
    index, sep, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
    if not sep or n < 1 or not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: need 0 <= I < N (shards are numbered from 0)")
    return i, n


def configure_run(parser: argparse.ArgumentParser) -> None:
    add_dataset_argument(parser)
    add_filter_arguments(parser)
    parser.add_argument("--solution", dest="solutions", action="append", default=[],
                        metavar="NAME|FILE.py::FN|SOLUTION.json",
                        help="solution to evaluate (repeatable): reference, triton, fla, a file.py::function, "
                             "or a Solution JSON file (default: triton)")
    parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when present)")
    parser.add_argument("--seed", type=int, default=None, help="input seed (default: kda_trace.inputs.DEFAULT_SEED)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output directory (default: {DEFAULT_OUT})")
    parser.add_argument("--resume", action="store_true", help="skip (definition, workload, solution) already in --out")
    parser.add_argument("--rerun", dest="rerun", action="append", default=[], metavar="STATUS",
                        help="with --resume: evaluate again the records of this status (repeatable), e.g. "
                             "RUNTIME_ERROR after the machine ran out of memory; the new record replaces the old "
                             "one in the trace file")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds one phase of an evaluation may take (build, run, timing) before it is "
                             "killed as a hang (default: 300 on a GPU, 600 on the CPU). A solution's first "
                             "call includes its compilation and autotuning: fla's chunk kernels can autotune "
                             "for minutes on a GPU, raise --timeout for them")
    parser.add_argument("--tolerance", dest="tolerances", action="append", default=[], metavar="OUTPUT=FIELD:V,...",
                        help="override an output's tolerance, e.g. o=atol:1e-2,rtol:1e-2 or "
                             "'*=max_rms_rel_error:1e-2' (fields: atol, rtol, min_matched_ratio, "
                             "max_rms_rel_error, min_cosine; 'none' turns a bound off)")
    parser.add_argument("--size", choices=["smoke", "all", "stress", "stress-only"], default=None,
                        help="smoke: workloads tagged smoke (default on the CPU); all: all but stress (default "
                             "on a GPU); stress: everything; stress-only: only the workloads tagged stress "
                             "(int64 addressing; on a GPU of at least 80 GB)")
    parser.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                        help="evaluate only shard I of N (0-based; a stable hash of definition and workload)")
    parser.add_argument("--trust-code", action="store_true",
                        help="run references that import or reach outside the allowlist")
    parser.add_argument("--cuda-graph", action="store_true", help="time solutions by replaying a CUDA graph")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes in all (default: --workers-per-gpu on each GPU; on the CPU min(2, cores))")
    parser.add_argument("--workers-per-gpu", type=int, default=None, metavar="N",
                        help="workers sharing each GPU: their untimed work runs side by side, their timing one at a "
                             "time (default: %d, fewer on a machine with under 4 cores per worker)" % WORKERS_PER_GPU)
    parser.add_argument("--precompile", type=int, default=None, metavar="N",
                        help="processes per solution that call every workload once before anything is timed, so "
                             "that kernels compile in parallel (default: all cores but two, up to 16, on a GPU; 0 on the "
                             "CPU); 0 turns it off")
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-up calls before timing (none after a call slower than the 1 s time budget)")
    parser.add_argument("--reps", type=int, default=None,
                        help="fewest timed repetitions (more fit the 1 s time budget; a call slower than the "
                             "budget is timed once)")
    parser.add_argument("--max-reps", type=int, default=None, help="most timed repetitions")
    parser.add_argument("--settle", type=float, default=None, metavar="FRACTION",
                        help="on a GPU, stop timing once the 95%% interval of the median is narrower than this "
                             "fraction of it (default 0.02; 0: every repetition the budget allows)")
    parser.add_argument("--inputs-on-host", action="store_true", default=None,
                        help="keep no input set on the GPU between calls: the judge keeps the inputs it reads and the "
                             "reference outputs in host memory, and each solution's process makes an input set again "
                             "from its seed whenever it needs it (default: only where an input set and its outputs "
                             "are larger than 1/10 of the GPU's memory, as on the stress workloads)")
    add_baseline_argument(parser)
    parser.add_argument("--peak-tbps", type=float, default=None, metavar="TB/S",
                        help="the device's peak memory bandwidth for the speed-of-light fraction (default: the "
                             "table in kda_trace/roofline.py for the device's name, or $KDA_TRACE_PEAK_TBPS)")
    parser.add_argument("--peak-tflops", type=float, default=None, metavar="TFLOP/S",
                        help="the device's peak dense bf16 tensor throughput (default: the table, or "
                             "$KDA_TRACE_PEAK_TFLOPS)")


def add_baseline_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", default=None, metavar="SOLUTION",
                        help="a solution of the run (its name, e.g. fla) to compare the others with: speedups per "
                             "workload and their geometric mean per definition")


def _usage(message: str) -> int:
    print(f"kda-trace run: error: {message}", file=sys.stderr)
    return 2


def command_run(args) -> int:
    """Evaluate solutions on workloads: verdicts, timing, trace records and reports."""
    from rich.console import Console

    from . import environment, platform
    from .compare import ToleranceSyntaxError, parse_tolerance_override
    from .dataset import is_remote, load_dataset, resolve_root
    from .inputs import DEFAULT_SEED
    from .reference import check_reference_source
    from .runner import (
        RunConfig, Task, TraceWriter, finished_keys, in_shard, make_record, rerun_keys, select_workloads,
    )
    from .schema import EvaluationStatus as S
    from .solutions.registry import DEFAULT_SOLUTIONS, SolutionError, resolve
    from .timing import TimingConfig

    console = Console(stderr=True, width=max(160, Console(stderr=True).width))
    try:
        device = platform.resolve_device(args.device)
    except ValueError as e:
        return _usage(str(e))
    gpu = device.startswith("cuda")
    platform.ensure_triton_can_run(device)
    tolerances = {}
    for text in args.tolerances:
        try:
            name, tol = parse_tolerance_override(text)
        except ToleranceSyntaxError as e:
            return _usage(str(e))
        tolerances[name] = tol
    if args.timeout is not None and args.timeout <= 0:
        return _usage("--timeout must be positive")
    try:
        root = resolve_root(args.dataset)
    except Exception as e:  # noqa: BLE001 - download or path problems are the user's to fix
        return _usage(f"--dataset {args.dataset!r}: {e}")
    ds = load_dataset(root)
    if ds.problems:
        console.print(f"[yellow]{len(ds.problems)} problems in the dataset {root} (invalid files are skipped; "
                      "`kda-trace validate` lists them)[/]")
    definitions = ds.select(args.op_type, args.names, args.tags)
    if not definitions:
        return _usage(f"no definition in {root} matches op_type={args.op_type} names={args.names} tags={args.tags}")
    for name in args.names:
        if not any(name == d.name or name in d.name for d in definitions):
            return _usage(f"--definition {name!r} matches no definition")
    specs = args.solutions or list(DEFAULT_SOLUTIONS)
    solutions = {}
    for spec in specs:
        try:
            solutions[spec] = resolve(spec, device, args.trust_code)
        except SolutionError as e:
            return _usage(str(e))
        except Exception as e:  # noqa: BLE001 - e.g. a user file that fails to import
            return _usage(f"--solution {spec!r}: {type(e).__name__}: {e}")
    names = {spec: s.name for spec, s in solutions.items()}
    if len(set(names.values())) != len(names):
        return _usage(f"two --solution arguments have the same name: {sorted(names.values())}")
    if args.baseline is not None and args.baseline not in names.values():
        return _usage(f"--baseline {args.baseline!r} is not one of this run's solutions: {sorted(names.values())}")
    from . import roofline

    for value, var, flag in ((args.peak_tbps, roofline.ENV_TBPS, "--peak-tbps"),
                             (args.peak_tflops, roofline.ENV_TFLOPS, "--peak-tflops")):
        if value is not None:
            if not value > 0:
                return _usage(f"{flag} must be positive")
            os.environ[var] = repr(value)  # read by environment.capture here and in the worker processes

    size = args.size or ("all" if gpu else "smoke")
    seed = DEFAULT_SEED if args.seed is None else args.seed
    if not gpu:
        console.print(f"[bold]No GPU in use: running on the CPU with TRITON_INTERPRET=1 on the {size} workloads; "
                      "timings are interpreter wall time, not speed figures.[/]")
    out = Path(args.out)
    rerun = set(args.rerun)
    unknown = sorted(rerun - {st.value for st in S})
    if unknown:
        return _usage(f"--rerun {unknown[0]}: not a status (one of {', '.join(st.value for st in S)})")
    if rerun and not args.resume:
        return _usage("--rerun needs --resume (without it every evaluation runs)")
    done = finished_keys(out, rerun) if args.resume else set()
    main_env = environment.capture(device if device != "cuda" else "cuda:0", seed, root)
    if not (main_env.isolation or "").startswith("sandbox"):
        console.print(f"[yellow]Solution processes run without a sandbox ({main_env.isolation}): each runs in a "
                      "process of its own, but can signal, read or write what the user running the judge can.[/]",
                      highlight=False)
    dataset_before = environment.dataset_fingerprint(str(root))
    writer = TraceWriter(out, replace=rerun_keys(out, rerun) if rerun else set())
    tasks: List[Task] = []
    counts = {"passed": 0, "failed": 0, "skipped": 0, "resumed": 0}
    no_workloads = []

    def record(definition, trace) -> None:
        writer.write(definition, trace)
        status = trace.evaluation.status
        key = "passed" if status == S.PASSED else ("skipped" if status == S.UNSUPPORTED else "failed")
        counts[key] += 1
        if key == "failed":
            first = (trace.evaluation.log.strip().splitlines() or [""])[0][:200]
            console.print(f"[red]{status.value}[/] {definition.name} / {trace.workload.uuid} / {trace.solution}: {first}")

    for d in definitions:
        workloads = [w for w in select_workloads(ds.workloads_of(d.name), size) if in_shard(d.name, w.uuid, args.shard)]
        if not workloads:
            no_workloads.append(d.name)
            continue
        refused = [] if args.trust_code else check_reference_source(d.reference, d.name)
        reasons = {}
        for spec, sol in solutions.items():
            if getattr(sol, "imports_user_code", False):
                reasons[spec] = None  # asked in the solution's own process: user code is never imported here
                continue
            try:
                reasons[spec] = sol.supports(d)
            except Exception as e:  # noqa: BLE001
                reasons[spec] = f"supports() raised {type(e).__name__}: {e}"
        for w in workloads:
            todo = []
            for spec in specs:
                if (d.name, w.uuid, names[spec]) in done:
                    counts["resumed"] += 1
                    continue
                if refused:
                    origin = " (a dataset from the Hub is untrusted)" if is_remote(args.dataset) else ""
                    record(d, make_record(d, w, names[spec], S.INVALID_REFERENCE, main_env,
                                          f"{d.name}: reference refused{origin}: " + "; ".join(refused)))
                elif reasons[spec] is not None:
                    record(d, make_record(d, w, names[spec], S.UNSUPPORTED, main_env, reasons[spec]))
                else:
                    todo.append(spec)
            if todo:
                tasks.append(Task(d, w, todo, names))
    if no_workloads:
        console.print(f"[yellow]{len(no_workloads)} definitions have no {size} workloads"
                      f"{' in this shard' if args.shard else ''}: {', '.join(no_workloads)}[/]")
    if counts["resumed"]:
        console.print(f"--resume: {counts['resumed']} finished evaluations skipped")

    per_gpu = args.workers_per_gpu or max(1, min(WORKERS_PER_GPU, (os.cpu_count() or 1) // 4))
    if gpu and device == "cuda":
        n = platform.cuda_device_count()
        devices = [f"cuda:{i}" for _ in range(per_gpu) for i in range(n)][: args.workers or n * per_gpu]
    elif gpu:
        devices = [device] * (args.workers or per_gpu)
    else:
        devices = [device] * (args.workers or min(2, os.cpu_count() or 1))
    from .inputs import input_files
    from .precompile import default_processes

    config = RunConfig(dataset_root=root, out=out, device=device, seed=seed, code_digest=main_env.code_digest,
                       input_files=input_files((t.workload for t in tasks), root),
                       timeout=args.timeout or (300.0 if gpu else 600.0), trust_code=args.trust_code,
                       precompile=args.precompile if args.precompile is not None else default_processes(device),
                       tolerances=tolerances, devices=devices, inputs_on_host=args.inputs_on_host,
                       timing=TimingConfig(warmup=args.warmup, min_reps=args.reps, max_reps=args.max_reps,
                                           settle=args.settle, cuda_graph=args.cuda_graph))
    total = sum(len(t.solutions) for t in tasks)
    try:
        if tasks:
            _run_with_progress(config, tasks, total, record, counts, main_env, console)
    except RuntimeError as e:
        writer.close()
        console.print(f"[red]kda-trace run: {e}[/]")
        return 1
    finally:
        writer.close()

    from .report import load_traces, print_summary, write_reports

    summary, paths = write_reports(load_traces([out]), out, args.baseline)
    print_summary(summary, console)
    console.print(f"this run: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped; "
                  f"traces in {out / 'traces'}; " + ", ".join(str(p) for p in paths))
    changed = environment.dataset_changes(dataset_before, str(root))
    if changed:
        console.print(f"[red]kda-trace run: the dataset under {root} changed on disk during the run ({'; '.join(changed)}): "
                      "this run judged every workload by the definitions and workloads as they were at its start, "
                      "but the files are no longer those (a solution's process may have rewritten them); check them "
                      "before another run or a publish[/]", highlight=False)
        return 1
    return 1 if counts["failed"] else 0


def _run_with_progress(config, tasks, total, record, counts, main_env, console) -> None:
    """Run the tasks under a progress bar whose ETA weighs each workload by its estimated cost
    (run_profile.Eta); name on the console a workload that takes longer than runner.SLOW_EVALUATION_S; write
    where the time went to <out>/profile.json and say it in one line."""
    from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    from .precompile import PRECOMPILE_MAX_BYTES
    from .run_profile import CPU_PRIOR, GPU_PRIOR, Eta, RunProfile, estimate_seconds, spread_by_cost
    from .runner import Runner, cost_of, needs_gpu_alone, task_bytes

    gpu = config.device.startswith("cuda")
    devices = config.devices or [config.device]
    workers = len(devices)
    shared = max(devices.count(d) for d in devices)  # one queue feeds every device, each with this many workers

    def alone(task) -> bool:
        return needs_gpu_alone(task, devices[0], shared)

    def estimate(task, first: bool = False) -> float:
        """`first`: the first workload of its definition in the run (its solutions compile there)."""
        d = task.definition
        _, nbytes = cost_of(d, task.workload)
        if nbytes is None:  # no cost declared: the inputs' and outputs' bytes
            nbytes = task_bytes(task)
        return estimate_seconds(nbytes, gpu, len(task.solutions), first, backward="stage:backward" in (d.tags or []),
                                alone=alone(task))

    if workers > 1:  # several devices share one queue: largest first, so that they finish together
        tasks = spread_by_cost(tasks, [estimate(t) for t in tasks], [alone(t) for t in tasks])
    estimates, seen = {}, set()
    for t in tasks:
        estimates[id(t)] = estimate(t, first=t.definition.name not in seen)
        seen.add(t.definition.name)
    eta = Eta(sum(estimates.values()), (GPU_PRIOR if gpu else CPU_PRIOR)["startup_s"], workers)
    profile = RunProfile()

    class EtaColumn(ProgressColumn):
        def render(self, task) -> Text:
            if task.finished:
                return Text("")
            left = int(eta.remaining())
            return Text(f"ETA {left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}", style="cyan")

    columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f}"),
               TimeElapsedColumn(), EtaColumn()]
    started = time.monotonic()
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("evaluating", total=total)

        def on_record(definition, trace) -> None:
            record(definition, trace)
            progress.update(bar, advance=1, description=f"[green]{counts['passed']} passed[/] "
                                                        f"[red]{counts['failed']} failed[/]")

        def on_event(kind, task, **info) -> None:
            if kind == "precompile":
                eta.precompile(info["items"], info["processes"], info["max_s"])
                large = (f"; {info['large']} more on workloads over {PRECOMPILE_MAX_BYTES >> 30} GiB, one at a time, "
                         "for a solution that autotunes") if info.get("large") else ""
                progress.console.print(f"precompile: {info['items']} calls in {info['processes']} processes per "
                                       f"solution, to compile before anything is timed{large}", highlight=False)
                return
            if kind == "precompiled":
                failed = f", {info['failed']} failed or cut off (the run compiles those itself)" \
                    if info["failed"] else ""
                left = f", {info['left']} large ones left to the run (no autotuning)" if info.get("left") else ""
                ended = info.get("ended") or {}
                each = ", ".join(f"{name}'s calls ended at {s:.0f} s"
                                 for name, s in sorted(ended.items(), key=lambda item: item[1]))
                each = f" ({each})" if len(ended) > 1 else ""
                progress.console.print(f"precompile: {info['ran']} calls in {info['seconds']:.0f} s{each}{failed}"
                                       f"{left}", highlight=False)
                return
            key = id(task)
            if key not in estimates:  # a task the runner put back with the solutions still to run
                estimates[key] = estimate(task)
            guess = estimates[key]
            if kind == "begin":
                eta.begin(key, guess)
            elif kind == "end":
                eta.finish(key, guess, info["seconds"])
                profile.evaluated(task.definition.name, task.workload.uuid, info["seconds"], guess)
                profile.eta_sample(time.monotonic() - started, eta.remaining())
            elif kind == "slow":
                who = f" ({info['solution']})" if info.get("solution") else ""
                progress.console.print(f"still evaluating {task.definition.name} / {task.workload.uuid} after "
                                       f"{info['seconds']:.0f} s on {info['device']}, in {info['phase']!r}{who}",
                                       highlight=False)

        runner = Runner(config, on_record, main_env, profile=profile, on_event=on_event)
        try:
            runner.run(tasks)
        finally:
            wall = time.monotonic() - started
            profile.write(Path(config.out) / "profile.json", wall, workers, config.device)
            for line in runner.strays:
                console.print(f"[red]killed a process that a solution left running ({line}): it could have "
                              f"rewritten this run's records or disturbed other solutions' timing[/]",
                              highlight=False)
    console.print(profile.summary_line(wall, workers) + f" ({Path(config.out) / 'profile.json'})", highlight=False)
    first_use = profile.first_use_line(wall)
    if first_use:
        console.print(first_use, highlight=False)


def configure_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="run directories (several merge, e.g. shards)")
    parser.add_argument("--out", default=None, help="where to write the summary (default: the first DIR)")
    add_baseline_argument(parser)


def command_report(args) -> int:
    """Re-render (and merge) run directories into summary.json, summary.md and report.html."""
    from rich.console import Console

    from .report import load_traces, print_summary, write_reports

    console = Console(stderr=True, width=max(160, Console(stderr=True).width))
    missing = [d for d in args.dirs if not Path(d).is_dir()]
    if missing:
        print(f"kda-trace report: error: not a directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    ts = load_traces(args.dirs)
    for p in ts.problems:
        console.print(f"[yellow]{p}[/]")
    if not ts.records:
        print("kda-trace report: error: no trace records found", file=sys.stderr)
        return 2
    if args.baseline is not None and not any(sol == args.baseline for (_, _, sol) in ts.records):
        solutions = sorted({sol for (_, _, sol) in ts.records})
        print(f"kda-trace report: error: --baseline {args.baseline!r} has no records in {', '.join(args.dirs)} "
              f"(solutions: {', '.join(solutions)})", file=sys.stderr)
        return 2
    summary, paths = write_reports(ts, Path(args.out or args.dirs[0]), args.baseline)
    print_summary(summary, console)
    console.print("wrote " + ", ".join(str(p) for p in paths))
    return 1 if summary["totals"]["failed"] else 0
