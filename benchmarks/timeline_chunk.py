"""One call of our chunked forward on a GPU, kernel by kernel: when each kernel ran on which stream (torch.profiler
trace), and each kernel's registers per thread, spills and shared memory (the compiled kernels).

    python benchmarks/timeline_chunk.py SHAPE [--launch KEY=VALUE,...]

SHAPE is one of bench_chunk.py's. Made for the pipelined parts (launch setting pipeline_parts): do a part's state
pass and the next part's kernels 1-4 overlap, and what does each kernel hold of an SM while it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))

from bench_chunk import SHAPES, make_inputs, ours, parse_launch, run_ours  # noqa: E402

KERNELS = ["_gate_cumsum_kernel", "_intra_chunk_kernel", "_solve_kernel", "_wu_kernel", "_state_kernel",
           "_output_kernel", "_segment_affine_kernel", "_segment_scan_kernel"]


class Keep:
    """Wraps a JITFunction: launches it and keeps the compiled kernel of the last launch."""

    def __init__(self, fn):
        self.fn, self.compiled = fn, None

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.compiled = self.fn[grid](*args, **kwargs)
            return self.compiled
        return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("--launch", default=None)
    a = ap.parse_args()
    if a.launch:
        ours.LAUNCH.update(parse_launch(a.launch))
    kept = {name: Keep(getattr(ours, name)) for name in KERNELS}
    for name, spy in kept.items():
        setattr(ours, name, spy)
    H, lens, mode = SHAPES[a.shape]
    x = make_inputs(H, lens, mode)
    for _ in range(3):
        run_ours(x, mode)
    torch.cuda.synchronize()
    print(f"{a.shape}, launch {a.launch or 'defaults'}")
    for name, spy in kept.items():
        c = spy.compiled
        if c is not None:
            print(f"  {name}: {c.n_regs} registers, {c.n_spills} bytes spilled, {c.metadata.shared} bytes shared, "
                  f"{c.metadata.num_warps} warps")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            run_ours(x, mode)
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    kernels = sorted((e for e in trace["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    last = kernels[len(kernels) // 2:]  # the second call
    t0 = last[0]["ts"]
    print("  kernel (stream): start .. end us, from the call's first kernel")
    for e in last:
        name = e["name"].split("(")[0]
        print(f"  {name:26s} ({e['args'].get('stream', '?')}): {e['ts'] - t0:8.1f} .. {e['ts'] + e['dur'] - t0:8.1f}")
    print(f"  call: {max(e['ts'] + e['dur'] for e in last) - t0:.1f} us")


if __name__ == "__main__":
    main()
