"""Our KDA training path (kda_trace/kernels/autograd.py: chunked forward + kernels/backward.py) against fla's
chunk_kda, forward + backward and backward alone, on one GPU; and every gradient's error against float64.

    python benchmarks/bench_backward.py [--shapes a,b] [--no-fla] [--fla-tune-each] [--no-speed] [--accuracy]
        [--accuracy-shapes a,b] [--accuracy-variants "key=val,...;key=val"]
        [--bv N] [--warps N] [--seg N] [--launch key=N,...] [--parts] [--recompute] [--a-max A]
        [--rounds N] [--ab "key=val,...;key=val"] [--peak-only] [--out DIR]

Speed (triton.testing.do_bench, median, grads reset between calls), per shape, bf16 q/k/v/beta, fp32 g and
states, K = V = 128, initial state given, final state returned and differentiated (dht random):
- fwd+bwd: the forward, then torch.autograd.backward((o, final_state), (do, dht));
- bwd: the backward alone, as fwd+bwd less the forward (building its graph and what it keeps for the backward);
  for both, what the backward itself recomputes.
The peak memory allocated during one fwd+bwd after a warm one (inputs included; not what the other implementation
left allocated in the process) is recorded beside the times; `--peak-only` measures it alone, without timing.
`--fla-tune-each` forgets fla's autotuning results before each shape (fla's keys leave out the token count),
so fla runs tuned on the shape; expect about a minute of tuning per shape. `--rounds N`: ours and fla timed in
turn N times per shape (the medians reported, every round recorded), so that a drift of the GPU's clock over the
run reaches both alike.

`--ab "key=val,...;key=val"`: per shape, ours under the defaults and under each launch variant (`;` between
variants, each as `--launch`), fwd+bwd timed in turn for `--rounds` rounds (at least 3) in one process: the way to
compare two settings, as two processes, even on the same kind of GPU, differ by a few percent. Prints each
variant's median and its ratio to the defaults' (> 1: the variant is faster), and every round; with `--parts` also
each kernel's median time under each variant (profiled after each round's timing).

Shapes (SHAPES) name their mode: "pre" (a precomputed gate, beta a probability, unit q/k: chunk_kda's defaults),
"safe_l2" (Kimi-K3: the safe gate, the L2 norm and beta's sigmoid in the op) and "layer" (fla's own
KimiDeltaAttention layer: the unbounded gate, the L2 norm and beta's sigmoid in the op); "packed" ones pass
equal-length sequences as one packed batch with cu_seqlens. The four training configurations compared with fla:

    python benchmarks/bench_backward.py --fla-tune-each --parts \
        --shapes h32_dense_1x16384_layer,h32_packed_16x4096_layer,h96_dense_1x8192_safe_l2,h32_dense_1x16384

Accuracy (`--accuracy`): RMS(out - ref) / RMS(ref) of every gradient (q, k, v, g or g_raw / A_log / dt_bias,
beta or its logits, initial state) for ours and for fla on the same bf16 inputs, against float64 autograd
through the plain token-by-token recurrence (segments of 64 tokens re-run under autograd, like the
dataset's backward reference), on smaller shapes (the float64 loop is slow). `--accuracy-variants` adds ours under
other launch settings (`;` between variants, each as `--launch`) against the same truth, to find which products
an error comes from, e.g. `--accuracy-variants "split_precision=tf32_rn;diag_blocks=anchors"`.

`--bv` / `--warps` / `--seg`: the local reverse kernel's V-tile, warps and scratch segment (kernels/backward.py
LAUNCH) for a sweep; `--launch` sets any LAUNCH key (programs, map_bx, pass_bv, pass_rows, ...; `mode=exact` for
the exact mode, `mode=chunked` (the default) with its precisions chunked_precision, chunked_pass_precision,
split_precision, e.g. `--launch split_precision=tf32x3`); a key `fwd.NAME` sets kernels/chunk.py's LAUNCH[NAME]
(the training forward's launch, e.g. `--launch fwd.wu_bv=32`). `--parts`: per
shape, the GPU time of each kernel of one forward (with what it keeps for the backward) and of one backward
(torch.profiler), ours and fla's, to see where the time goes.
`--recompute`: our backward recomputes the chunk matrices instead of taking the forward's (kda_autograd's
keep_chunk_matrices=False).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kda_trace.kernels import backward as ours_bwd
from kda_trace.kernels import chunk as ours_fwd
from kda_trace.kernels.autograd import gate_torch, kda_autograd

K = V = 128
# name -> (heads, sequence lengths, mode[, packed]): "pre" = precomputed g, beta a probability, unit q/k;
# "safe_l2" = raw gate with the safe gate (lower bound -5), q/k L2-normalised in the op, beta from logits;
# "layer" = fla's KimiDeltaAttention layer: the unbounded gate -exp(A_log) softplus(g_raw + dt_bias) in the op,
# q/k L2-normalised in the op, beta from logits. Equal lengths make a dense batch unless `packed` (cu_seqlens).
SHAPES = {
    "h32_dense_1x16384_layer": (32, [16384], "layer"),
    "h32_packed_16x4096_layer": (32, [4096] * 16, "layer", True),
    "h32_dense_1x16384": (32, [16384], "pre"),
    "h32_varlen_16x4096": (32, [4096] * 16, "pre"),  # equal lengths: a dense batch [16, 4096], not packed
    "h32_varlen_real_65536": (32, [812, 95, 1500, 33, 700, 2047, 1, 431, 1280, 300, 900, 93] * 5 + [11044], "pre"),
    "h96_dense_1x8192_safe_l2": (96, [8192], "safe_l2"),
    "h32_dense_1x4096": (32, [4096], "pre"),
    # small workloads of kda_bwd_h32 (few chunks: launch latency and per-program work, not throughput)
    "h32_dense_1x1024": (32, [1024], "pre"),
    "h32_dense_2x130": (32, [130, 130], "pre"),
    # the size of kda_bwd_fused_h96's largest workload (65536 tokens in 12 sequences), where ours ran out of memory
    "h96_varlen_12x_65536_safe_l2": (96, [9000, 3000, 7000, 1000, 12000, 2536, 5000, 8000, 4000, 6000, 1000, 7000],
                                     "safe_l2"),
}
ACCURACY_SHAPES = {
    "h32_dense_1x1024": (32, [1024], "pre"),
    "h8_packed_2x1024_layer": (8, [1024, 1024], "layer", True),
    "h8_varlen_3": (8, [300, 700, 24], "pre"),
    "h8_dense_1x2048_safe_l2": (8, [2048], "safe_l2"),
}


def make_inputs(H, lens, mode, packed=False, seed=0, dev="cuda"):
    """Leaves (requires_grad) and the incoming gradients do, dht."""
    gen = torch.Generator(device=dev).manual_seed(seed)
    r = lambda *s: torch.randn(*s, device=dev, generator=gen)
    T, N = sum(lens), len(lens)
    dense = len(set(lens)) == 1 and not packed
    B, Tb = (N, lens[0]) if dense else (1, T)
    bf = torch.bfloat16
    q, k = r(B, Tb, H, K), r(B, Tb, H, K)
    if mode == "pre":
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        g = F.logsigmoid(r(B, Tb, H, K))
        beta = torch.rand(B, Tb, H, device=dev, generator=gen)
    else:
        g = r(B, Tb, H, K)
        beta = r(B, Tb, H)
    x = {"q": q.to(bf), "k": k.to(bf), "v": r(B, Tb, H, V).to(bf), "g": g if mode == "pre" else g.to(bf),
         "beta": beta.to(bf), "h0": r(N, H, K, V) * 0.2}
    if mode in ("safe_l2", "layer"):  # A = exp(A_log) in [1, A_MAX]; 16: as fla's layer initialises it
        x["A_log"] = torch.log(torch.empty(H, device=dev).uniform_(1, A_MAX, generator=gen))
        x["dt_bias"] = r(H, K) * 0.5
    x = {n: t.requires_grad_() for n, t in x.items()}
    cu = None if dense else torch.tensor([0, *itertools.accumulate(lens)], device=dev, dtype=torch.int64)
    return x, cu, r(B, Tb, H, V).to(bf) * 0.1, r(N, H, K, V) * 0.1


KEEP = {"keep_chunk_matrices": True}  # --recompute: False
GATE_IN_OP = {"safe_l2": "safe", "layer": "unbounded"}  # the modes whose gate is computed in the op (kda_autograd's)
A_MAX = 16.0
"""The largest A = exp(A_log) drawn (--a-max). With the unbounded gate, (16-token diagonal block, head) pairs whose
gates span more than the anchored products' range take the element-wise form (`elementwise_block_fraction`, printed
with each shape's times): on the CPU's draws of the two layer shapes, 73-78% of them with A up to 16 and 3% with A up
to 4; none with the safe gate or a precomputed one."""


def elementwise_block_fraction(x, cu, mode) -> float:
    """The fraction of (16-token diagonal block, head) pairs of these inputs whose cumulative gates span more than
    the backward's anchored products allow: a column factor past e^MAX_EXP at a block's two anchors (rows 0 and 8,
    backward_blocks._anchor_factors), where it uses the element-wise form. (The forward's intra kernel, at one
    anchor, row 8, falls back row by row on the same range.)"""
    g = x["g"].detach().float()
    if mode in GATE_IN_OP:
        g = gate_torch(g, x["A_log"].detach(), x["dt_bias"].detach(), GATE_IN_OP[mode], lower_bound=-5.0)
    B, Tb, H, _ = g.shape
    bounds = cu.tolist() if cu is not None else None
    seqs = [g[0, a:b] for a, b in zip(bounds[:-1], bounds[1:])] if bounds else list(g)
    out_of_range = blocks = 0
    for s in seqs:  # blocks start at each sequence's first token
        s = F.pad(s, (0, 0, 0, 0, 0, -len(s) % 16)).view(-1, 16, H, s.shape[-1])
        c = s.cumsum(1)
        spread = torch.maximum(-c[:, 7], c[:, 8] - c[:, 15]).amax(-1)
        out_of_range += int((spread > ours_fwd.MAX_EXP).sum())
        blocks += spread.numel()
    return out_of_range / blocks


def run_ours(x, cu, mode):
    if mode == "pre":
        return kda_autograd(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["h0"], cu_seqlens=cu, **KEEP)
    return kda_autograd(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["h0"], cu_seqlens=cu,
                        use_qk_l2norm=True, gate=GATE_IN_OP[mode], A_log=x["A_log"], dt_bias=x["dt_bias"],
                        lower_bound=-5.0, beta_kind="logits", **KEEP)


def run_fla(x, cu, mode):
    from fla.ops.kda import chunk_kda

    kw = {"initial_state": x["h0"], "output_final_state": True, "cu_seqlens": cu}
    if mode in ("safe_l2", "layer"):
        kw.update(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, A_log=x["A_log"],
                  dt_bias=x["dt_bias"].view(-1), use_beta_sigmoid_in_kernel=True)
    if mode == "safe_l2":
        kw.update(safe_gate=True, lower_bound=-5.0)
    return chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], **kw)


def reset_fla_autotuning():
    """Forget fla's in-process autotuning results so that its next call tunes on the current shape."""
    from triton.runtime.autotuner import Autotuner

    for name, mod in list(sys.modules.items()):
        if name.startswith("fla.") and mod is not None:
            for obj in vars(mod).values():
                if isinstance(obj, Autotuner):
                    obj.cache.clear()


