"""Decode / MTP speed of our recurrent KDA kernel beside fla's fused_recurrent_kda, on one GPU.

Engine decode configuration: 32 heads, K = V = 128, bf16 q/k/v/g_raw/b, fp32 state in a pool [P, HV, V, K]
(or [P, HV, K, V] for --layouts kv), in-kernel q/k L2 norm, unbounded gate from g_raw/A_log/dt_bias, beta from
logits, state updated in place at state_indices.

Every call touches fresh state: each timed unit is R launches over R disjoint sets of pool slots, with R chosen
so that the R sets together are >= 4x the L2 cache (the state of one decode step is not in cache in a real
model either: the other layers run between two steps of this one). Timings are medians of event-timed trials:
  graph: the R launches captured in one CUDA graph, replayed; time / R.
  plain: the R launches issued from Python; time / R (includes host launch cost when it exceeds the kernel).
  copy:  a device-to-device copy of the same state bytes (read + write), also from a graph: the ceiling.
State traffic counted: one read and one write of each touched state (q/k/v/g/o bytes are < 1% and left out).

  python benchmarks/bench_recurrent.py --out results.json [--sweep]

--fused-decode times the fused decode step instead (the fused_decode family, docs/KDA_FAMILIES.md: width-4 causal
convolution + SiLU, one KDA step against the pool, gated RMSNorm) for H in (12, 32) (Kimi-K3 TP8 with the safe gate,
Kimi Linear TP1 with the unbounded gate: the two definitions' tags and NORM_EPS), D = 128, float32 and bf16 state
pools, B in (1, 8, 32, 64, 128, 256), every row live (slot 0 is the null slot and no set uses it):
  ours:       kda_trace.kernels.fused_decode through the `triton` solution's builder (one launch);
  fla:        the `fla` solution's composed step (torch convolution, fla's fused_recurrent_kda_fwd in place on the
              pool, fla's rms_norm_gated), skipped with the reason when fla is not installed or with --no-fla;
  flashinfer: flashinfer.fused_kda_decode through the `flashinfer` solution, skipped with the reason when
              `import flashinfer` fails or the solution refuses the definition;
  copy:       a device-to-device copy of the same number of bytes (read + write): the ceiling.
Fresh state as above: a timed unit is R calls on R disjoint slot sets (each with its own x, g_raw, b, output_gate),
the sets' pool rows together >= 4x the L2 cache (R <= 1024); a graph replay of the unit, or the calls from Python
when one cannot be captured (the row's mode says which). Bytes the step must move, each counted once (C = 3 H D,
W = 4, s = 4 for a float32 pool and 2 for bf16):
  2 B H D^2 s                                         the touched state slots, read and written
  + 2 B C (W - 1) 2                                   their bf16 convolution windows, read and written
  + 2 B (C + 2 H D + H) + 2 B H D + 4 B               x, g_raw, output_gate, b (bf16); o (bf16); the slots (int32)
  + 4 (3 W H D + H + H D + D)                         conv taps, A_log, dt_bias, norm weight (fp32)
(the definitions' cost.bytes plus the slots). Printed per (H, pool, B): each implementation's median us, GB/s
and fraction of the copy's bandwidth, ours' speedup over each other; before the timings, each implementation's
o and updated slots against ours at B = 8. JSON to --out.

  python benchmarks/bench_recurrent.py --fused-decode --out fused.json [--no-fla] \
      [--fused-launch block_v=32,num_warps=4] [--fused-only 12:bfloat16:64,128]
(--fused-only H:POOL:B,B,..., repeatable, times those cells alone, e.g. a launch sweep on the slowest ones.)

--fused-launch (repeatable) adds ours at other settings of kernels/fused_decode.py's LAUNCH, as "ours[SETTINGS]"
rows beside the default's (checked against it, then timed).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time

import torch

from kda_trace.kernels import recurrent as rec
from kda_trace.kernels.options import KDAOptions

H = HV = 32
K = V = 128
STATE_BYTES = HV * K * V * 4  # one request's state, fp32
L2_BYTES = 50 * 2**20


def trials_median(fn_unit, reps: int, trials: int = 15) -> float:
    """Median seconds of `fn_unit` (one timed unit), timed with CUDA events over `reps` repetitions."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(trials):
        start.record()
        for _ in range(reps):
            fn_unit()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    return statistics.median(times)


