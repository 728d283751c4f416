#!/usr/bin/env bash
# Session 44 call 6 (H200; carry .whl and .gpu_out): with the decay row loaded a step ahead (b2d5e49), the state
# pass's pipelining depth at 32 pairs again (3 stages for its 16-wide V-tiles since the fourth session, H100).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:state_stages=2 --ab h32_dense_1x16384:state_stages=4 \
    --ab h16_dense_2x16384:state_stages=2 --ab h16_dense_2x16384:state_stages=4 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
