#!/usr/bin/env bash
# Session 41 call 8 (H200, call 6's machine; carry .whl and .gpu_out): wu_maxnreg=168 on the other shape whose W/U
# kernel reads k and G (safe gate and L2 norm in the op: 32 heads x 16384).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 100 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_varlen_1x16384_safe_l2:wu_maxnreg=168 2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
