"""Our chunked KDA forward (kda_trace/kernels/chunk.py) side by side with fla's chunk_kda, on one GPU.

    python benchmarks/bench_chunk.py [--shapes a,b] [--no-fla] [--fla-tune-each] [--accuracy] [--profile SHAPE]
        [--profile-fla SHAPE] [--sweep SHAPE] [--ab SHAPE:KEY=VALUE[,KEY=VALUE...]] [--host SHAPES] [--no-speed]
        [--launch KEY=VALUE[,KEY=VALUE...]] [--f64 HEADSxTOKENS] [--f64-variant KEY=VALUE,...] [--out DIR]

Per shape: median ms (triton.testing.do_bench, 25 ms warm-up, 200 ms of repeats) of ours and fla with
the same options and inputs (bf16 q/k/v/beta, fp32 g and states, K = V = 128, initial state given and final
state returned), M tokens/s, TFLOP/s and fla_ms / our_ms (> 1: we are faster).

TFLOP/s counts the matrix products of the chunked algorithm with chunk C = 64, per token and head
(multiply-adds x 2): A_kk and A_qk (lower halves) C*K, W and U (X lower triangular) C*(K + V)/2, the state
pass W S and k^T V_new 2*K*V, the output q S K*V and A_qk V_new C*V/2. For K = V = 128: 139,264 FLOP.

--accuracy: RMS-relative error and cosine of o and the final state for ours and fla against fla's
naive_recurrent_kda run in fp32 on the GPU, at 1K and 64K tokens (32 heads, 4 heads at 64K to keep the
token-by-token reference short), bf16 inputs, L2-normalised q/k, g = logsigmoid(randn).
--f64 HEADSxTOKENS (repeatable, e.g. 8x4096): ours against float64 (tests/kernels' token-by-token recurrence
on the CPU): o's and the final state's RMS-relative error and the worst token's o, on this file's inputs and on
weak decays (where X = (I + A_kk)^-1 and the state carry the most), precomputed gate and safe gate + L2 norm; the
defaults, and each --f64-variant (launch settings, as --ab takes them) beside them.
--fla-tune-each: fla autotunes its kernels on the first call per autotuning key, and its keys leave out the
number of tokens, so in one process (or with its on-disk results) a shape runs with the settings tuned on an
earlier, maybe much smaller, input. This flag makes fla tune on every shape (about a minute each).
--profile SHAPE: per-kernel times of ours (torch.profiler); --profile-fla SHAPE: the same for fla.
--sweep SHAPE: launch settings of ours, greedily, each timed once (order effects included).
--ab SHAPE:KEY=VALUE,...: the default launch settings against the given changes, timed in alternation
(default, changed, default, ...) for AB_ROUNDS rounds; prints both medians and their ratio. Repeatable.
--launch KEY=VALUE,...: launch settings of ours for the whole run (the defaults of --ab included).
--host SHAPE: host cost per call of ours and fla (wall time of 20 calls issued back to back, GPU time from
do_bench beside it, and a cProfile of ours' wrapper).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kda_trace.kernels import chunk as ours
from kda_trace.kernels.options import KDAOptions

# name -> (heads, sequence lengths, mode); mode: "pre" = precomputed g, "safe_l2" = safe gate + L2 norm in
# the kernel, "layer" = fla's KimiDeltaAttention layer (the unbounded gate -exp(A_log) softplus(g + dt_bias), the L2
# norm and beta's sigmoid in the kernel; A = exp(A_log) up to 16, as fla initialises it); dense (B sequences of T,
# no cu_seqlens) when the name says "dense"
SHAPES = {
    "h32_dense_1x4096": (32, [4096], "pre"),
    "h32_dense_1x16384": (32, [16384], "pre"),
    "h32_varlen_8x2048": (32, [2048] * 8, "pre"),
    "h32_varlen_16x4096": (32, [4096] * 16, "pre"),  # equal lengths: a dense batch [16, 4096], not packed
    "h32_varlen_1x16384_safe_l2": (32, [16384], "safe_l2"),
    "h96_dense_1x8192": (96, [8192], "pre"),
    "h96_dense_1x8192_safe_l2": (96, [8192], "safe_l2"),
    "h64_dense_1x8192": (64, [8192], "pre"),
    "h16_dense_2x16384": (16, [16384, 16384], "pre"),
    "h24_dense_1x8192": (24, [8192], "pre"),
    "h8_dense_1x16384": (8, [16384], "pre"),
    "h8_dense_1x131072": (8, [131072], "pre"),  # the long sequence: the sequential state pass dominates
    "h16_dense_1x65536": (16, [65536], "pre"),  # where the split state pass's default (chunk._split_launch) ends
    "h32_varlen_real_8192": (32, [812, 95, 1500, 33, 700, 2047, 1, 431, 1280, 300, 900, 93], "pre"),
    "h32_dense_1x16384_layer": (32, [16384], "layer"),
    "h32_varlen_16x4096_layer": (32, [4096] * 16, "layer"),
}
K = V = 128


def flops_per_token_head(C=64, K=K, V=V):
    return 2 * (C * K + C * (K + V) / 2 + 2 * K * V + K * V + C * V / 2)


def make_inputs(H, lens, mode, seed=0):
    torch.manual_seed(seed)
    T = sum(lens)
    dense = len(set(lens)) == 1
    B = len(lens) if dense else 1
    Tb = lens[0] if dense else T
    dev, bf = "cuda", torch.bfloat16
    q = torch.randn(B, Tb, H, K, device=dev, dtype=bf)
    k = torch.randn(B, Tb, H, K, device=dev, dtype=bf)
    if mode == "pre":
        q, k = F.normalize(q.float(), dim=-1).to(bf), F.normalize(k.float(), dim=-1).to(bf)
        g = F.logsigmoid(torch.randn(B, Tb, H, K, device=dev))
    else:
        g = torch.randn(B, Tb, H, K, device=dev).to(bf)
    v = torch.randn(B, Tb, H, V, device=dev, dtype=bf)
    beta = (torch.randn if mode == "layer" else torch.rand)(B, Tb, H, device=dev).to(bf)
    h0 = torch.randn(len(lens), H, K, V, device=dev)
    A_log = torch.log(torch.empty(H, device=dev).uniform_(1, 16))
    dt_bias = torch.randn(H, K, device=dev) * 0.5
    cu = None
    if not dense:
        cu = torch.tensor([0, *itertools.accumulate(lens)], device=dev, dtype=torch.int64)
    return {"q": q, "k": k, "v": v, "g": g, "beta": beta, "h0": h0, "A_log": A_log, "dt_bias": dt_bias, "cu": cu}


def weak_decay(x, mode):
    """x with decays of about 1e-3 per token and channel instead of about 0.8 (logsigmoid of a standard normal),
    so that a state carries over thousands of tokens: make_inputs' gates forget the start state within a few
    chunks, so there a change to how the state crosses chunks or segments (state_split) shows no difference. The
    safe gate's lower_bound * sigmoid(exp(A_log) (g_raw + dt_bias)) is made small by g_raw = -10 - dt_bias."""
    y = dict(x)
    if mode == "pre":
        y["g"] = x["g"] * 1e-3
    else:
        y["g"] = (-10.0 - x["dt_bias"]).expand_as(x["g"]).to(x["g"].dtype)
        y["A_log"] = torch.zeros_like(x["A_log"])
    return y


