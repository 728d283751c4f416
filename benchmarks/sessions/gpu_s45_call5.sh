#!/usr/bin/env bash
# Session 45 call 5 (H200; carry .whl and .gpu_out): commit f440f0b (the solve under a register cap of 168 by
# default, _solve_cap): the chunked forward's GPU tests (fla match, every launch variant), then issue 20's six shapes
# against fla 0.6.0.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 220 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "matches_fla or launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 10 240 python3 benchmarks/bench_chunk.py \
    --shapes h96_dense_1x8192_safe_l2,h32_dense_1x16384,h32_varlen_16x4096,h96_dense_1x8192,h16_dense_2x16384,h8_dense_1x131072 \
    2>&1 | grep -v -i warn | tee "$OUT/chunk.txt"
