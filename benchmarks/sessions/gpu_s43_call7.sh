#!/usr/bin/env bash
# Session 43 call 7 (H200; carry .whl and .gpu_out): a diagnostic on a working tree not committed (chunk.py with a
# temporary launch key xp_rlo): the precomputed gate's checked one-anchor form without its third tile exponential
# (exp(G_i - G_0) taken from the clamped row factor: wrong where a row is out of range, right on bench_chunk.py's
# inputs). How much of the check's 1.6% (call 3) is that exponential? default / changed > 1: without it faster.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:xp_rlo=True --ab h16_dense_2x16384:xp_rlo=True \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
