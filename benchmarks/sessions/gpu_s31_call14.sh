#!/usr/bin/env bash
# Session 31 call 14 (H100; carry .whl and .gpu_out): the decode kernel at small V on the GPU (the chunked
# forward's V <= 16 miscompile, calls 7-10, prompts the check).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/sessions/debug_s31_recurrent_small_v.py 2>&1 | grep -v -i warn \
    | tee "$OUT/debug.txt"
