#!/usr/bin/env bash
# Session 40 call 5 (H200, call 4's machine; carry .whl and .gpu_out with fla's autotuning results, tuned on an
# H100 in earlier sessions: the same sm_90 target, so Triton reuses them): issue 20's six shapes against fla 0.6.0
# with the new defaults (the peeled solve, tf32_rn).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 420 python3 benchmarks/bench_chunk.py \
    --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2,h32_varlen_16x4096,h96_dense_1x8192,h16_dense_2x16384,h8_dense_1x131072 \
    2>&1 | grep -v -i warn | tee "$OUT/chunk.txt"