def time_graph(calls, reps):
    """Per-call seconds of `calls` (a list of launches) captured in one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            for c in calls:
                c()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    return trials_median(g.replay, reps) / len(calls)


def time_plain(calls, reps):
    def unit():
        for c in calls:
            c()

    unit()
    torch.cuda.synchronize()
    return trials_median(unit, reps) / len(calls)


def host_us(call, n=2000):
    """Host microseconds per call (no synchronisation inside the loop)."""
    call()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        call()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / n * 1e6


class Case:
    """Inputs of one batch size: R disjoint slot sets in a pool, shared token inputs."""

    def __init__(self, batch, T, layout, seed=0):
        self.batch, self.T, self.layout = batch, T, layout
        self.R = max(2, min(64, math.ceil(4 * L2_BYTES / (batch * STATE_BYTES))))
        P = batch * self.R
        gen = torch.Generator(device="cuda").manual_seed(seed)
        r = lambda *s: torch.randn(*s, device="cuda", generator=gen)
        bf = torch.bfloat16
        self.q, self.k = r(batch, T, H, K).to(bf), r(batch, T, H, K).to(bf)
        self.v, self.g = r(batch, T, HV, V).to(bf), r(batch, T, HV, K).to(bf)
        self.b = r(batch, T, HV).to(bf)
        self.A_log, self.dt_bias = r(HV) * 0.5, r(HV, K)
        shape = (P, HV, V, K) if layout == "vk" else (P, HV, K, V)
        self.pool = r(*shape) * 0.1
        perm = torch.randperm(P, device="cuda", generator=gen)
        self.idx = [perm[i * batch:(i + 1) * batch].contiguous() for i in range(self.R)]
        self.out = torch.empty_like(self.v)
        self.opts = KDAOptions(scale=K ** -0.5, use_qk_l2norm=True, gate="unbounded", beta="logits",
                               state_layout=layout)
        self.copy_src = torch.empty(self.R, batch * STATE_BYTES // 4, device="cuda")
        self.copy_dst = torch.empty_like(self.copy_src)
        self.copy_src.normal_()

    def ours(self, i):
        return lambda: rec.kda_recurrent(self.q, self.k, self.v, self.g, self.b, self.opts, A_log=self.A_log,
                                         dt_bias=self.dt_bias, initial_state=self.pool,
                                         state_indices=self.idx[i], inplace_state=True)

    def fla(self, i, mode="pool"):
        """fla's engine path (fused_recurrent_kda_fwd: pool + ssm_state_indices, in place).

        For T > 1 fla's pool path writes the state after every token to the slot given per token
        (indices [B, T]); "pool" points every token of a request at its own slot (same end state as ours,
        T state writes); "dense" instead reads a gathered [B, ...] state and writes a new [B, ...] final state
        (one read, one write, like ours, but needs the engine's gather / scatter outside the kernel)."""
        from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

        idx = self.idx[i]
        kw = {"A_log": self.A_log, "dt_bias": self.dt_bias.flatten(), "scale": K ** -0.5,
                  "use_qk_l2norm_in_kernel": True, "use_gate_in_kernel": True, "use_beta_sigmoid_in_kernel": True,
                  "state_v_first": self.layout == "vk", "out": self.out}
        if mode == "pool":
            sidx = idx if self.T == 1 else idx[:, None].expand(-1, self.T).contiguous()
            return lambda: fused_recurrent_kda_fwd(self.q, self.k, self.v, self.g, self.b, initial_state=self.pool,
                                                   inplace_final_state=True, ssm_state_indices=sidx, **kw)
        dense = self.pool[idx].clone()
        return lambda: fused_recurrent_kda_fwd(self.q, self.k, self.v, self.g, self.b, initial_state=dense,
                                               inplace_final_state=False, output_final_state=True, **kw)

    def copy(self, i):
        return lambda: self.copy_dst[i].copy_(self.copy_src[i])



def host_profile(case, n=500):
    """Where the host time of one plain call goes (cProfile, top entries by own time)."""
    import cProfile
    import io
    import pstats

    call = case.ours(0)
    call()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        call()
    prof.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(10)
    return buf.getvalue()


def rms_rel(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()


def check_against_fla(layout, T):
    """Same inputs through ours and fla (fresh pools): o and the updated slots must agree."""
    a, b = Case(8, T, layout, seed=1), Case(8, T, layout, seed=1)
    o1, _ = a.ours(0)()
    b.fla(0)()
    o2 = b.out
    idx = a.idx[0]
    return {"o_rms_rel": rms_rel(o1, o2), "state_rms_rel": rms_rel(a.pool[idx], b.pool[idx]),
                "untouched_equal": bool(torch.equal(a.pool[a.idx[1]], b.pool[b.idx[1]]))}


def measure(batch, T, layout, with_fla=True, with_slow_path=False):
    c = Case(batch, T, layout)
    reps = max(3, int(2000 / (batch * T * c.R)))
    row = {"batch": batch, "T": T, "layout": layout, "R": c.R}
    row["ours_graph_us"] = time_graph([c.ours(i) for i in range(c.R)], reps) * 1e6
    row["ours_plain_us"] = time_plain([c.ours(i) for i in range(c.R)], reps) * 1e6
    row["ours_host_us"] = host_us(c.ours(0))
    if with_slow_path:  # the same wrapper with the cached launcher switched off (kernel[grid] every call)
        rec._FAST_LAUNCH_ENABLED = False
        try:
            row["ordinary_launch_plain_us"] = time_plain([c.ours(i) for i in range(c.R)], reps) * 1e6
            row["ordinary_launch_host_us"] = host_us(c.ours(0))
        finally:
            rec._FAST_LAUNCH_ENABLED = True
        if batch == 1:
            print(host_profile(c), flush=True)
    if with_fla:
        row["fla_graph_us"] = time_graph([c.fla(i) for i in range(c.R)], reps) * 1e6
        row["fla_plain_us"] = time_plain([c.fla(i) for i in range(c.R)], reps) * 1e6
        if T > 1:
            row["fla_dense_graph_us"] = time_graph([c.fla(i, "dense") for i in range(c.R)], reps) * 1e6
    row["copy_graph_us"] = time_graph([c.copy(i) for i in range(c.R)], reps) * 1e6
    # hot: the same slots every call (state of b <= 8 then sits in L2), the way a plain do_bench loop times
    hot_reps = max(3, 2000 // (batch * T))
    row["ours_graph_hot_us"] = time_graph([c.ours(0)], hot_reps) * 1e6
    if with_fla:
        row["fla_graph_hot_us"] = time_graph([c.fla(0)], hot_reps) * 1e6
    traffic = 2 * batch * STATE_BYTES
    for key in ("ours_graph_us", "fla_graph_us", "copy_graph_us", "fla_dense_graph_us"):
        if key in row:
            row[key.replace("_us", "_TBps")] = traffic / (row[key] * 1e-6) / 1e12
    del c
    torch.cuda.empty_cache()
    return row


def sweep(batch, layout, T=1):
    """Graph time of every (BV, num_warps) for one batch: picks the table in recurrent._tile_config."""
    c = Case(batch, T, layout)
    reps = max(3, int(2000 / (batch * T * c.R)))
    saved = rec._tile_config
    out = []
    try:
        for BV in (4, 8, 16, 32, 64):
            for nw in (1, 2, 4, 8):
                if BV * 128 / (32 * nw) < 4:  # fewer than one 16-byte vector per thread
                    continue
                rec._tile_config = lambda n, k, v, vk, BV=BV, nw=nw: (128, BV, nw)
                t = time_graph([c.ours(i) for i in range(c.R)], reps)
                out.append({"batch": batch, "T": T, "layout": layout, "BV": BV, "num_warps": nw, "graph_us": t * 1e6,
                                "TBps": 2 * batch * STATE_BYTES / t / 1e12})
    finally:
        rec._tile_config = saved
    del c
    torch.cuda.empty_cache()
    return out


def big_copy_TBps():
    n = 2**28  # 1 GiB of fp32
    src, dst = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    t = time_graph([lambda: dst.copy_(src)], 5)
    return 2 * n * 4 / t / 1e12


# --- the fused decode step (--fused-decode) ---
FUSED_DEFINITIONS = {12: "kda_fused_decode_h12_d128_k_last_safe_gate", 32: "kda_fused_decode_h32_d128_k_last"}
FUSED_BATCHES = (1, 8, 32, 64, 128, 256)
CONV_W = 4


def fused_bytes(B, H, s, D=K, W=CONV_W):
    """Bytes one fused decode step of B live rows must move (module docstring); s: the state's bytes per value."""
    C = 3 * H * D
    return (2 * B * H * D * D * s + 2 * B * C * (W - 1) * 2 + 2 * B * (C + 2 * H * D + H) + 2 * B * H * D + 4 * B
            + 4 * (3 * W * H * D + H + H * D + D))


class FusedCase:
    """One (H, pool dtype, B): pools of 1 + R * B slots (slot 0 null, unused), R disjoint slot sets, each with its
    own token inputs; the weights shared."""

    def __init__(self, H, pool_dtype, B, seed=0, device="cuda"):
        D, C, s = K, 3 * H * K, pool_dtype.itemsize
        self.bytes = fused_bytes(B, H, s)
        cuda = device.startswith("cuda")
        l2 = (getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) if cuda else 0) or L2_BYTES
        self.R = max(2, min(1024, math.ceil(4 * l2 / (B * (H * D * D * s + C * (CONV_W - 1) * 2)))))
        P = 1 + self.R * B
        gen = torch.Generator(device=device).manual_seed(seed)
        r = lambda *shape: torch.randn(*shape, device=device, generator=gen)  # noqa: E731
        u = lambda lo, hi, *shape: lo + (hi - lo) * torch.rand(*shape, device=device, generator=gen)  # noqa: E731
        bf = torch.bfloat16
        pools = {"conv_state": r(P, C, CONV_W - 1).to(bf), "state_pool": (r(P, H, D, D) * 0.2).to(pool_dtype)}
        weights = {"conv_weight": u(-0.5, 0.5, 3, CONV_W, H * D), "A_log": u(0.0, 2.77, H),
                   "dt_bias": u(-5.0, -1.0, H, D), "norm_weight": u(0.5, 1.5, D), "scale": D ** -0.5}
        slots = (torch.randperm(P - 1, device=device, generator=gen) + 1).to(torch.int32)
        self.inputs = [{**weights, **pools, "x": r(B, C).to(bf), "g_raw": r(B, H, D).to(bf), "b": r(B, H).to(bf),
                        "output_gate": r(B, H, D).to(bf), "state_indices": slots[i * B:(i + 1) * B].contiguous()}
                       for i in range(self.R)]
        self.copy_src = torch.randint(0, 255, (self.R, self.bytes // 2), dtype=torch.uint8, device=device,
                                      generator=gen)
        self.copy_dst = torch.empty_like(self.copy_src)

    def call(self, fn, i):
        return lambda: fn(**self.inputs[i])

    def copy(self, i):
        return lambda: self.copy_dst[i].copy_(self.copy_src[i])


def parse_fused_launch(text):
    """'block_v=32,num_warps=4' -> {'block_v': 32, 'num_warps': 4}, keys of kernels/fused_decode.py's LAUNCH (parsed
    as bench_chunk.py's --launch is); every value an int >= 0."""
    from bench_chunk import parse_launch

    from kda_trace.kernels import fused_decode

    settings = parse_launch(text, f"--fused-launch {text!r}", fused_decode.LAUNCH)
    if not all(type(v) is int and v >= 0 for v in settings.values()):
        raise SystemExit(f"--fused-launch {text!r}: expected KEY=INT with KEY in {sorted(fused_decode.LAUNCH)}")
    return settings


def with_launch(run, settings):
    """`run` with kernels/fused_decode.py's LAUNCH updated by `settings` while it runs (also inside a graph's
    capture, where the launch is decided)."""
    from kda_trace.kernels import fused_decode

    def call(**inputs):
        saved = dict(fused_decode.LAUNCH)
        fused_decode.LAUNCH.update(settings)
        try:
            return run(**inputs)
        finally:
            fused_decode.LAUNCH.update(saved)
    return call


def fused_implementations(H, no_fla=False, launches=()):
    """({name: run(**inputs) -> (o, conv_state, state_pool)}, {name: why skipped}) for the definition of H heads;
    `launches`: more settings of ours (--fused-launch), each an implementation of its own."""
    from kda_trace.dataset import load_dataset
    from kda_trace.solutions.fla_adapters import FlaSolution
    from kda_trace.solutions.flashinfer_adapters import FlashInferSolution
    from kda_trace.solutions.ours_fused_decode import build_fused_decode

    d = load_dataset().definitions[FUSED_DEFINITIONS[H]]  # tags, gate and NORM_EPS; the pool dtype is the tensor's
    impls, skipped = {"ours": build_fused_decode(d)}, {}
    for text in launches:
        impls[f"ours[{text}]"] = with_launch(impls["ours"], parse_fused_launch(text))
    for name, solution in (("fla", FlaSolution), ("flashinfer", FlashInferSolution)):
        if name == "fla" and no_fla:
            skipped[name] = "--no-fla"
            continue
        try:
            if name == "flashinfer":
                import flashinfer

                if not hasattr(flashinfer, "fused_kda_decode"):
                    raise ImportError(f"flashinfer {getattr(flashinfer, '__version__', '?')} has no fused_kda_decode")
            sol = solution("cuda")
            why = sol.supports(d)
            if why is None:
                impls[name] = sol.build(d, "cuda")
            else:
                skipped[name] = why
        except Exception as e:  # noqa: BLE001 (a missing or broken install is reported, not fatal)
            skipped[name] = f"{type(e).__name__}: {e}"
    return impls, skipped


def check_fused(H, pool_dtype, impls):
    """Each implementation on the same inputs (pools cloned), B = 8: o and the updated slots against ours."""
    c = FusedCase(H, pool_dtype, 8, seed=1)
    base, idx = c.inputs[0], c.inputs[0]["state_indices"].long()
    got = {}
    for name, fn in impls.items():
        try:
            o, conv, pool = fn(**{**base, "conv_state": base["conv_state"].clone(),
                                  "state_pool": base["state_pool"].clone()})
            got[name] = (o, conv[idx], pool[idx])
        except Exception as e:  # noqa: BLE001
            got[name] = f"{type(e).__name__}: {e}"
    ours = got["ours"]
    if isinstance(ours, str):
        return {"ours": ours}
    return {name: r if isinstance(r, str) else {"o_rms_rel": rms_rel(r[0], ours[0]), "conv_equal":
                                                 bool(torch.equal(r[1], ours[1])), "state_rms_rel": rms_rel(r[2], ours[2])}
            for name, r in got.items() if name != "ours"}


def measure_fused(H, pool_dtype, B, impls):
    c = FusedCase(H, pool_dtype, B)
    reps = max(3, 2000 // (B * c.R))
    row = {"H": H, "pool": str(pool_dtype).replace("torch.", ""), "B": B, "R": c.R, "bytes": c.bytes}
    for name in [*impls, "copy"]:
        calls = [c.copy(i) if name == "copy" else c.call(impls[name], i) for i in range(c.R)]
        try:
            t, mode = time_graph(calls, reps), "graph"
        except Exception as e:  # noqa: BLE001 (e.g. a host synchronisation inside the call)
            torch.cuda.synchronize()
            try:
                t, mode = time_plain(calls, reps), f"plain (graph capture failed: {type(e).__name__})"
            except Exception as e2:  # noqa: BLE001
                row[name] = {"error": f"{type(e2).__name__}: {e2}"}
                continue
        row[name] = {"us": t * 1e6, "GBps": c.bytes / t / 1e9, "mode": mode}
    copy_us = row["copy"].get("us")
    for name in impls:
        if "us" in row[name] and copy_us:
            row[name]["frac_copy"] = copy_us / row[name]["us"]
    if "us" in row["ours"]:
        row["ours_speedup"] = {n: row[n]["us"] / row["ours"]["us"] for n in impls if n != "ours" and "us" in row[n]}
    del c
    torch.cuda.empty_cache()
    return row


def fused_line(row):
    parts = [f"H={row['H']:2d} {row['pool']:8s} B={row['B']:3d} R={row['R']:4d} {row['bytes'] / 1e6:9.2f} MB"]
    for name, r in row.items():
        if isinstance(r, dict) and name != "ours_speedup":
            if "us" not in r:
                parts.append(f"{name} {r['error']}")
                continue
            frac = f" {r['frac_copy']:.2f} of copy" if "frac_copy" in r else ""
            mode = "" if r["mode"] == "graph" else f" [{r['mode']}]"
            parts.append(f"{name} {r['us']:8.2f} us {r['GBps']:7.0f} GB/s{frac}{mode}")
    parts += [f"ours x{v:.2f} vs {n}" for n, v in row.get("ours_speedup", {}).items()]
    return " | ".join(parts)


def parse_fused_only(texts):
    """['12:bfloat16:64,128', ...] -> {12: {torch.bfloat16: [64, 128]}, ...}; [] -> every head count, pool and
    batch."""
    if not texts:
        return {H: {p: list(FUSED_BATCHES) for p in (torch.float32, torch.bfloat16)} for H in FUSED_DEFINITIONS}
    cells = {}
    for text in texts:
        try:
            h, pool, batches = text.split(":")
            H, pool_dtype, batches = int(h), getattr(torch, pool), [int(b) for b in batches.split(",")]
        except (ValueError, AttributeError):
            raise SystemExit(f"--fused-only {text!r}: expected H:POOL:B,B,... (e.g. 12:bfloat16:64,128)") from None
        if H not in FUSED_DEFINITIONS or pool_dtype not in (torch.float32, torch.bfloat16):
            raise SystemExit(f"--fused-only {text!r}: H in {sorted(FUSED_DEFINITIONS)}, POOL float32 or bfloat16")
        cells.setdefault(H, {}).setdefault(pool_dtype, []).extend(batches)
    return cells


def main_fused(args, env):
    res = {"env": env, "mode": "fused_decode", "copy_1GiB_TBps": big_copy_TBps(), "skipped": {}, "checks": {},
           "rows": []}
    print(json.dumps(env), f"copy ceiling (1 GiB, read+write): {res['copy_1GiB_TBps']:.2f} TB/s", flush=True)
    cells = parse_fused_only(args.fused_only)
    for H, pools in cells.items():
        impls, skipped = fused_implementations(H, args.no_fla, args.fused_launch)
        for name, why in skipped.items():
            print(f"H={H}: {name} skipped: {why}", flush=True)
        res["skipped"][H] = skipped
        for pool_dtype, batches in pools.items():
            key = f"h{H}_{str(pool_dtype).replace('torch.', '')}"
            res["checks"][key] = check_fused(H, pool_dtype, impls)
            print(f"{key} vs ours (B = 8):", json.dumps(res["checks"][key]), flush=True)
            for B in batches:
                row = measure_fused(H, pool_dtype, B, impls)
                res["rows"].append(row)
                print(fused_line(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--sweep", action="store_true", help="also sweep (BV, num_warps) per batch")
    ap.add_argument("--layouts", default="vk,kv")
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--fused-decode", action="store_true",
                    help="time the fused decode step (ours, fla + torch composed, FlashInfer, copy) instead")
    ap.add_argument("--fused-launch", action="append", default=[], metavar="KEY=INT,...",
                    help="--fused-decode: also time ours with these kernels/fused_decode.py LAUNCH settings "
                    "(repeatable), e.g. block_v=32,num_warps=4")
    ap.add_argument("--fused-only", action="append", default=[], metavar="H:POOL:B,...",
                    help="--fused-decode: only these cells (repeatable), e.g. 12:bfloat16:64,128")
    args = ap.parse_args()
    import triton

    env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "python": platform.python_version(), "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    try:
        import fla

        env["fla"] = getattr(fla, "__version__", "?")
    except ImportError as e:
        env["fla"] = f"not importable: {e}"
        args.no_fla = not args.fused_decode  # the fused mode reports fla's absence as the reason it is skipped
    if args.fused_decode:
        return main_fused(args, env)
    res = {"env": env, "copy_1GiB_TBps": big_copy_TBps(), "rows": [], "sweep": [], "checks": {}}
    print(json.dumps(env), f"copy ceiling (1 GiB, read+write): {res['copy_1GiB_TBps']:.2f} TB/s", flush=True)
    if not args.no_fla:
        for layout in args.layouts.split(","):
            for T in (1, 4):
                res["checks"][f"{layout}_T{T}"] = check_against_fla(layout, T)
        print("vs fla:", json.dumps(res["checks"]), flush=True)
    for layout in args.layouts.split(","):
        for batch in (1, 8, 64, 256):
            row = measure(batch, 1, layout, with_fla=not args.no_fla, with_slow_path=layout == "vk")
            res["rows"].append(row)
            print(json.dumps(row), flush=True)
        row = measure(64, 4, layout, with_fla=not args.no_fla)
        res["rows"].append(row)
        print(json.dumps(row), flush=True)
    if args.sweep:
        for layout in args.layouts.split(","):
            for batch in (1, 8, 64, 256):
                res["sweep"] += sweep(batch, layout)
            res["sweep"] += sweep(64, layout, T=4)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    print_table(res)


def print_table(res):
    print(f"\n{res['env']}\ncopy ceiling {res['copy_1GiB_TBps']:.2f} TB/s")
    print("layout batch T | ours graph us (TB/s) | fla graph us | ours/fla | copy us | ours/copy TB/s | "
          "ours plain | fla plain | host us")
    for r in res["rows"]:
        fg = r.get("fla_graph_us", float("nan"))
        print(f"{r['layout']} {r['batch']:4d} {r['T']} | {r['ours_graph_us']:8.2f} ({r['ours_graph_TBps']:.2f}) | "
              f"{fg:8.2f} | {r['ours_graph_us'] / fg:.2f} | {r['copy_graph_us']:8.2f} | "
              f"{r['ours_graph_TBps'] / r['copy_graph_TBps']:.2f} | {r['ours_plain_us']:7.2f} | "
              f"{r.get('fla_plain_us', float('nan')):7.2f} | {r['ours_host_us']:.1f}"
              + (f" | kernel[grid] plain {r['ordinary_launch_plain_us']:.2f} host {r['ordinary_launch_host_us']:.1f}"
                 if "ordinary_launch_plain_us" in r else "")
              + (f" | fla dense graph {r['fla_dense_graph_us']:.2f}" if "fla_dense_graph_us" in r else "")
              + f" | hot graph ours {r['ours_graph_hot_us']:.2f} fla {r.get('fla_graph_hot_us', float('nan')):.2f}")
    if res["sweep"]:
        best = {}
        for s in res["sweep"]:
            key = (s["layout"], s["batch"], s["T"])
            if key not in best or s["graph_us"] < best[key]["graph_us"]:
                best[key] = s
        print("sweep best:", *[f"{k}: BV={b['BV']} nw={b['num_warps']} {b['graph_us']:.2f}us" for k, b in best.items()],
              sep="\n  ")


if __name__ == "__main__":
    sys.exit(main())
