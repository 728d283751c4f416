#!/usr/bin/env bash
# Session 39 call 3 (H100; carry .whl and .gpu_out): accuracy against float64 of the solve in tf32 (merges, inverses,
# both) on bench_chunk.py's inputs and weak decays (benchmarks/solve_precision_probe.py), then the candidate
# defaults (the solve in tf32, discard_g) A/B on issue 20's six shapes.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/solve_precision_probe.py solve_merge_precision=tf32 \
    solve_inv_precision=tf32 solve_merge_precision=tf32,solve_inv_precision=tf32 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
A=solve_merge_precision=tf32,solve_inv_precision=tf32,discard_g=True
timeout -s INT -k 10 300 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:$A --ab h96_dense_1x8192_safe_l2:$A --ab h16_dense_2x16384:$A \
    --ab h32_varlen_16x4096:$A --ab h96_dense_1x8192:$A --ab h8_dense_1x131072:$A \
    2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
