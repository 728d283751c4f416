"""Per-row errors: one workload of a fused backward definition against float64, or a run's records against the
per-row bound (`--margins`).

Against float64: the runner judges a solution against the definition's float32 reference. When a solution fails the per-row
bound, this says who is off: the reference, ours and fla are each compared with float64 autograd through the
plain recurrence (bench_backward.truth_grads, independent of all three), with the runner's own metric
(compare.compare_output, the definition's tolerances), on the runner's inputs (same seed, same device).

    python benchmarks/row_truth.py --name kda_bwd_fused_h96_d128_v_last_safe_gate --workload 3889c18e \
        [--seed S] [--solutions reference,triton,fla] [--device cuda]

Only the kda_bwd_fused_* definitions with the safe gate at -5 and K = 128 (what truth_grads' "safe_l2" mode
computes). Prints one JSON line per (solution, output): against float64, then against the reference.

    python benchmarks/row_truth.py --margins RUN_DIR [RUN_DIR ...]

--margins: the per-row bound's margins of `kda-trace run` output directories: for each definition, output and
solution, the largest per-row error over every record that compared outputs, the bound applied and their ratio;
then a status count per solution, and the definitions whose records were judged by more than one dataset revision
(a run directory resumed across changes of the dataset: each record carries its dataset_digest). Reads the
records only (no GPU, no torch work).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from bench_backward import K, truth_grads  # noqa: E402
from kda_trace.call_results import normalize_outputs  # noqa: E402
from kda_trace.compare import compare_output, tolerance_for  # noqa: E402
from kda_trace.dataset import load_dataset  # noqa: E402
from kda_trace.inputs import DEFAULT_SEED, clone_inputs, make_inputs  # noqa: E402
from kda_trace.solutions.registry import resolve  # noqa: E402

# definition output -> truth_grads leaf (inputs given [1, T, ...] as truth_grads' packed batch)
LEAF = {"dq": "q", "dk": "k", "dv": "v", "dg_raw": "g", "db": "beta", "dA_log": "A_log", "ddt_bias": "dt_bias",
        "dh0": "h0"}


def truth(inputs: dict) -> dict:
    """float64 gradients of every output of the definition, shaped as the definition's outputs."""
    assert abs(float(inputs["scale"]) - K ** -0.5) < 1e-12, "truth_grads uses scale K^-0.5"
    x = {"q": inputs["q"][None], "k": inputs["k"][None], "v": inputs["v"][None], "g": inputs["g_raw"][None],
         "beta": inputs["b"][None], "h0": inputs["initial_state"], "A_log": inputs["A_log"],
         "dt_bias": inputs["dt_bias"]}
    grads = truth_grads(x, inputs["cu_seqlens"], "safe_l2", inputs["do"][None], inputs["dht"])
    return {out: grads[leaf].reshape(x[leaf].shape[1:] if leaf in ("q", "k", "v", "g", "beta") else x[leaf].shape)
            for out, leaf in LEAF.items()}


def margins(dirs):
    """--margins: the worst row per (definition, output, solution) over the run directories' records."""
    worst = defaultdict(lambda: (0.0, None, None))
    statuses = defaultdict(Counter)
    digests = defaultdict(Counter)
    for d in dirs:
        for path in sorted(Path(d).glob("traces/*/*.jsonl")):
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                ev = rec["evaluation"]
                solution = rec["solution"].split("::")[-1]
                statuses[solution][ev["status"]] += 1
                digests[rec["definition"]][(ev.get("environment") or {}).get("dataset_digest")] += 1
                for name, m in ((ev.get("correctness") or {}).get("outputs") or {}).items():
                    value = m.get("max_row_rel_error")
                    if value is None or not isinstance(value, (int, float)):
                        continue
                    key = (rec["definition"], name, solution)
                    if value > worst[key][0]:
                        worst[key] = (value, m["tolerance"].get("max_row_rel_error"), rec["workload"]["uuid"][:8])
    print(f"{'definition':45} {'output':15} {'solution':20} {'worst row':>10} {'bound':>7} {'margin':>7} workload")
    for (d, o, s), (value, bound, uuid) in sorted(worst.items()):
        margin = f"{bound / value:.1f}x" if bound and value else "-"
        print(f"{d:45} {o:15} {s:20} {value:10.3e} {bound or 0:7.3g} {margin:>7} {uuid}")
    print()
    for solution, counts in sorted(statuses.items()):
        print(f"{solution:22} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for definition, counts in sorted(digests.items()):
        if len(counts) > 1:
            print(f"{definition}: records of {len(counts)} dataset revisions ("
                  + ", ".join(f"{d} x{n}" for d, n in counts.most_common()) + ")")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--margins", nargs="+", metavar="RUN_DIR", help="the per-row margins of these runs' records")
    ap.add_argument("--name")
    ap.add_argument("--workload", help="a uuid prefix")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--solutions", default="reference,triton,fla")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    if a.margins:
        return margins(a.margins)
    if not (a.name and a.workload):
        ap.error("--name and --workload (or --margins RUN_DIR)")
    ds = load_dataset()
    d = ds.definitions[a.name]
    (w,) = [w for w in ds.workloads_of(a.name) if w.uuid.startswith(a.workload)]
    inputs = make_inputs(d, w, a.seed, a.device)
    names = list(d.outputs)
    assert set(names) == set(LEAF), names
    ref64 = truth(inputs)

    def report(sol, against, refs, outs):
        """One JSON line per output: the runner's per-row metric of outs against refs."""
        for o in names:
            m = compare_output(d, o, refs[o].float(), outs[o].float(), tolerance_for(d, o), inputs["cu_seqlens"])
            print(json.dumps({"workload": w.uuid[:8], "seed": a.seed, "solution": sol, "output": o, "against": against,
                              "max_row_rel_error": m.max_row_rel_error, "rows_over_bound": m.rows_over_bound,
                              "worst_row": m.worst_row.where if m.worst_row else None,
                              "rms_rel_error": m.rms_rel_error}), flush=True)

    results = {}
    for sol in a.solutions.split(","):
        outs, why = normalize_outputs(d, resolve(sol, a.device).build(d, a.device)(**clone_inputs(inputs)))
        assert outs is not None, f"{sol} {why}"
        results[sol] = outs
        report(sol, "float64", ref64, outs)
    if "reference" in results:  # what the runner sees: each solution against the float32 reference
        for sol, outs in results.items():
            if sol != "reference":
                report(sol, "reference", results["reference"], outs)


if __name__ == "__main__":
    main()
