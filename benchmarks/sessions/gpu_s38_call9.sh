#!/usr/bin/env bash
# Session 38 call 9 (H100; carry .whl and .gpu_out), run with results/2026-11-28-s38/call8/u_in_state.diff applied
# (uncommitted): compute-sanitizer memcheck on u_in_state at 4 x 1024 and 32 x 4096 (16-wide state tiles, 3 stages).
source benchmarks/gpu_env.sh
cat > /tmp/san.py <<'PY'
import sys, torch
sys.path.insert(0, "benchmarks")
from bench_chunk import make_inputs, run_ours, ours
ours.LAUNCH["u_in_state"] = True
for H, T in ((4, 1024), (32, 4096)):
    x = make_inputs(H, [T], "pre")
    o, h = run_ours(x, "pre")
    torch.cuda.synchronize()
    print("ran", H, T, bool(torch.isfinite(o).all()), flush=True)
PY
timeout -s INT -k 10 240 compute-sanitizer --tool memcheck --print-limit 5 python3 /tmp/san.py 2>&1 | grep -v -i warn | head -60 | tee "$OUT/sanitizer.txt"