def time_pair(fn, x, cu, mode, do, dht, timed=True):
    """(fwd+bwd ms, bwd ms, GiB allocated at most during one fwd+bwd, inputs included) of fn; without `timed` the
    times are NaN (not recorded). The peak is that of a second step, after one that compiles and autotunes (fla's
    autotuner allocates copies of its arguments while it tunes, which no training step does). The inputs' gradients are
    cleared first (the step allocates its own, as a training step after zero_grad does), and the peak counts what
    the step allocates over what was allocated before it, plus the inputs: what another implementation left
    allocated in this process is not charged to this one."""
    leaves = list(x.values())

    def step():
        o, ht = fn(x, cu, mode)
        torch.autograd.backward((o, ht), (do, dht))

    step()  # compile / autotune outside the peak and the timing
    for t in leaves:
        t.grad = None
    inputs = sum(t.numel() * t.element_size() for t in (*leaves, do, dht) if t is not None)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    peak = (torch.cuda.max_memory_allocated() - before + inputs) / 2**30
    if not timed:
        return float("nan"), float("nan"), peak
    t_both = triton.testing.do_bench(step, warmup=25, rep=200, grad_to_none=leaves, return_mode="median")
    # the backward alone as fwd+bwd less the forward (its graph built, then dropped): a second backward of one
    # retained graph would time recomputation, as ours frees what its forward kept while it runs
    t_fwd = triton.testing.do_bench(lambda: fn(x, cu, mode), warmup=25, rep=200, return_mode="median")
    return t_both, t_both - t_fwd, peak


