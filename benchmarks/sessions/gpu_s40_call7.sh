#!/usr/bin/env bash
# Session 40 call 7 (H200, call 6's machine; carry .whl and .gpu_out): the intra kernel (47% of ours at 32 x 16384 on
# the H200, call 6) under the launch settings chosen on the H100: A/B of intra_warps=4, intra_stages=2 and
# intra_bk=64 on 32 x 16384.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:intra_warps=4 --ab h32_dense_1x16384:intra_stages=2 --ab h32_dense_1x16384:intra_bk=64 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
