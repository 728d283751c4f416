#!/usr/bin/env bash
# Session 44 call 5 (H200; carry .whl and .gpu_out): commit b2d5e49 (state_prefetch on where O is not in the pass):
# the chunked forward's GPU tests (fla match, every launch variant incl. the two new ones), the new default against
# state_prefetch=False on the 32-pair shapes, then issue 20's six shapes against fla 0.6.0.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 220 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "matches_fla or launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 10 120 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:state_prefetch=False --ab h16_dense_2x16384:state_prefetch=False \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
timeout -s INT -k 10 240 python3 benchmarks/bench_chunk.py \
    --shapes h96_dense_1x8192_safe_l2,h32_dense_1x16384,h32_varlen_16x4096,h96_dense_1x8192,h16_dense_2x16384,h8_dense_1x131072 \
    2>&1 | grep -v -i warn | tee "$OUT/chunk.txt"
