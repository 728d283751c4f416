#!/usr/bin/env bash
# Session 45 call 3 (H200; carry .whl and .gpu_out): the solve under a register cap (call 2: 168 registers 1.007 on
# K3, 1.010 on 32 x 16384; ptxas on the CPU, triton 3.9: 194 -> 168 registers, 4 bytes of spills, 8 -> 12 programs
# per SM) on the other four shapes of issue 20, and at 128 (352 bytes of spills, 16 programs per SM).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h16_dense_2x16384:solve_maxnreg=168 \
    --ab h96_dense_1x8192:solve_maxnreg=168 \
    --ab h32_varlen_16x4096:solve_maxnreg=168 \
    --ab h8_dense_1x131072:solve_maxnreg=168 \
    --ab h96_dense_1x8192_safe_l2:solve_maxnreg=128 \
    --ab h32_dense_1x16384:solve_maxnreg=128 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
