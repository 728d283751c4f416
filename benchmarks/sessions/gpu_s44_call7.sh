#!/usr/bin/env bash
# Session 44 call 7 (H200; carry .whl and .gpu_out): the state pass with O inside at 96 pairs (K3: 645 us of 2205,
# 255 registers and spills on 64-wide V-tiles by ptxas on the CPU): 32-wide V-tiles (twice the programs, half the
# registers), and 2 stages on the 64-wide tiles (1 by default for tiles wider than 16).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h96_dense_1x8192_safe_l2:state_bv=32 --ab h96_dense_1x8192:state_bv=32 \
    --ab h96_dense_1x8192_safe_l2:state_stages=2 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
