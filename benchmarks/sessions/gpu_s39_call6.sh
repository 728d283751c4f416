#!/usr/bin/env bash
# Session 39 call 6 (H100; carry .whl and .gpu_out): intra_stream (kernel 2's outputs stored with .cs, the gate input
# loaded evict_first, so that the G and k rows it reads back stay in L2) against the defaults on the 32-pair shapes.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h16_dense_2x16384:intra_stream=True --ab h32_dense_1x16384:intra_stream=True \
    2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
