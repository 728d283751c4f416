"""Which of FlashInfer's KDA entry points and backends run on this GPU, and how far each is from our reference.

    python benchmarks/gpu_flashinfer_probe.py [--out DIR]     (benchmarks/gpu_flashinfer_probe.sh sets it up)

For every (entry point, backend) pair it calls FlashInfer on small shapes of ours (our dataset's
decode / mtp / prefill interfaces, through the `flashinfer` solution's adapters where one exists), and
records: ran or the error it raised (type and message), the max abs / RMS-relative error of each output
against our reference (the definition's reference code, float32 on the same inputs), and the wall time of
one call after a warm-up (not a benchmark: the CuTe DSL JIT compiles on the first call). Prints a table
and writes DIR/flashinfer_probe.json (DIR defaults to $OUT, else kda-trace-out/).

Entry points: flashinfer.recurrent_kda (decode, speculative decode, packed prefill) with each of its 8
backends, flashinfer.kda_decode.recurrent_kda (the deprecated decode facade), packed_kda_decode,
fused_kda_decode and packed_fused_kda_decode (these two fuse a causal conv and a gated RMSNorm that we have
no reference for: only ran / error and finiteness are recorded), RecurrentKDAPrefillWrapper.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kda_trace.import_flashinfer import family_definition  # noqa: E402
from kda_trace.inputs import make_inputs  # noqa: E402
from kda_trace.reference import compile_reference  # noqa: E402
from kda_trace.schema import Definition, Workload  # noqa: E402

FACADE_BACKENDS = ["auto", "cute-dsl", "cute-dsl-persistent", "tirx", "ptx", "cake", "small-bh", "cudnn"]
DECODE_FACADE_BACKENDS = ["cute-dsl", "cake", "auto"]

# (label, family, H, HV, D, lower_bound, axes, seq_lens)
CASES = [
    ("decode h8 unbounded", "decode", 8, 8, 128, None, {"batch_size": 4, "pool_size": 9}, None),
    ("decode h16 safe", "decode", 16, 16, 128, -5.0, {"batch_size": 4, "pool_size": 9}, None),
    ("decode h12 safe", "decode", 12, 12, 128, -5.0, {"batch_size": 4, "pool_size": 9}, None),
    ("decode qk4 v8 (GVA) safe", "decode", 4, 8, 128, -5.0, {"batch_size": 3, "pool_size": 5}, None),
    ("decode h8 d64 unbounded", "decode", 8, 8, 64, None, {"batch_size": 3, "pool_size": 5}, None),
    ("mtp h8 T=3 unbounded", "mtp", 8, 8, 128, None, {"batch_size": 3, "num_tokens": 3, "pool_size": 7}, None),
    ("mtp h16 T=4 safe", "mtp", 16, 16, 128, -5.0, {"batch_size": 3, "num_tokens": 4, "pool_size": 7}, None),
    ("prefill h8 unbounded [1,17,64,130]", "prefill", 8, 8, 128, None,
     {"total_seq_len": 212, "num_seqs": 4, "len_cu_seqlens": 5}, [1, 17, 64, 130]),
    ("prefill h16 safe [1,17,64,130]", "prefill", 16, 16, 128, -5.0,
     {"total_seq_len": 212, "num_seqs": 4, "len_cu_seqlens": 5}, [1, 17, 64, 130]),
    ("prefill h64 safe [300]", "prefill", 64, 64, 128, -5.0, {"total_seq_len": 300, "num_seqs": 1, "len_cu_seqlens": 2}, [300]),
]


def case_inputs(family, h, hv, d, lb, axes, seq_lens, device):
    defn = Definition.model_validate(family_definition(family, h, hv, d, lb, "gpu_flashinfer_probe"))
    inputs = {n: {"type": "random"} for n in defn.inputs}
    inputs["scale"] = {"type": "scalar", "value": d ** -0.5}
    w = Workload.model_validate({"uuid": f"probe-{family}-{h}-{hv}-{d}-{lb}-{sorted(axes.items())}", "axes": axes,
                                 "inputs": inputs, "seq_lens": seq_lens})
    return defn, make_inputs(defn, w, device=device)


def clone(x):
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in x.items()}


def errors(defn, ref, got):
    out = {}
    for name, r in zip(defn.outputs, ref):
        g = got[list(defn.outputs).index(name)]
        if tuple(g.shape) != tuple(r.shape):
            out[name] = {"shape": list(g.shape), "expected_shape": list(r.shape)}
            continue
        diff = (g.float() - r.float())
        rms = diff.pow(2).mean().sqrt().item() / max(r.float().pow(2).mean().sqrt().item(), 1e-30)
        out[name] = {"max_abs": diff.abs().max().item(), "rms_rel": rms, "finite": bool(torch.isfinite(g.float()).all())}
    return out


def timed(fn, args, kwargs):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    torch.cuda.synchronize()
    return result, (time.perf_counter() - t0) * 1e3


def attempt(record, fn, *args, **kwargs):
    """Run fn(*args, **kwargs) twice (the first call compiles): fills ran / error / first_call_ms / second_call_ms.
    fn must not change its arguments (the callers pass functions that clone their inputs)."""
    try:
        result, record["first_call_ms"] = timed(fn, args, kwargs)
        result, record["second_call_ms"] = timed(fn, args, kwargs)
        record["ran"] = True
        print(f"  {record['entry_point']} [{record['backend']}] {record['case']}: ran", flush=True)
        return result
    except Exception as e:  # noqa: BLE001 - every failure is the finding
        record["ran"] = False
        record["error"] = f"{type(e).__name__}: {str(e)[:600]}"
        record["traceback_tail"] = traceback.format_exc()[-1500:]
        print(f"  {record['entry_point']} [{record['backend']}] {record['case']}: {record['error'][:160]}", flush=True)
        return None


class PerQHeadGate:
    """FlashInfer with GVA: its kernels read A_log [H] and dt_bias [H*K] per q/k head (index hv // (HV/H)), ours
    are per value head. The GVA case makes ours equal within each group and hands FlashInfer one per q/k head."""

    def __init__(self, fi):
        self.fi = fi

    def recurrent_kda(self, q, k, v, g, beta, A_log=None, dt_bias=None, **kw):
        group = v.shape[2] // q.shape[2]
        return self.fi.recurrent_kda(q, k, v, g, beta, A_log=A_log[::group].contiguous(),
                                     dt_bias=dt_bias.view(A_log.shape[0], -1)[::group].reshape(-1), **kw)


def probe_facade(fi, results, device):
    from kda_trace.solutions.flashinfer_adapters import decode, mtp, options, prefill

    call = {"decode": decode, "mtp": mtp, "prefill": prefill}
    for label, family, h, hv, d, lb, axes, seq_lens in CASES:
        defn, x = case_inputs(family, h, hv, d, lb, axes, seq_lens, device)
        fi_case = fi
        if hv != h:  # gate parameters equal within each group of value heads: both conventions agree
            x["A_log"] = x["A_log"][:: hv // h].repeat_interleave(hv // h)
            x["dt_bias"] = x["dt_bias"][:: hv // h].repeat_interleave(hv // h, dim=0)
            fi_case = PerQHeadGate(fi)
        ref = compile_reference(defn.reference, defn.name)(**clone(x))
        for backend in FACADE_BACKENDS:
            rec = {"entry_point": "flashinfer.recurrent_kda", "backend": backend, "case": label}
            got = attempt(rec, lambda f, m, y, o, b: f(m, clone(y), o, b), call[family], fi_case, x, options(defn), backend)
            if got is not None:
                rec["errors"] = errors(defn, ref, got)
            results.append(rec)
        if family == "decode":  # the deprecated decode facade, and a bf16 pool passed with its indices
            from flashinfer import kda_decode

            shim = PerQHeadGate(types.SimpleNamespace(recurrent_kda=kda_decode.recurrent_kda))
            if hv == h:
                shim = types.SimpleNamespace(recurrent_kda=kda_decode.recurrent_kda)
            for backend in DECODE_FACADE_BACKENDS:
                rec = {"entry_point": "flashinfer.kda_decode.recurrent_kda", "backend": backend, "case": label}
                got = attempt(rec, lambda m, y, o, b: decode(m, clone(y), o, b), shim, x, options(defn), backend)
                if got is not None:
                    rec["errors"] = errors(defn, ref, got)
                results.append(rec)
            xb = clone(x)
            xb["state_pool"] = xb["state_pool"].to(torch.bfloat16)
            ref_b = compile_reference(defn.reference, defn.name)(**clone(xb))
            rec = {"entry_point": "flashinfer.recurrent_kda (bf16 pool + ssm_state_indices)", "backend": "cute-dsl",
                   "case": label}
            got = attempt(rec, lambda m, y, o: decode(m, clone(y), o, "cute-dsl"), fi_case, xb, options(defn))
            if got is not None:
                rec["errors"] = errors(defn, ref_b, got)
            results.append(rec)


def probe_packed_decode(fi, results, device):
    """packed_kda_decode: Kimi K3 (H=12, D=128) T=1 decode from a packed QKV row, bf16 pool."""
    defn, x = case_inputs("decode", 12, 12, 128, -5.0, {"batch_size": 4, "pool_size": 9}, None, device)
    x["state_pool"] = x["state_pool"].to(torch.bfloat16)
    x["scale"] = 128 ** -0.5  # fixed by the op
    ref = compile_reference(defn.reference, defn.name)(**clone(x))

    def run():
        y = clone(x)
        mixed = torch.cat([y["q"], y["k"], y["v"]], dim=1).reshape(4, -1)
        o = fi.packed_kda_decode(mixed, y["g_raw"].reshape(4, -1), y["b"], y["A_log"], y["dt_bias"].reshape(-1),
                                 y["state_pool"], y["state_indices"].to(torch.int32))
        return o[:, 0], y["state_pool"]

    rec = {"entry_point": "flashinfer.packed_kda_decode", "backend": "cake", "case": "decode h12 safe, bf16 pool"}
    got = attempt(rec, run)
    if got is not None:
        rec["errors"] = errors(defn, ref, got)
    results.append(rec)


def probe_fused(fi, results, device):
    """fused_kda_decode / packed_fused_kda_decode: conv + KDA + gated RMSNorm. No reference of ours: ran / finite."""
    H, D, N, slots = 8, 128, 4, 6
    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*shape, dtype=torch.bfloat16, scale=1.0):
        return (scale * torch.randn(*shape, generator=g, device=device)).to(dtype)

    def args():
        return dict(x=rnd(N, 3 * H * D), weight=rnd(3, 4, H * D, dtype=torch.float32, scale=0.3),
                    # [slots, 3 * H * D, 3] with strides [slot, 1, 3 * H * D]: the documented sequence-major layout
                    conv_state=rnd(slots, 3, 3 * H * D).transpose(1, 2),
                    raw_gate=rnd(1, N, H, D), raw_beta=rnd(1, N, H), A_log=torch.rand(H, device=device),
                    dt_bias=rnd(H * D, dtype=torch.float32), state_indices=torch.arange(1, N + 1, dtype=torch.int32, device=device),
                    state=rnd(slots, H, D, D, dtype=torch.float32, scale=0.2), output_gate=rnd(N, H, D),
                    norm_weight=torch.ones(D, device=device))

    for backend in ("cute-dsl", "auto", "cake"):
        rec = {"entry_point": "flashinfer.fused_kda_decode", "backend": backend, "case": f"h{H} N={N}"}
        mode = "positive_unique" if backend != "cute-dsl" else None
        out = attempt(rec, lambda b, m: fi.fused_kda_decode(**args(), backend=b, state_indices_mode=m), backend, mode)
        if out is not None:
            rec["output_finite"] = bool(torch.isfinite(out.float()).all())
        results.append(rec)
    rec = {"entry_point": "flashinfer.packed_fused_kda_decode", "backend": "default", "case": f"h{H} 2 seqs x 2 tokens"}
    try:
        import inspect

        rec["signature"] = str(inspect.signature(fi.packed_fused_kda_decode))[:600]
    except Exception:  # noqa: BLE001
        pass
    rec["ran"] = False
    rec["error"] = "not called: the probe only records its signature (conv + KDA + RMSNorm, no reference of ours)"
    results.append(rec)


def probe_wrapper(fi, results, device):
    defn, x = case_inputs("prefill", 16, 16, 128, -5.0, {"total_seq_len": 212, "num_seqs": 4, "len_cu_seqlens": 5},
                          [1, 17, 64, 130], device)
    ref = compile_reference(defn.reference, defn.name)(**clone(x))
    rec = {"entry_point": "flashinfer.RecurrentKDAPrefillWrapper", "backend": "cute-dsl", "case": "prefill h16 safe"}

    def run():
        y = clone(x)
        w = fi.RecurrentKDAPrefillWrapper(device)
        w.plan(y["cu_seqlens"])
        o, final = w.run(y["q"][None], y["k"][None], y["v"][None], y["g_raw"][None], y["b"][None], A_log=y["A_log"],
                         dt_bias=y["dt_bias"].reshape(-1), scale=float(y["scale"]), initial_state=y["initial_state"],
                         output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                         lower_bound=-5.0, beta_is_logit=True)
        return o[0], (final if final is not None else y["initial_state"]).float()

    got = attempt(rec, run)
    if got is not None:
        rec["errors"] = errors(defn, ref, got)
    results.append(rec)


def environment(device):
    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(device), "capability": list(torch.cuda.get_device_capability(device))}
    for name in ("flashinfer", "cutlass", "tvm_ffi"):
        try:
            module = __import__(name)
            env[name] = getattr(module, "__version__", "imported")
        except Exception as e:  # noqa: BLE001
            env[name] = f"import failed: {type(e).__name__}: {e}"[:400]
    try:
        import flashinfer.kda_kernels as kk

        env["kda_kernels.run_recurrent_kda"] = "available" if kk.run_recurrent_kda is not None else "None (CuTe DSL missing or arch unsupported)"
    except Exception as e:  # noqa: BLE001
        env["kda_kernels"] = f"import failed: {type(e).__name__}: {e}"[:400]
    return env


def fmt_errors(rec):
    if not rec.get("ran"):
        return rec.get("error", "")[:110]
    if "errors" not in rec:
        return "ran" + ("" if rec.get("output_finite", True) else " (non-finite output)")
    parts = []
    for name, e in rec["errors"].items():
        parts.append(f"{name}: shape {e['shape']} != {e['expected_shape']}" if "shape" in e
                     else f"{name} max {e['max_abs']:.2e} rms {e['rms_rel']:.2e}")
    return "; ".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "kda-trace-out")))
    args = parser.parse_args()
    device = "cuda"
    report = {"environment": environment(device), "results": []}
    print(json.dumps(report["environment"], indent=1), flush=True)
    try:
        import flashinfer as fi
    except Exception as e:  # noqa: BLE001
        report["import_error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}"
        print(report["import_error"])
        fi = None
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "flashinfer_probe.json"
    path.write_text(json.dumps(report, indent=1))
    if fi is not None:
        for step in (probe_facade, probe_packed_decode, probe_fused, probe_wrapper):
            try:
                step(fi, report["results"], device)
            except Exception as e:  # noqa: BLE001
                report["results"].append({"entry_point": step.__name__, "ran": False,
                                          "error": f"probe step failed: {type(e).__name__}: {e}"[:600]})
            path.write_text(json.dumps(report, indent=1))  # after each step: a timeout keeps what was found
            print(f"-- {step.__name__} done", flush=True)
    print(f"\n{'entry point':<52} {'backend':<20} {'case':<36} {'result'}")
    for rec in report["results"]:
        print(f"{rec['entry_point']:<52} {rec.get('backend', ''):<20} {rec.get('case', ''):<36} {fmt_errors(rec)}")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
