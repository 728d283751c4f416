"""Where the time of the intra-chunk kernel goes: time kda_chunk with parts of `_intra_kernel` cut out.

    python benchmarks/bench_chunk_parts.py [OTHER_CHUNK_PY ...]

OTHER_CHUNK_PY: earlier versions of kda_trace/kernels/chunk.py to time beside the current one, written out
from git first (`git show 97eefea:kda_trace/kernels/chunk.py > chunk_v8.py`; untracked files travel to the GPU
machine). Versions timed so far: v8 97eefea, v9 61a0dab, v10 8a21393 (benchmarks/RESULTS.md).
Each variant is the kernel module with one text substitution (results are wrong on purpose; only the time
matters), written to a temporary directory and imported there. Shape: 32 heads, one 16384-token sequence,
K = V = 128, bf16, precomputed g. Prints the median ms of the whole forward per variant and per-kernel times (torch.profiler), then
the state pass's time over its launch settings (with STATE_GRID=1).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kda_trace.kernels import chunk
from kda_trace.kernels.options import KDAOptions

VARIANTS = {
    "full": [],
    "intra: no off-diagonal products": [("        if I > 0:\n", "        if I < 0:\n")],
    "intra: no range check": [("    if CHECK_RANGE:\n        # a column factor", "    if False:\n        # a column factor")],
    "intra: no diagonal products": [
        ("        kk_lo += tl.dot(kr_lo, tl.trans(k_col), input_precision=\"tf32\")\n", ""),
        ("        qk_lo += tl.dot(qr_lo, tl.trans(k_col), input_precision=\"tf32\")\n", ""),
        ("        kk_hi += tl.dot(b_k * e_row, tl.trans(k_col), input_precision=\"tf32\")\n", ""),
        ("        qk_hi += tl.dot(b_q * e_row, tl.trans(k_col), input_precision=\"tf32\")\n", "")],
    "solve: no inverses": [("                        PEEL: tl.constexpr):\n",
                            "                        PEEL: tl.constexpr):\n    return L\n")],
}


def kernel_times(mod, call, reps=10):
    """Median-free per-kernel averages (us) over `reps` calls, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            call()
        torch.cuda.synchronize()
    return {e.key: e.device_time_total / reps for e in prof.key_averages() if e.key.startswith("_")}


def load_variant(name, subs, tmp, base=None):
    with open(base or chunk.__file__) as f:
        src = f.read()
    for old, new in subs:
        if src.count(old) != 1:
            raise SystemExit(f"variant {name!r}: substitution not found once: {old[:60]!r}")
        src = src.replace(old, new)
    path = os.path.join(tmp, f"chunk_variant_{abs(hash(name))}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    torch.manual_seed(0)
    B, T, H, K = 1, 16384, 32, 128
    bf = torch.bfloat16
    q = F.normalize(torch.randn(B, T, H, K, device="cuda"), dim=-1).to(bf)
    k = F.normalize(torch.randn(B, T, H, K, device="cuda"), dim=-1).to(bf)
    v = torch.randn(B, T, H, K, device="cuda", dtype=bf)
    g = F.logsigmoid(torch.randn(B, T, H, K, device="cuda"))
    beta = torch.rand(B, T, H, device="cuda").to(bf)
    opts = KDAOptions(output_final_state=True)
    bases = [(f"full ({path})", [], path) for path in sys.argv[1:]]  # other versions of chunk.py to compare
    with tempfile.TemporaryDirectory() as tmp:
        for name, subs, base in bases + [(name, subs, None) for name, subs in VARIANTS.items()]:
            mod = load_variant(name, subs, tmp, base)
            call = lambda mod=mod: mod.kda_chunk(q, k, v, g, beta, opts)  # noqa: E731
            ms = triton.testing.do_bench(call, warmup=25, rep=150, return_mode="median")
            per = kernel_times(mod, call)
            parts = "  ".join(f"{key.strip('_').replace('_kernel', '')} {us:.0f}" for key, us in per.items())
            print(f"{name:28s} {ms:7.3f} ms   per kernel (us): {parts}", flush=True)
        # the state pass alone, over its launch settings (STATE_GRID=1)
        grid = itertools.product((16, 32), (4, 8), (2, 3)) if os.environ.get("STATE_GRID") else ()
        for bv, warps, stages in grid:
            chunk.LAUNCH.update(state_bv=bv, state_warps=warps, state_stages=stages)
            per = kernel_times(chunk, lambda: chunk.kda_chunk(q, k, v, g, beta, opts))
            print(f"state BV={bv:2d} warps={warps} stages={stages}: {per.get('_state_kernel', float('nan')):.0f} us",
                  flush=True)


if __name__ == "__main__":
    main()
