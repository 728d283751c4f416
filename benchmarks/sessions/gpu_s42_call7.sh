#!/usr/bin/env bash
# Session 42 call 7 (H200; carry .whl and .gpu_out): K3's gate kernel (205 us, 30% occupancy: 96 registers, 5
# programs of 4 warps per SM in the forty-first session's profile) under register caps of 80 (6 programs; ptxas 4
# bytes of spills) and 64 (8; 40 bytes), and with K-tiles of 32.
source benchmarks/gpu_env.sh
S=h96_dense_1x8192_safe_l2
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab $S:gate_maxnreg=80 --ab $S:gate_maxnreg=64 --ab $S:gate_bk=32 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
