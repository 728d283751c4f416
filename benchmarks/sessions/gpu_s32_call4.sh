#!/usr/bin/env bash
# Session 32 call 4 (H100; carry .whl and .gpu_out): pairs_one_launch deleted (a loser in call 3). sums_warps=2
# (the one-launch sums kernel on 2 warps, 1% on K3 in call 3) on K3 and 32 x 16384, one round; then ours with it
# against fla 0.6.0 on K3 in one process.
source benchmarks/gpu_env.sh
AB_TIMEOUT=70 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 1 "" sums_warps=2
timeout -s INT -k 10 150 python3 benchmarks/bench_backward.py --shapes h96_dense_1x8192_safe_l2 \
    --launch sums_warps=2 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
