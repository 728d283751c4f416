#!/usr/bin/env bash
# Session 39 call 2 (H100; carry .whl and .gpu_out): the solve's merges (and its diagonal inverses) in tf32 instead of
# tf32x3 (X is rounded to bf16 after), and discard_g on two more shapes; the GPU launch-variant test first (the tf32
# variants against float64, within 3% of the defaults' error).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 170 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 10 380 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:solve_merge_precision=tf32 --ab h96_dense_1x8192_safe_l2:solve_merge_precision=tf32 \
    --ab h32_dense_1x16384:solve_merge_precision=tf32,solve_inv_precision=tf32 \
    --ab h96_dense_1x8192_safe_l2:solve_merge_precision=tf32,solve_inv_precision=tf32 \
    --ab h16_dense_2x16384:discard_g=True --ab h96_dense_1x8192:discard_g=True \
    2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
