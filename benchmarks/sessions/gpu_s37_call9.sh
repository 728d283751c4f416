#!/usr/bin/env bash
# Session 37 call 9 (H100; carry .whl and .gpu_out): kg_in_intra's operand beta k exp(G) now lives in W's memory
# (the W/U kernel overwrites its own operand tile by tile): the default (aliased) against kg_in_intra=False on the
# GPU, where the A/B prints whether o and the final state are the same bits, and the speed.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:kg_in_intra=False --ab h32_varlen_16x4096:kg_in_intra=False 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
