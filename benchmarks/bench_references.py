"""Time every KDA reference over the dataset's workloads, and check fla's Triton kernels against them.

For each definition and each workload (stress ones only with --stress): materialise the inputs on the
device (seeded, kda_trace.inputs), run the reference once (time it, synchronised), then, where fla 0.6.0
implements the definition, run fla's kernels on the same inputs and measure their error against the
reference with the definition's tolerance:
    prefill  chunk_kda and fused_recurrent_kda (varlen, in-kernel L2 norm / gate / beta sigmoid, V-first state)
    forward  chunk_kda and fused_recurrent_kda (defaults)
    backward chunk_kda under autograd
    decode, mtp   fused_recurrent_kda_fwd against the pool (ssm_state_indices, in place)
    gate     fused_kda_gate
and two deliberately wrong variants of chunk_kda on prefill (initial state dropped; the other gate kind),
which the tolerance must reject. One JSON line per workload goes to --out/references.jsonl as it is
made; a markdown summary goes to --out/summary.md.

    python benchmarks/bench_references.py --out /tmp/bench [--stress] [--only NAME] [--budget-s 480]

Where a reference's time goes, on each definition's largest workloads (no fla):
    python benchmarks/bench_references.py --out DIR --no-fla --largest 1 --repeat 3 --profile 12 \
        [--constant CHUNK=64]
--repeat R calls it R times (the first is cold: allocator, cuBLAS handles); --profile K prints the K costliest
operators of one more call (torch.profiler, by device time, with their call counts); --constant NAME=VALUE sets a
top-level constant of the compiled reference (e.g. its chunk size) to time an alternative without rebuilding the
dataset.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import math
import os
import time
from pathlib import Path

import torch

from kda_trace.dataset import load_dataset
from kda_trace.inputs import make_inputs
from kda_trace.reference import compile_reference
from kda_trace.runner import declared_bytes

REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- metrics

def metrics(ref: torch.Tensor, out: torch.Tensor, tol, chunk: int = 1 << 26) -> dict:
    """Error of `out` against `ref` and whether the definition's tolerance accepts it. Works through the
    flattened tensors in chunks (float32 differences, float64 sums) so that 65536-token outputs fit."""
    ref, out = ref.reshape(-1), out.reshape(-1)
    s = dict(dd=0.0, rr=0.0, oo=0.0, ro=0.0, matched=0, max_abs=0.0, worst=0.0, finite=True)
    for i in range(0, ref.numel(), chunk):
        r, o = ref[i:i + chunk].float(), out[i:i + chunk].float()
        diff = (r - o).abs()
        bound = tol.atol + tol.rtol * r.abs()
        s["finite"] &= bool(torch.isfinite(o).all())
        s["dd"] += diff.double().pow(2).sum().item()
        s["rr"] += r.double().pow(2).sum().item()
        s["oo"] += o.double().pow(2).sum().item()
        s["ro"] += (r.double() * o.double()).sum().item()
        s["matched"] += int((diff <= bound).sum().item())
        s["max_abs"] = max(s["max_abs"], diff.max().item())
        s["worst"] = max(s["worst"], (diff / bound).max().item())
    n = ref.numel()
    rms = math.sqrt(s["dd"]) / max(math.sqrt(s["rr"]), 1e-30)
    cos = s["ro"] / max(math.sqrt(s["rr"] * s["oo"]), 1e-30)
    matched = s["matched"] / n
    ok = s["finite"] and rms <= tol.max_rms_rel_error and cos >= tol.min_cosine and matched >= tol.min_matched_ratio
    return {"rms_rel": rms, "cosine": cos, "max_abs": s["max_abs"], "matched": matched,
            "worst_bound_ratio": s["worst"], "ref_rms": math.sqrt(s["rr"] / n), "pass": ok}


def judge(definition, ref_out: tuple, out: tuple) -> dict:
    return {name: metrics(r, o, definition.outputs[name].tolerance) for name, r, o in zip(definition.outputs, ref_out, out)}


# --------------------------------------------------------------------------- fla adapters

def fla_prefill(d, x, kernel="chunk", drop_init=False, flip_gate=False):
    from fla.ops.kda import chunk_kda, fused_recurrent_kda

    safe = d.tag("gate") == "safe"
    if flip_gate:
        safe = not safe
    lb = -5.0 if safe else None
    h0 = None if drop_init else x["initial_state"]
    common = dict(scale=x["scale"], initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
                  use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, lower_bound=lb, state_v_first=True,
                  cu_seqlens=x["cu_seqlens"], A_log=x["A_log"], dt_bias=x["dt_bias"].reshape(-1))
    args = (x["q"][None], x["k"][None], x["v"][None], x["g_raw"][None], x["b"][None])
    if kernel == "chunk":
        o, s = chunk_kda(*args, safe_gate=safe, **common)
    else:
        o, s = fused_recurrent_kda(*args, **common)
    return o[0], s


def fla_forward(d, x, kernel="chunk"):
    from fla.ops.kda import chunk_kda, fused_recurrent_kda

    fn = chunk_kda if kernel == "chunk" else fused_recurrent_kda
    return fn(x["q"], x["k"], x["v"], x["g"], x["beta"], scale=x["scale"], initial_state=x["initial_state"],
              output_final_state=True)


def fla_backward(d, x):
    from fla.ops.kda import chunk_kda

    leaves = {k: x[k].detach().clone().requires_grad_() for k in ("q", "k", "v", "g", "beta", "initial_state")}
    with torch.enable_grad():
        o, s = chunk_kda(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"], scale=x["scale"],
                         initial_state=leaves["initial_state"], output_final_state=True)
        torch.autograd.backward((o, s), (x["do"], x["dht"]))
    return tuple(leaves[k].grad for k in ("q", "k", "v", "g", "beta", "initial_state"))


def fla_pool(d, x):
    """decode [B, ...] / mtp [B, T, ...] through fused_recurrent_kda_fwd on the pool, in place."""
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    mtp = d.tag("stage") == "mtp"
    B = x["q"].shape[0]
    T = x["q"].shape[1] if mtp else 1
    flat = lambda t: t.reshape(1, B * T, *t.shape[(2 if mtp else 1):])  # noqa: E731
    pool = x["state_pool"].clone()
    # one row of slot indices per request, one column per token: every token's state goes to the request's
    # slot, so the last write is the final state (a 1-D index would be read per token offset)
    indices = x["state_indices"][:, None].expand(B, T).contiguous() if mtp else x["state_indices"]
    lb = -5.0 if d.tag("gate") == "safe" else None
    o, _ = fused_recurrent_kda_fwd(
        flat(x["q"]), flat(x["k"]), flat(x["v"]), flat(x["g_raw"]), flat(x["b"]), A_log=x["A_log"],
        dt_bias=x["dt_bias"].reshape(-1), initial_state=pool, scale=x["scale"], inplace_final_state=True,
        state_v_first=True, cu_seqlens=torch.arange(0, B * T + 1, T, device=pool.device),
        ssm_state_indices=indices, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
        use_beta_sigmoid_in_kernel=True, lower_bound=lb)
    return o.reshape(x["v"].shape), pool


def fla_gate(d, x):
    from fla.ops.kda.gate import fused_kda_gate

    lb = -5.0 if d.tag("gate") == "safe" else None
    return (fused_kda_gate(x["g_raw"], x["A_log"], dt_bias=x["dt_bias"].reshape(-1), lower_bound=lb),)


def fla_runs(d, x) -> dict:
    """name -> callable returning fla's outputs (a tuple in the definition's output order)."""
    stage = d.tag("stage")
    if stage == "prefill":
        runs = {"fla.chunk_kda": lambda: fla_prefill(d, x, "chunk"),
                "fla.fused_recurrent_kda": lambda: fla_prefill(d, x, "recurrent"),
                "wrong: chunk_kda with the other gate kind": lambda: fla_prefill(d, x, "chunk", flip_gate=True)}
        if x["initial_state"] is not None:
            runs["wrong: chunk_kda without initial state"] = lambda: fla_prefill(d, x, "chunk", drop_init=True)
        return runs
    if stage == "forward":
        return {"fla.chunk_kda": lambda: fla_forward(d, x, "chunk"),
                "fla.fused_recurrent_kda": lambda: fla_forward(d, x, "recurrent")}
    if stage == "backward":
        return {"fla.chunk_kda.backward": lambda: fla_backward(d, x)}
    if stage in ("decode", "mtp"):
        return {"fla.fused_recurrent_kda_fwd(pool)": lambda: fla_pool(d, x)}
    if stage == "gate":
        return {"fla.fused_kda_gate": lambda: fla_gate(d, x)}
    return {}


# --------------------------------------------------------------------------- main

def render(jsonl: Path) -> str:
    """Markdown tables from references.jsonl: reference time per definition, and per (definition, fla
    kernel) the worst error over the workloads and how many passed the definition's tolerance."""
    recs = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    times, kernels = {}, {}
    for r in recs:
        t = times.setdefault(r["definition"], [0, 0.0, 0.0])
        t[0] += 1
        t[1] += r["ref_s"]
        t[2] = max(t[2], r["ref_s"])
        for k, res in r["fla"].items():
            e = kernels.setdefault((r["definition"], k), {"n": 0, "pass": 0, "errors": 0, "worst": {}})
            e["n"] += 1
            if "error" in res:
                e["errors"] += 1
                continue
            outs = {o: m for o, m in res.items() if isinstance(m, dict)}
            e["pass"] += all(m["pass"] for m in outs.values()) and res.get("untouched_identical", True)
            for o, m in outs.items():
                w = e["worst"].setdefault(o, {"rms_rel": 0.0, "cosine": 1.0, "matched": 1.0, "bound": 0.0})
                w["rms_rel"] = max(w["rms_rel"], m["rms_rel"])
                w["cosine"] = min(w["cosine"], m["cosine"])
                w["matched"] = min(w["matched"], m["matched"])
                w["bound"] = max(w["bound"], m["worst_bound_ratio"])
    out = ["| definition | workloads | reference total (s) | slowest workload (s) |", "|---|---:|---:|---:|"]
    for name, (n, total, slowest) in times.items():
        out.append(f"| {name} | {n} | {total:.1f} | {slowest:.2f} |")
    out.append(f"| all | {sum(t[0] for t in times.values())} | {sum(t[1] for t in times.values()):.1f} | |")
    out += ["", "| definition | fla kernel | passed / run | output: worst RMS-rel, min cosine, min matched, max err/bound |",
            "|---|---|---:|---|"]
    for (name, k), e in kernels.items():
        worst = "; ".join(f"{o}: {w['rms_rel']:.1e}, {w['cosine']:.6f}, {w['matched']:.5f}, {w['bound']:.2f}"
                          for o, w in e["worst"].items())
        errs = f" ({e['errors']} errors)" if e["errors"] else ""
        out.append(f"| {name} | {k} | {e['pass']} / {e['n']}{errs} | {worst} |")
    return "\n".join(out)