def _profiled(work) -> dict:
    """GPU time (ms) per kernel name of work(), by torch.profiler."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        work()
        torch.cuda.synchronize()
    times = {}
    for ev in prof.key_averages():
        if ev.device_type == DeviceType.CUDA:  # the kernels themselves, not the operators that launched them
            times[ev.key] = times.get(ev.key, 0.0) + ev.device_time_total / 1000
    return dict(sorted(times.items(), key=lambda kv: -kv[1]))


def kernel_times(fn, x, cu, mode, do, dht) -> tuple[dict, dict]:
    """GPU time (ms) per kernel name of one forward of fn (run_ours or run_fla; inputs requiring grad, so what it
    keeps for the backward included) and of one backward (of that forward's graph)."""
    o, ht = fn(x, cu, mode)
    torch.autograd.backward((o, ht), (do, dht), retain_graph=True)  # compiled (and tuned) outside the profile
    for t in x.values():  # as time_pair's do_bench (grad_to_none): no accumulation into the first backward's .grad
        t.grad = None
    out = {}
    fwd = _profiled(lambda: out.update(o=fn(x, cu, mode)))
    o, ht = out["o"]
    return fwd, _profiled(lambda: torch.autograd.backward((o, ht), (do, dht)))


def print_parts(who: str, times: dict) -> None:
    print(f"    {who}: {sum(times.values()):.3f} ms in {len(times)} kernels", flush=True)
    for kname, t in list(times.items())[:12]:
        print(f"    {t:9.3f} ms  {kname[:100]}", flush=True)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def speed(names, log, with_fla, fla_tune_each, parts=False, rounds=1, timed=True):
    for name in names:
        H, lens, mode, *packed = SHAPES[name]
        x, cu, do, dht = make_inputs(H, lens, mode, *packed)
        row = {"shape": name, "heads": H, "tokens": sum(lens), "seqs": len(lens), "mode": mode, "a_max": A_MAX,
               "elementwise_blocks": elementwise_block_fraction(x, cu, mode),
               "bwd_launch": dict(ours_bwd.LAUNCH), "fwd_launch": dict(ours_fwd.LAUNCH), **KEEP}
        print(f"{name}: {row['elementwise_blocks']:.0%} of the (16-token block, head) pairs past the anchored range",
              flush=True)
        if with_fla and fla_tune_each:
            reset_fla_autotuning()
        who = [("ours", run_ours)] + ([("fla", run_fla)] if with_fla else [])
        got = {w: [] for w, _ in who}
        for _ in range(rounds):
            for w, fn in who:
                if w not in got:  # fla failed in an earlier round
                    continue
                try:
                    got[w].append(time_pair(fn, x, cu, mode, do, dht, timed))
                except Exception as e:  # noqa: BLE001 -- report fla's failure, keep going
                    if w == "ours":
                        raise
                    print(f"{name}: fla failed: {e!r}", flush=True)
                    row["fla_error"] = repr(e)
                    del got[w]
        for w, runs in got.items():
            row[f"{w}_peak_gib"] = max(r[2] for r in runs)
            if not timed:
                print(f"{name}: {w:4s} peak {row[f'{w}_peak_gib']:.2f} GiB", flush=True)
                continue
            row[f"{w}_fwd_bwd_ms"] = _median([r[0] for r in runs])
            row[f"{w}_bwd_ms"] = _median([r[1] for r in runs])
            if rounds > 1:
                row[f"{w}_rounds_ms"] = [[r[0], r[1]] for r in runs]
            print(f"{name}: {w:4s} fwd+bwd {row[f'{w}_fwd_bwd_ms']:.3f} ms, bwd {row[f'{w}_bwd_ms']:.3f} ms, "
                  f"peak {row[f'{w}_peak_gib']:.2f} GiB" + (f" (median of {rounds} rounds)" if rounds > 1 else ""),
                  flush=True)
        if parts:
            row["ours_fwd_kernels_ms"], row["ours_bwd_kernels_ms"] = kernel_times(run_ours, x, cu, mode, do, dht)
            print_parts("ours forward", row["ours_fwd_kernels_ms"])
            print_parts("ours", row["ours_bwd_kernels_ms"])
        if parts and "fla" in got:
            row["fla_fwd_kernels_ms"], row["fla_bwd_kernels_ms"] = kernel_times(run_fla, x, cu, mode, do, dht)
            print_parts("fla forward", row["fla_fwd_kernels_ms"])
            print_parts("fla", row["fla_bwd_kernels_ms"])
        print(json.dumps(row), file=log, flush=True)
        del x, do, dht
        torch.cuda.empty_cache()


def ab(names, variants, log, rounds, parts=False):
    """`--ab`: ours under the defaults and each launch variant, fwd+bwd timed in turn for `rounds` rounds per shape;
    with `parts` each kernel's time too (`kernel_times` after each timing, medians over the rounds)."""
    labels = ["", *variants]
    for name in names:
        H, lens, mode, *packed = SHAPES[name]
        x, cu, do, dht = make_inputs(H, lens, mode, *packed)
        times = {v: [] for v in labels}
        kernels = {v: {} for v in labels}  # kernel name -> its time in each round
        for _ in range(rounds):
            for v in labels:
                before = apply_launch(v)
                try:
                    times[v].append(time_pair(run_ours, x, cu, mode, do, dht)[0])
                    if parts:
                        fwd, bwd = kernel_times(run_ours, x, cu, mode, do, dht)
                        for kname, t in [*(("fwd " + k, t) for k, t in fwd.items()), *bwd.items()]:
                            kernels[v].setdefault(kname, []).append(t)
                finally:
                    restore_launch(before)
        base = _median(times[""])
        print(f"\nA/B on {name}, fwd+bwd, {rounds} rounds in turn:", flush=True)
        for v in labels:
            med = _median(times[v])
            print(f"  {v or 'defaults':40s} median {med:.3f} ms, defaults / this {base / med:.3f}; rounds "
                  + " ".join(f"{t:.3f}" for t in times[v]), flush=True)
        row = {"ab": name, "rounds_ms": {v or "defaults": t for v, t in times.items()}}
        if parts:
            medians = {v or "defaults": {k: _median(ts) for k, ts in kernels[v].items()} for v in labels}
            row["kernels_median_ms"] = medians
            top = sorted(medians["defaults"], key=lambda k: -medians["defaults"][k])[:14]
            print(f"  kernels (median ms): {' | '.join(v or 'defaults' for v in labels)}", flush=True)
            for k in top:
                print(f"    {k[:40]:40s} " + " | ".join(f"{medians[v or 'defaults'].get(k, 0.0):.3f}" for v in labels),
                      flush=True)
        print(json.dumps({**row, "bwd_launch": dict(ours_bwd.LAUNCH), "fwd_launch": dict(ours_fwd.LAUNCH), **KEEP}),
              file=log, flush=True)
        del x, do, dht
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------- float64 truth
def _recurrence64(q, k, v, g, beta, S, scale):
    """o and the final state over a span of one sequence, float64; q, k [t, H, K] (H = value heads here)."""
    outs = []
    for t in range(q.shape[0]):
        S = S * torch.exp(g[t])[..., None]
        r = v[t] - torch.einsum("hk,hkv->hv", k[t], S)
        S = S + torch.einsum("hk,hv->hkv", k[t], beta[t][:, None] * r)
        outs.append(torch.einsum("hk,hkv->hv", q[t] * scale, S))
    return torch.stack(outs), S


def truth_grads(x, cu, mode, do, dht, seg=64):
    """Gradients of sum(o do) + sum(ht dht) in float64 through the plain recurrence (per sequence, segments of
    `seg` tokens re-run under autograd from states recorded without autograd)."""
    f = {n: t.detach().double().requires_grad_() for n, t in x.items()}
    q, k, g, beta = f["q"], f["k"], f["g"], f["beta"]
    if mode in ("safe_l2", "layer"):
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        A = torch.exp(f["A_log"])[:, None]
        g = -5.0 * torch.sigmoid(A * (g + f["dt_bias"])) if mode == "safe_l2" else -A * F.softplus(g + f["dt_bias"])
        beta = torch.sigmoid(beta)
    flat = [t.reshape(-1, *t.shape[2:]) for t in (q, k, f["v"], g, beta)]
    do64, dht64 = do.double().reshape(-1, *do.shape[2:]), dht.double()
    B, Tb = x["q"].shape[:2]
    bounds = cu.tolist() if cu is not None else [i * Tb for i in range(B + 1)]
    scale = K ** -0.5
    for n in range(len(bounds) - 1):
        a0, a1 = bounds[n], bounds[n + 1]
        cuts = list(range(a0, a1, seg)) + [a1]
        starts = [f["h0"][n].detach()]
        with torch.no_grad():
            for s, e in zip(cuts[:-2], cuts[1:-1]):
                starts.append(_recurrence64(*[t[s:e] for t in flat], starts[-1], scale)[1])
        dS = dht64[n]
        for i in reversed(range(len(cuts) - 1)):
            s, e = cuts[i], cuts[i + 1]
            S0 = starts[i].clone().requires_grad_() if i else None
            o, S_end = _recurrence64(*[t[s:e] for t in flat], S0 if i else f["h0"][n], scale)
            torch.autograd.backward((o, S_end), (do64[s:e], dS), retain_graph=True)  # the gate / norm graph is shared
            if i:
                dS = S0.grad
    return {n: t.grad for n, t in f.items()}


def rms_rel(a, ref):
    a, ref = a.double(), ref.double()
    return ((a - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()


def _launch_table(key: str) -> tuple[dict, str]:
    """The LAUNCH table a `--launch` key sets and the name in it: `fwd.NAME` kernels/chunk.py's, else
    kernels/backward.py's."""
    return (ours_fwd.LAUNCH, key[4:]) if key.startswith("fwd.") else (ours_bwd.LAUNCH, key)


def apply_launch(spec: str) -> dict:
    """Set LAUNCH keys from "key=val,key=val" (`--launch`); returns what they were, for `restore_launch`."""
    before = {}
    for item in filter(None, spec.split(",")):
        key, _, val = item.partition("=")
        table, name = _launch_table(key)
        if name not in table:
            raise SystemExit(f"--launch: unknown key {key!r} (LAUNCH has {', '.join(table)})")
        named = {"True": True, "False": False, "None": None}
        before.setdefault(key, table[name])
        table[name] = int(val) if val.lstrip("-").isdigit() else named.get(val, val)  # a number, True, or a name
    return before


def restore_launch(before: dict) -> None:
    for key, val in before.items():
        table, name = _launch_table(key)
        table[name] = val


def accuracy(log, with_fla, names=None, variants=("",)):
    """Each shape's float64 truth once, then ours under each launch variant ("" the defaults) and fla."""
    print("\ngradient RMS-relative error against float64 autograd (bf16 inputs)")
    for name in names or ACCURACY_SHAPES:
        H, lens, mode, *packed = ACCURACY_SHAPES[name]
        x, cu, do, dht = make_inputs(H, lens, mode, *packed, seed=1)
        ref = truth_grads(x, cu, mode, do, dht)
        runs = [("ours", run_ours, v) for v in variants] + ([("fla", run_fla, "")] if with_fla else [])
        for who, fn, variant in runs:
            before = apply_launch(variant)
            try:
                for t in x.values():
                    t.grad = None
                o, ht = fn(x, cu, mode)
                torch.autograd.backward((o, ht), (do, dht))
            finally:
                restore_launch(before)
            errs = {n: rms_rel(t.grad, ref[n]) for n, t in x.items()}
            extra = {**KEEP, "launch": variant} if who == "ours" else {}
            print(json.dumps({"accuracy": name, "who": who, **errs, **extra}), file=log, flush=True)
            print(f"  {name:26s} {who:5s} " + " ".join(f"d{n} {e:.2e}" for n, e in errs.items())
                  + (f"  [{variant}]" if variant else ""), flush=True)


def main():
    global A_MAX
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="h32_dense_1x16384,h32_varlen_real_65536,h96_dense_1x8192_safe_l2")
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--fla-tune-each", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--accuracy", action="store_true")
    ap.add_argument("--accuracy-shapes", default="", help=f"of {', '.join(ACCURACY_SHAPES)} (default: all)")
    ap.add_argument("--accuracy-variants", default="", help="';'-separated launch settings (as --launch, on top of "
                    "it) to measure ours under, beside the defaults, against one float64 truth per shape")
    ap.add_argument("--bv", type=int, default=None, help="backward kernel V-tile")
    ap.add_argument("--warps", type=int, default=None, help="backward kernel warps")
    ap.add_argument("--seg", type=int, default=None, help="backward kernel scratch segment (16, 32 or 64 tokens)")
    ap.add_argument("--launch", default="", help="kernels/backward.py LAUNCH settings, e.g. programs=2048,pass_rows=16 (a number, True, False "
                    "or a name; what 0 means is in the key's comment there, e.g. off for a switch)")
    ap.add_argument("--a-max", type=float, default=A_MAX, help="safe_l2 and layer modes: A = exp(A_log) drawn in "
                    "[1, A_MAX] (default 16, fla's layer init)")
    ap.add_argument("--parts", action="store_true", help="GPU time per kernel of one forward and one backward "
                    "(torch.profiler); with --ab, per variant (medians over the rounds)")
    ap.add_argument("--recompute", action="store_true",
                    help="kda_autograd(keep_chunk_matrices=False): the backward recomputes the chunk matrices")
    ap.add_argument("--rounds", type=int, default=1, help="time ours and fla (or --ab's variants) in turn this many "
                    "times per shape; medians reported")
    ap.add_argument("--ab", default="", help="';'-separated launch settings (as --launch) timed in turn with the "
                    "defaults, ours only, on --shapes (--rounds of them, at least 3), instead of the speed table")
    ap.add_argument("--peak-only", action="store_true", help="the speed table's peak memory alone (no timing): "
                    "one warm step, then one measured, per implementation and shape")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    if a.rounds < 1 or (a.ab and a.rounds < 3):
        raise SystemExit(f"--rounds must be at least 1, and at least 3 with --ab (got {a.rounds})")
    variants = list(filter(None, a.ab.split(";")))
    for v in variants:  # every variant checked before the first is timed
        restore_launch(apply_launch(v))
    KEEP["keep_chunk_matrices"] = not a.recompute
    A_MAX = a.a_max
    if a.fla_tune_each:
        os.environ["FLA_CACHE_RESULTS"] = "0"
    if a.bv:
        ours_bwd.LAUNCH["bv"] = a.bv
    if a.warps:
        ours_bwd.LAUNCH["warps"] = a.warps
    if a.seg:
        ours_bwd.LAUNCH["seg"] = a.seg
    apply_launch(a.launch)
    versions = f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}"
    if not a.no_fla:
        import fla

        versions += f", fla {getattr(fla, '__version__', '?')}"
    print(versions, flush=True)
    with open(os.path.join(a.out, "bench_backward.jsonl"), "a") as log:
        print(json.dumps({"versions": versions}), file=log, flush=True)
        if variants:
            ab(a.shapes.split(","), variants, log, a.rounds, a.parts)
        elif not a.no_speed:
            speed(a.shapes.split(","), log, not a.no_fla, a.fla_tune_each, a.parts, a.rounds, not a.peak_only)
        if a.accuracy:
            variants = ("", *filter(None, a.accuracy_variants.split(";")))
            accuracy(log, not a.no_fla, list(filter(None, a.accuracy_shapes.split(","))), variants)


if __name__ == "__main__":
    main()
