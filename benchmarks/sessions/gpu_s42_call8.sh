#!/usr/bin/env bash
# Session 42 call 8 (H200, call 7's machine; carry .whl and .gpu_out): the gate kernel's cap of 80 registers (1.005 on
# K3 in call 7) on the other shape with the gate in the op (32 x 16384, safe gate and L2 norm), and K3 again.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_varlen_1x16384_safe_l2:gate_maxnreg=80 --ab h96_dense_1x8192_safe_l2:gate_maxnreg=80 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
