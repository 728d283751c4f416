#!/usr/bin/env bash
# Session 40 call 1 (H200; carry .whl and .gpu_out): solve_peel (the solve's identity kept out of its tf32 products):
# the GPU tests of the chunked forward (the peeled solve against float64, every launch variant, against fla), then
# A/B of the peeled default against the unpeeled tf32 solve (the thirty-ninth session's default) and the unpeeled
# tf32x3 solve (before it) on 32 x 16384 and K3.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "matches_fla or launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 10 60 python3 -m pytest -o addopts= -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "peeled or solve_in_tf32" 2>&1 | tail -15 | tee -a "$OUT/tests.txt"
OLD=solve_peel=False,solve_inv_precision=tf32x3,solve_merge_precision=tf32x3
timeout -s INT -k 10 300 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:solve_peel=False --ab h96_dense_1x8192_safe_l2:solve_peel=False \
    --ab h32_dense_1x16384:$OLD --ab h96_dense_1x8192_safe_l2:$OLD \
    2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
