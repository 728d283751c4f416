#!/usr/bin/env bash
# Session 43 call 6 (H200; carry .whl and .gpu_out): an experiment on a working tree not committed (chunk.py with a
# temporary launch key xp_spread): the precomputed gate's range check accumulating |G_i - G_8| element-wise in a
# [16, BK] tile, reduced over channels once after the K loop, instead of a row reduction per K-tile (default /
# changed > 1: the element-wise form is faster).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:xp_spread=True --ab h16_dense_2x16384:xp_spread=True \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
