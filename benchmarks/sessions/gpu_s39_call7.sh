#!/usr/bin/env bash
# Session 39 call 7 (H100, call 6's machine; carry .whl and .gpu_out): intra_stream on the other four shapes of issue 20.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 220 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h96_dense_1x8192_safe_l2:intra_stream=True --ab h96_dense_1x8192:intra_stream=True \
    --ab h8_dense_1x131072:intra_stream=True --ab h32_varlen_16x4096:intra_stream=True \
    2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
