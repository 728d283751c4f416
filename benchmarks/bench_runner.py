"""The runner's own overhead per workload: wall time of evaluating a workload minus the time spent inside
the reference and solution calls.

End-to-end: the tasks through `Runner` with a spawned worker process (and, since the solutions run in
processes of their own, one solution process per solution), records written to disk; reported as wall time
per workload, with the one-off start-up timed separately. (An earlier in-worker split of the wall time into
time in calls and overhead wrapped the solution in the worker's process; solutions no longer run there.)

Usage: python benchmarks/bench_runner.py [--definition NAME ...] [--solution fla] [--size all] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
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
from kda_trace.runner import RunConfig, Runner, Task, select_workloads  # noqa: E402
from kda_trace.solutions.registry import resolve  # noqa: E402
from kda_trace.timing import TimingConfig  # noqa: E402


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

    # end to end through a spawned worker (compilation caches are per process: first tasks warm it)
    t0 = time.perf_counter()
    runner = Runner(config, lambda d, t: None, capture(device, DEFAULT_SEED, root))
    runner.run(tasks[:1])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    runner.run(tasks)
    e2e = time.perf_counter() - t0

    env = capture(device, DEFAULT_SEED, root)
    result = {
        "device": env.hardware, "libs": env.libs, "solution": solution.name, "workloads": len(tasks),
        "end_to_end_first_task_s_incl_worker_start": first,
        "end_to_end_s": e2e, "end_to_end_per_workload_s": e2e / len(tasks),
        "end_to_end_note": "a fresh worker is spawned per Runner.run; includes its start-up and compilation",
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