def profile_call(call, top: int) -> str:
    """The `top` costliest operators of one `call()` (torch.profiler; device time on a GPU), with call counts."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with torch.no_grad(), profile(activities=activities) as prof:
        call()
        sync()
    key = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=top, max_name_column_width=50)


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="output folder")
    ap.add_argument("--render", type=Path, help="print markdown tables from a references.jsonl and exit")
    ap.add_argument("--stress", action="store_true", help="also the stress workloads")
    ap.add_argument("--smoke", action="store_true", help="only the smoke workloads")
    ap.add_argument("--only", action="append", default=[], help="definition names containing this")
    ap.add_argument("--no-fla", action="store_true", help="time the references only")
    ap.add_argument("--wrong-max-tokens", type=int, default=600,
                    help="run the deliberately wrong fla variants only on workloads up to this many tokens")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting workloads after this many seconds")
    ap.add_argument("--largest", type=int, default=0, metavar="N",
                    help="only each definition's N largest workloads (by input bytes)")
    ap.add_argument("--repeat", type=int, default=1, metavar="R", help="call the reference R times, each timed")
    ap.add_argument("--profile", type=int, default=0, metavar="K",
                    help="profile one more call and print its K costliest operators")
    ap.add_argument("--constant", action="append", default=[], metavar="NAME=VALUE",
                    help="set a top-level constant of the compiled reference (a Python literal)")
    args = ap.parse_args()
    if args.render:
        print(render(args.render))
        return
    if args.out is None:
        ap.error("--out is required")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    ds = load_dataset(REPO)
    order = ["prefill", "decode", "mtp", "forward", "backward", "gate"]  # most important first, in case of --budget-s
    defs = sorted((d for d in ds.definitions.values() if d.op_type == "kda"),
                  key=lambda d: (order.index(d.tag("stage")) if d.tag("stage") in order else 99, d.name))
    if args.only:  # in the order of the --only arguments
        defs = [d for o in args.only for d in defs if o in d.name]
        defs = [d for i, d in enumerate(defs) if d not in defs[:i]]
    start = time.time()
    log = (args.out / "references.jsonl").open("w")
    summary = {}
    for d in defs:
        run = compile_reference(d.reference, d.name)
        for item in args.constant:
            name, value = item.split("=", 1)
            if name in run.__globals__:
                run.__globals__[name] = ast.literal_eval(value)
        workloads = [w for w in ds.workloads_of(d.name)
                     if not (("stress" in w.tags and not args.stress) or (args.smoke and "smoke" not in w.tags))]
        if args.largest:
            workloads = sorted(workloads, key=lambda w: -declared_bytes(d, d.inputs, w))[:args.largest]
        for w in workloads:
            if time.time() - start > args.budget_s:
                print(f"budget reached: skipping {d.name} {w.uuid[:8]}", flush=True)
                summary.setdefault(d.name, {"n": 0, "ref_s": 0.0, "skipped": 0})["skipped"] = \
                    summary.get(d.name, {}).get("skipped", 0) + 1
                continue
            x = make_inputs(d, w, device=device)
            t0 = time.perf_counter()
            calls_s = []
            for _ in range(max(1, args.repeat)):
                sync()
                t1 = time.perf_counter()
                with torch.no_grad():
                    ref = run(**x)
                sync()
                calls_s.append(time.perf_counter() - t1)
            ref_s = calls_s[0]
            if args.profile:
                print(profile_call(functools.partial(run, **x), args.profile), flush=True)
            ref = ref if isinstance(ref, tuple) else (ref,)
            rec = {"definition": d.name, "uuid": w.uuid, "axes": w.axes, "tags": w.tags,
                   "description": w.description, "ref_s": ref_s, "calls_s": calls_s,
                   "ref_finite": all(bool(torch.isfinite(r).all()) for r in ref), "fla": {}}
            if not args.no_fla and (device == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"):
                for name, fn in fla_runs(d, x).items():
                    if device != "cuda" and "chunk" in name:
                        continue  # chunk_kda's autotuner needs a GPU
                    if name.startswith("wrong") and x["q"].shape[0] > args.wrong_max_tokens:
                        continue
                    try:
                        t1 = time.perf_counter()
                        with torch.no_grad():
                            out = fn()
                        sync()
                        fla_s = time.perf_counter() - t1
                        rec["fla"][name] = judge(d, ref, tuple(out))
                        rec["fla"][name]["seconds"] = fla_s  # first call of a shape includes compile/autotune
                        if d.tag("stage") in ("decode", "mtp"):  # untouched slots must be bit-identical
                            keep = torch.ones(x["state_pool"].shape[0], dtype=torch.bool, device=device)
                            keep[x["state_indices"]] = False
                            rec["fla"][name]["untouched_identical"] = bool(torch.equal(out[1][keep], x["state_pool"][keep]))
                    except Exception as e:  # noqa: BLE001 - record and go on
                        rec["fla"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            rec["wall_s"] = time.perf_counter() - t0
            log.write(json.dumps(rec) + "\n")
            log.flush()
            s = summary.setdefault(d.name, {"n": 0, "ref_s": 0.0, "skipped": 0})
            s["n"] += 1
            s["ref_s"] += ref_s
            verdicts = {k: (v.get("error") and "error") or all(m["pass"] for m in v.values() if isinstance(m, dict))
                        for k, v in rec["fla"].items()}
            calls = " ".join(f"{c:.3f}" for c in calls_s)
            print(f"{d.name:42s} {str(w.axes):70s} ref {calls} s  {verdicts}", flush=True)
            del x, ref
            if device == "cuda":
                torch.cuda.empty_cache()
    log.close()
    lines = ["| definition | workloads | reference time (s) | skipped |", "|---|---:|---:|---:|"]
    for name, s in summary.items():
        lines.append(f"| {name} | {s['n']} | {s['ref_s']:.1f} | {s['skipped']} |")
    total = sum(s["ref_s"] for s in summary.values())
    lines.append(f"| total | {sum(s['n'] for s in summary.values())} | {total:.1f} | |")
    import triton
    try:
        import fla
        fla_version = fla.__version__
    except Exception:  # noqa: BLE001
        fla_version = "missing"
    lines.append(f"\nwall time {time.time() - start:.0f} s on {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, "
                 f"torch {torch.__version__}, triton {triton.__version__}, fla {fla_version}")
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
