#!/usr/bin/env bash
# Session 42 call 5 (H200; carry .whl and .gpu_out): the intra kernel's register cap of 168 (won 1.032 on K3 in call
# 4, with intra_off_tail) with the 64-wide tile (intra_off_tail=False: fewer spills in ptxas, 42.5 KB of shared
# memory instead of 32.5), on K3, on 32 x 16384 (precomputed gate: two anchors) and on 32 x 16384 with the safe
# gate and L2 norm in the op.
source benchmarks/gpu_env.sh
S=h96_dense_1x8192_safe_l2
P=h32_dense_1x16384
Q=h32_varlen_1x16384_safe_l2
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab $S:intra_maxnreg=168,intra_off_tail=False --ab $S:intra_maxnreg=168 \
    --ab $P:intra_maxnreg=168 --ab $P:intra_maxnreg=168,intra_off_tail=False \
    --ab $Q:intra_maxnreg=168 --ab $Q:intra_maxnreg=168,intra_off_tail=False \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
