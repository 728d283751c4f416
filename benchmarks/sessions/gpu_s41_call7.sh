#!/usr/bin/env bash
# Session 41 call 7 (H200, call 6's machine; carry .whl and .gpu_out): call 6's two W/U winners on K3 together, and
# each on 32 x 16384 (where the W/U kernel reads the intra kernel's operands).
source benchmarks/gpu_env.sh
K3=h96_dense_1x8192_safe_l2
P=h32_dense_1x16384
timeout -s INT -k 10 150 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab $K3:wu_maxnreg=168,wu_stages=1 --ab $P:wu_maxnreg=168 --ab $P:wu_stages=1 --ab $P:wu_maxnreg=168,wu_stages=1 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
