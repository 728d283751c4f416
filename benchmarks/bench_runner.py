"""The runner's own overhead per workload: wall time of evaluating a workload minus the time spent inside
the reference and solution calls.

Two measurements:
1. in-worker: `WorkerContext.evaluate_task` in this process, with the reference and every solution wrapped
   in a timer (device-synchronised before and after each call). Overhead = workload wall time - time in
   calls; it covers input generation (two seeded sets), fresh copies, output checks and metrics, the
   per-repetition input refresh and L2 flush of the timing loop, and record building.
2. end-to-end: the same tasks through `Runner` with a spawned worker process, records written to disk;
   reported as wall time per workload, with the one-off worker start-up timed separately.

Usage: python benchmarks/bench_runner.py [--definition NAME ...] [--solution fla] [--size all] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kda_trace import platform  # noqa: E402
from kda_trace.dataset import load_dataset, resolve_root  # noqa: E402
from kda_trace.environment import capture  # noqa: E402
from kda_trace.inputs import DEFAULT_SEED  # noqa: E402
from kda_trace.runner import RunConfig, Runner, Task, WorkerContext, select_workloads  # noqa: E402
from kda_trace.solutions.registry import resolve  # noqa: E402
from kda_trace.timing import TimingConfig  # noqa: E402


class Timed:
    """Wraps a callable; accumulates its synchronised wall time and call count."""

    def __init__(self, fn, device: str):
        self.fn, self.device, self.seconds, self.calls = fn, device, 0.0, 0

    def __call__(self, **kwargs):
        platform_sync(self.device)
        t0 = time.perf_counter()
        out = self.fn(**kwargs)
        platform_sync(self.device)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out


def platform_sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default=None)
    p.add_argument("--definition", action="append", default=[])
    p.add_argument("--solution", default="fla")
    p.add_argument("--size", default=None)
    p.add_argument("--device", default=None)
    p.add_argument("--max-workloads", type=int, default=12)
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()

    device = platform.resolve_device(args.device)
    platform.ensure_triton_can_run(device)
    if device == "cuda":
        device = "cuda:0"
    root = resolve_root(args.dataset)
    ds = load_dataset(root)
    names = args.definition or ["kda_decode_h32_d128_k_last", "kda_mtp_h32_d128_k_last"]
    size = args.size or ("all" if device.startswith("cuda") else "smoke")
    solution = resolve(args.solution, device)
    tasks = []
    for d in ds.select("kda", names):
        if solution.supports(d) is not None:
            print(f"skip {d.name}: {solution.supports(d)}", file=sys.stderr)
            continue
        for w in select_workloads(ds.workloads_of(d.name), size)[: args.max_workloads]:
            tasks.append(Task(d, w, [args.solution], {args.solution: solution.name}))
    if not tasks:
        print("no workloads to measure", file=sys.stderr)
        return 2
    out = Path(tempfile.mkdtemp(prefix="bench_runner_"))
    config = RunConfig(dataset_root=root, out=out, device=device, seed=DEFAULT_SEED, timeout=600,
                       timing=TimingConfig(), devices=[device])

    # 1. in-worker overhead
    ctx = WorkerContext(config, device, lambda spec, phase: None)
    rows = []
    for task in tasks:
        d = task.definition
        ref = ctx.reference(d)
        built = solution.build(d, device)
        ctx.references[d.name] = Timed(ref.fn if isinstance(ref, Timed) else ref, device)
        ctx.built[(args.solution, d.name)] = Timed(built, device)
        ctx.solutions[args.solution] = solution
        # warm once (compilation, autotuning) so that it does not count as runner overhead
        list(ctx.evaluate_task(task))
        ctx.references[d.name] = r = Timed(ctx.references[d.name].fn, device)
        ctx.built[(args.solution, d.name)] = s = Timed(ctx.built[(args.solution, d.name)].fn, device)
        platform_sync(device)
        t0 = time.perf_counter()
        records = list(ctx.evaluate_task(task))
        platform_sync(device)
        wall = time.perf_counter() - t0
        in_calls = r.seconds + s.seconds
        perf = records[0].evaluation.performance
        rows.append({"definition": d.name, "workload": task.workload.uuid, "axes": task.workload.axes,
                     "status": records[0].evaluation.status.value, "wall_ms": wall * 1e3,
                     "in_calls_ms": in_calls * 1e3, "overhead_ms": (wall - in_calls) * 1e3,
                     "reference_calls": r.calls, "solution_calls": s.calls,
                     "overhead_per_solution_call_ms": (wall - in_calls) * 1e3 / max(1, s.calls),
                     "solution_latency_ms": perf.latency_ms if perf else None})

    # 2. end-to-end through a spawned worker (compilation caches are per process: first tasks warm it)
    t0 = time.perf_counter()
    runner = Runner(config, lambda d, t: None, capture(device, DEFAULT_SEED, root))
    runner.run(tasks[:1])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    runner.run(tasks)
    e2e = time.perf_counter() - t0

    env = capture(device, DEFAULT_SEED, root)
    result = {
        "device": env.hardware, "libs": env.libs, "solution": solution.name, "workloads": len(rows),
        "in_worker": rows,
        "median_overhead_ms": statistics.median(r["overhead_ms"] for r in rows),
        "median_overhead_per_solution_call_ms": statistics.median(r["overhead_per_solution_call_ms"] for r in rows),
        "end_to_end_first_task_s_incl_worker_start": first,
        "end_to_end_s": e2e, "end_to_end_per_workload_s": e2e / len(tasks),
        "end_to_end_note": "a fresh worker is spawned per Runner.run; includes its start-up and compilation",
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print("\n| definition | workload | solution calls | reference calls | wall ms | in calls ms | overhead ms | "
          "overhead / solution call ms |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['definition']} | {r['workload']} | {r['solution_calls']} | {r['reference_calls']} | "
              f"{r['wall_ms']:.1f} | {r['in_calls_ms']:.1f} | {r['overhead_ms']:.1f} | "
              f"{r['overhead_per_solution_call_ms']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
