#!/usr/bin/env bash
# Session 31 call 10 (H100; carry .whl and .gpu_out): call 9 found no state or output setting that changes the
# forward's wrong result at V = 16; only `_wu_kernel` tiles V by 16 there (V = 32 takes one tile of 32). V = 32 with
# wu_bv=16, and V = 16 with other warp counts.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/sessions/debug_s31_forward_v16.py wu 2>&1 | grep -v -i warn \
    | tee "$OUT/debug.txt"
