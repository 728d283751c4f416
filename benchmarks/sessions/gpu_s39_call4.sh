#!/usr/bin/env bash
# Session 39 call 4 (H100; carry .whl and .gpu_out with fla's autotuning results): the GPU tests of the chunked
# forward with the new defaults (the solve in tf32, discard_g; every launch variant compiled, against float64 and
# fla), then issue 20's six shapes against fla 0.6.0.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "matches_fla or launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 10 370 python3 benchmarks/bench_chunk.py \
    --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2,h32_varlen_16x4096,h96_dense_1x8192,h16_dense_2x16384,h8_dense_1x131072 \
    2>&1 | grep -v -i warn | tee "$OUT/chunk.txt"
timeout -s INT -k 10 60 python3 benchmarks/bench_chunk.py --no-speed --no-fla --ab h32_dense_1x16384:solve_warps=2 \
    2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
