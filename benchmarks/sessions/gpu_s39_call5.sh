#!/usr/bin/env bash
# Session 39 call 5 (H100; carry .whl and .gpu_out with fla's autotuning results): accuracy against float64 of the new
# defaults (the solve in tf32) and the old (tf32x3) on two more shapes (32 heads x 1024, 4 heads x 16384), then the
# three shapes closest to issue 20's 1.25x against fla again.
source benchmarks/gpu_env.sh
OLD=solve_inv_precision=tf32x3,solve_merge_precision=tf32x3
timeout -s INT -k 10 60 python3 benchmarks/solve_precision_probe.py --heads 32 --tokens 1024 $OLD 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
timeout -s INT -k 10 150 python3 benchmarks/solve_precision_probe.py --heads 4 --tokens 16384 $OLD 2>&1 | grep -v -i warn | tee -a "$OUT/accuracy.txt"
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --shapes h32_dense_1x16384,h16_dense_2x16384,h96_dense_1x8192_safe_l2 \
    2>&1 | grep -v -i warn | tee "$OUT/chunk.txt"