OPTIONS = {  # ours' options per mode
    "pre": KDAOptions(output_final_state=True),
    "safe_l2": KDAOptions(use_qk_l2norm=True, gate="safe", lower_bound=-5.0, output_final_state=True),
    "layer": KDAOptions(use_qk_l2norm=True, gate="unbounded", beta="logits", output_final_state=True),
}


def run_ours(x, mode):
    return ours.kda_chunk(x["q"], x["k"], x["v"], x["g"], x["beta"], OPTIONS[mode], A_log=x["A_log"],
                          dt_bias=x["dt_bias"], initial_state=x["h0"], cu_seqlens=x["cu"])


def run_fla(x, mode):
    from fla.ops.kda import chunk_kda

    kw = {"initial_state": x["h0"], "output_final_state": True, "cu_seqlens": x["cu"]}
    if mode == "safe_l2":
        kw.update(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0,
                  A_log=x["A_log"], dt_bias=x["dt_bias"].flatten())
    if mode == "layer":
        kw.update(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                  A_log=x["A_log"], dt_bias=x["dt_bias"].flatten())
    return chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], **kw)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def metrics(out, ref):
    out, ref = out.double().flatten(), ref.double().flatten()
    rms = ((out - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()
    cos = F.cosine_similarity(out, ref, dim=0).item()
    return rms, cos


def reset_fla_autotuning():
    """Forget every autotuning result of fla's kernels in this process, so that the next fla call tunes on
    its own inputs (fla tunes once per key, and its keys leave out the number of tokens)."""
    from triton.runtime.autotuner import Autotuner

    for name, mod in list(sys.modules.items()):
        if name.startswith("fla.") and mod is not None:
            for obj in vars(mod).values():
                if isinstance(obj, Autotuner):
                    obj.cache.clear()


def speed(names, log, with_fla=True, fla_tune_each=False):
    """Ours (printed as soon as measured: fla's first call per shape autotunes for minutes) and fla."""
    rows = []
    for name in names:
        H, lens, mode = SHAPES[name]
        x = make_inputs(H, lens, mode)
        T = sum(lens)
        if name == names[0]:
            # the first shape of a process measured up to 1.6x slower than later ones (small, host-bound shapes
            # most): run it for a second before timing anything
            end = time.time() + 1.0
            while time.time() < end:
                run_ours(x, mode)
            torch.cuda.synchronize()
        t_ours = bench(lambda x=x, mode=mode: run_ours(x, mode))
        print(f"{name}: ours {t_ours:.3f} ms", flush=True)
        if not with_fla:
            print(json.dumps({"shape": name, "heads": H, "tokens": T, "seqs": len(lens), "mode": mode,
                              "ours_ms": t_ours}), file=log, flush=True)
            continue
        try:
            if fla_tune_each:
                reset_fla_autotuning()
            t_fla = bench(lambda x=x, mode=mode: run_fla(x, mode))
        except Exception as e:  # noqa: BLE001 -- report, keep going
            print(f"{name}: fla failed: {e!r}", file=log)
            t_fla = float("nan")
        # agreement with fla on this shape (a sanity check, not the accuracy measurement)
        o1, h1 = run_ours(x, mode)
        o2, h2 = run_fla(x, mode)
        agree = metrics(o1, o2)[0], metrics(h1, h2)[0]
        fl = flops_per_token_head() * T * H
        row = {"shape": name, "heads": H, "tokens": T, "seqs": len(lens), "mode": mode,
               "ours_ms": t_ours, "fla_ms": t_fla,
               "ours_mtok_s": T / t_ours / 1e3, "fla_mtok_s": T / t_fla / 1e3,
               "ours_tflops": fl / t_ours / 1e9, "fla_tflops": fl / t_fla / 1e9, "speedup": t_fla / t_ours,
               "rms_vs_fla_o": agree[0], "rms_vs_fla_state": agree[1]}
        rows.append(row)
        print(json.dumps(row), file=log, flush=True)
        del x
        torch.cuda.empty_cache()
    print(f"\n{'shape':30s} {'ours ms':>8s} {'fla ms':>8s} {'ratio':>6s} {'Mtok/s':>7s} {'TFLOP/s':>7s} "
          f"{'o~fla':>8s} {'S~fla':>8s}")
    for r in rows:
        print(f"{r['shape']:30s} {r['ours_ms']:8.3f} {r['fla_ms']:8.3f} {r['speedup']:6.2f} {r['ours_mtok_s']:7.1f} "
              f"{r['ours_tflops']:7.1f} {r['rms_vs_fla_o']:8.1e} {r['rms_vs_fla_state']:8.1e}")
    if rows and not fla_tune_each:
        # H200: fla took 2.344 ms on 32 x 16384 with settings tuned on other shapes, 1.967 tuned on it
        print("fla ran with autotuning results of earlier shapes or runs (Triton's cache); for ratios against fla "
              "tuned on each shape, as RESULTS.md quotes them, pass --fla-tune-each")
    return rows


def accuracy(log):
    from fla.ops.kda.naive import naive_recurrent_kda

    print("\naccuracy vs fp32 naive_recurrent_kda (bf16 inputs): rms-rel / cosine")
    for H, T in ((32, 1024), (4, 65536)):
        x = make_inputs(H, [T], "pre", seed=1)
        ref_o, ref_h = naive_recurrent_kda(x["q"].float(), x["k"].float(), x["v"].float(), x["g"], x["beta"].float(),
                                           scale=K ** -0.5, initial_state=x["h0"], output_final_state=True)
        for who, fn in (("ours", run_ours), ("fla", run_fla)):
            o, h = fn(x, "pre")
            (ro, co), (rh, ch) = metrics(o, ref_o), metrics(h, ref_h)
            line = {"who": who, "heads": H, "tokens": T, "o_rms": ro, "o_cos": co, "state_rms": rh, "state_cos": ch}
            print(json.dumps(line), file=log, flush=True)
            print(f"  {who:5s} H={H:3d} T={T:6d}: o {ro:.2e} / {co:.7f}   state {rh:.2e} / {ch:.7f}")


def f64_reference(x, mode):
    """(o, final state) of tests/kernels' float64 token-by-token recurrence (`ref_kda`, checked there against fla's
    naive_recurrent_kda), on the CPU; "safe_l2" as run_ours: the safe gate at lower_bound -5, q and k
    L2-normalised in the op."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "kernels"))
    from kernel_ground_truth import ref_gate, ref_kda

    cpu = {n: t.cpu() for n, t in x.items() if t is not None}
    pre = mode == "pre"
    g = ref_gate(cpu["g"], cpu["A_log"], cpu["dt_bias"], "precomputed" if pre else "safe", -5.0)
    o, h = ref_kda(cpu["q"], cpu["k"], cpu["v"], g, cpu["beta"], cpu["q"].shape[-1] ** -0.5, cpu["h0"],
                   l2norm=not pre)
    return o[0], h[0]


def f64_accuracy(size, variants, log):
    """--f64: ours against float64 on HEADSxTOKENS, the defaults and each launch variant."""
    heads, tokens = (int(n) for n in size.split("x"))
    print(f"\n{heads} heads x {tokens} tokens, K = V = 128, bf16 inputs; RMS-relative error against float64: o, "
          "final state, worst token's o")
    f64 = torch.float64
    for mode in ("pre", "safe_l2"):
        base = make_inputs(heads, [tokens], mode, seed=3)
        for label, x in ((mode, base), (mode + " weak decays", weak_decay(base, mode))):
            o_ref, h_ref = f64_reference(x, mode)
            for name, launch in [("defaults", {})] + [(v, parse_launch(v, "--f64-variant")) for v in variants]:
                saved = dict(ours.LAUNCH)
                ours.LAUNCH.update(launch)
                try:
                    o, h = run_ours(x, mode)
                finally:
                    ours.LAUNCH.clear()
                    ours.LAUNCH.update(saved)
                o, h = o[0].cpu().to(f64), h[0].cpu().to(f64)
                rms = lambda a, b: ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt()).item()  # noqa: E731
                worst = ((o - o_ref).pow(2).mean(dim=(1, 2)).sqrt() / o_ref.pow(2).mean(dim=(1, 2)).sqrt()).max().item()
                line = {"heads": heads, "tokens": tokens, "inputs": label, "launch": name, "o_rms": rms(o, o_ref),
                        "state_rms": rms(h, h_ref), "worst_token_rms": worst}
                print(json.dumps(line), file=log, flush=True)
                print(f"  {label:22s} {name:40s} o {line['o_rms']:.3e}  state {line['state_rms']:.3e}  "
                      f"worst token {worst:.3e}", flush=True)


def profile(name, fn=run_ours, who="ours"):
    """Per-kernel CUDA time of `fn` (ours, or fla with --profile-fla: fla autotunes on the first call)."""
    H, lens, mode = SHAPES[name]
    x = make_inputs(H, lens, mode)
    for _ in range(3):
        fn(x, mode)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprof

    with tprof(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn(x, mode)
        torch.cuda.synchronize()
    print(f"\nper-kernel, {who}, {name} (10 calls):")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))


def host(name, with_fla=True):
    """Host (Python) time per call against GPU time: a call costs max(host, GPU) when launches overlap the
    previous call's kernels, and host + GPU when the wrapper waits for the device (a sync)."""
    import cProfile
    import pstats

    H, lens, mode = SHAPES[name]
    x = make_inputs(H, lens, mode)
    who = [("ours", run_ours)] + ([("fla", run_fla)] if with_fla else [])
    print(f"\nhost cost, {name}:")
    for label, fn in who:
        for _ in range(5):
            fn(x, mode)
        torch.cuda.synchronize()
        n = 20
        t0 = time.perf_counter()
        for _ in range(n):
            fn(x, mode)
        t_issue = (time.perf_counter() - t0) / n * 1e3
        torch.cuda.synchronize()
        t_all = (time.perf_counter() - t0) / n * 1e3
        t_gpu = bench(lambda fn=fn: fn(x, mode))
        print(f"  {label}: host {t_issue:.3f} ms per call issued, {t_all:.3f} ms per call to completion "
              f"(20 back to back), do_bench {t_gpu:.3f} ms")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        run_ours(x, mode)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


def sweep(name):
    """Greedy, one setting at a time: keep each change that is faster; leaves the best in ours.LAUNCH."""
    H, lens, mode = SHAPES[name]
    x = make_inputs(H, lens, mode)
    options = [
        ("l2_in_intra", (False, True)), ("gate_warps", (4, 8, 2)), ("gate_bk", (64, 32)),
        ("intra_warps", (2, 4, 8)), ("intra_bk", (32, 64)), ("solve_warps", (1, 2, 4)), ("wu_warps", (8, 4)),
        ("wu_bk", (32, 64)), ("wu_bv", (32, 64)),
        ("state_warps", (2, 4, 8)), ("state_stages", (None, 1, 2, 3)),
        ("state_bv", (None, 16, 64)),
        ("out_warps", (8, 4)),
    ]
    best = bench(lambda: run_ours(x, mode))
    print(f"\nsweep on {name}: defaults {dict(ours.LAUNCH)}: {best:.3f} ms")
    for key, values in options:
        keep = ours.LAUNCH[key]
        for value in values:
            if value == keep:
                continue
            ours.LAUNCH[key] = value
            try:
                t = bench(lambda: run_ours(x, mode))
            except Exception as e:  # noqa: BLE001
                print(f"  {key}={value}: failed {type(e).__name__}: {str(e)[:200]}")
                continue
            print(f"  {key}={value}: {t:.3f} ms")
            if t < best * 0.98:
                best, keep = t, value
        ours.LAUNCH[key] = keep
    print(f"  kept {dict(ours.LAUNCH)}: {best:.3f} ms")


AB_ROUNDS = 7


def parse_ab(spec):
    """(shape name, {launch setting: value}) of `SHAPE:KEY=VALUE,...`; exits on an unknown shape or setting."""
    name, _, changes_text = spec.partition(":")
    if name not in SHAPES:
        raise SystemExit(f"--ab {spec}: unknown shape {name!r} ({', '.join(SHAPES)})")
    return name, parse_launch(changes_text, f"--ab {spec}")


def parse_launch(text, where="--launch", launch=None):
    """{launch setting: value} of `KEY=VALUE,...` (None, True, False, an int, or else the text, e.g. a dot precision);
    exits on a setting not in `launch` (default: kernels/chunk.py's LAUNCH)."""
    launch = ours.LAUNCH if launch is None else launch
    changes = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key not in launch:
            raise SystemExit(f"{where}: {key!r} is not a launch setting ({', '.join(launch)})")
        if value in ("None", "True", "False"):
            changes[key] = {"None": None, "True": True, "False": False}[value]
        else:
            changes[key] = int(value) if value.lstrip("-").isdigit() else value
    return changes


def ab(spec):
    """Defaults against `KEY=VALUE,...` on one shape, alternating, so clock and order effects hit both alike."""
    name, changes = parse_ab(spec)
    H, lens, mode = SHAPES[name]
    x = make_inputs(H, lens, mode)
    defaults = dict(ours.LAUNCH)
    times = {"default": [], "changed": []}
    for _ in range(AB_ROUNDS):
        for label, launch in (("default", defaults), ("changed", {**defaults, **changes})):
            ours.LAUNCH.update(launch)
            times[label].append(bench(lambda: run_ours(x, mode)))
    # the change must not change the results beyond rounding: o and final state against the defaults' on this
    # shape, and on the same inputs with weak decays (weak_decay), where the state carries across many chunks
    agree = []
    for label, inputs in (("changed vs default", x), ("weak decays", weak_decay(x, mode))):
        ours.LAUNCH.update({**defaults, **changes})
        o1, h1 = run_ours(inputs, mode)
        ours.LAUNCH.update(defaults)
        o0, h0 = run_ours(inputs, mode)
        agree.append(f"{label}: o RMS-rel {metrics(o1, o0)[0]:.1e}, final state {metrics(h1, h0)[0]:.1e}, "
                     f"o max abs {(o1.float() - o0.float()).abs().max().item():.1e}, "
                     f"finite {bool(torch.isfinite(o1).all() and torch.isfinite(h1).all())}")
    agree = "; ".join(agree)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(f"\nA/B on {name}, {changes}: default {med['default']:.3f} ms, changed {med['changed']:.3f} ms "
          f"(default / changed = {med['default'] / med['changed']:.3f}; medians of {AB_ROUNDS} alternating rounds)")
    print("  default: " + " ".join(f"{t:.3f}" for t in times["default"]))
    print("  changed: " + " ".join(f"{t:.3f}" for t in times["changed"]))
    print("  " + agree)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--accuracy", action="store_true")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--profile-fla", default=None, help="per-kernel times of fla's chunk_kda on this shape")
    ap.add_argument("--sweep", default=None)
    ap.add_argument("--ab", action="append", default=[], metavar="SHAPE:KEY=VALUE,...",
                    help="defaults against these launch settings, timed in alternation (repeatable)")
    ap.add_argument("--host", default=None, help="host cost per call on this shape (comma-separated shapes)")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--no-fla", action="store_true", help="time ours only (fla autotunes for minutes per shape)")
    ap.add_argument("--fla-tune-each", action="store_true",
                    help="autotune fla on every shape (in-process and disk caches off; about a minute a shape)")
    ap.add_argument("--launch", default=None, metavar="KEY=VALUE,...", help="launch settings of ours for the whole run")
    ap.add_argument("--f64", action="append", default=[], metavar="HEADSxTOKENS",
                    help="ours against float64 on this size (repeatable; e.g. 8x4096)")
    ap.add_argument("--f64-variant", action="append", default=[], metavar="KEY=VALUE,...",
                    help="launch settings measured beside the defaults by --f64 (repeatable)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    if a.launch:
        ours.LAUNCH.update(parse_launch(a.launch))
    if a.fla_tune_each:
        os.environ["FLA_CACHE_RESULTS"] = "0"  # read when fla is imported: no results from earlier runs
    import fla

    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"fla {getattr(fla, '__version__', '?')}" + (f"; ours with --launch {a.launch}" if a.launch else ""))
    defaults = dict(ours.LAUNCH)
    for spec in a.ab:
        parse_ab(spec)  # every spec checked before the first is timed
    with open(os.path.join(a.out, "bench_chunk.jsonl"), "a") as log:
        if a.profile:
            profile(a.profile)
        if a.profile_fla:
            profile(a.profile_fla, run_fla, "fla")
        if a.sweep:
            sweep(a.sweep)
        for spec in a.ab:
            try:
                ab(spec)
            except Exception as e:  # noqa: BLE001 -- a variant that fails (to compile) must not stop the others
                print(f"\nA/B {spec}: FAILED {type(e).__name__}: {str(e)[:500]}", flush=True)
                ours.LAUNCH.update(defaults)
        for name in (a.host.split(",") if a.host else []):
            host(name, with_fla=not a.no_fla)
        if not a.no_speed:
            speed(a.shapes.split(","), log, with_fla=not a.no_fla, fla_tune_each=a.fla_tune_each)
        if a.accuracy:
            accuracy(log)
        for size in a.f64:
            f64_accuracy(size, a.f64_variant, log)


if __name__ == "__main__":
    main()
