#!/usr/bin/env bash
# Session 31 call 9 (H100; carry .whl and .gpu_out): padding V to 16 did not help (call 8: V = 16 itself is wrong).
# Which chunk.LAUNCH setting changes the forward's result at K = 20, V = 16 (benchmarks/sessions/
# debug_s31_forward_v16.py)?
source benchmarks/gpu_env.sh
timeout -s INT -k 10 250 python3 benchmarks/sessions/debug_s31_forward_v16.py 2>&1 | grep -v -i warn \
    | tee "$OUT/debug.txt"
