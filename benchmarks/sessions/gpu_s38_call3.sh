#!/usr/bin/env bash
# Session 38 call 3 (H100; carry .whl and .gpu_out): kg_in_intra with the L2 norm in the op, k's norm factors
# kept apart (RK_APART: X diag(rk) from the solve, diag(rk) V_new in the state pass; no pre-pass over k in the intra
# kernel) against kg_in_intra=False (the K3 default until now), on K3 and on 32 x 16384 with the safe gate + L2.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 300 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h96_dense_1x8192_safe_l2:kg_in_intra=False --ab h32_varlen_1x16384_safe_l2:kg_in_intra=False \
    2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
