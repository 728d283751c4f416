#!/usr/bin/env bash
# Session 38 call 8 (H100; carry .whl and .gpu_out): u_in_state (the state pass forms U = X (beta v) itself, the W/U
# kernel writes no U) against the defaults on issue 20's shapes that do not split the pass.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h96_dense_1x8192_safe_l2:u_in_state=True --ab h32_dense_1x16384:u_in_state=True \
    --ab h96_dense_1x8192:u_in_state=True --ab h32_varlen_16x4096:u_in_state=True \
    --ab h16_dense_2x16384:u_in_state=True --ab h32_varlen_1x16384_safe_l2:u_in_state=True \
    2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
