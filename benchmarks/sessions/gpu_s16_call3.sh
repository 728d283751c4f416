#!/usr/bin/env bash
# Sixteenth session, third H100 call (issue 20): ours against fla tuned on each shape, the shapes call 2's
# time limit cut off. Logs in $OUT.
source benchmarks/gpu_env.sh
timeout -s INT -k 15 "${FLA_S:-420}" python3 benchmarks/bench_chunk.py --fla-tune-each \
    --shapes h8_dense_1x131072,h16_dense_2x16384,h32_dense_1x4096,h16_dense_1x65536,h8_dense_1x16384 \
    2>&1 | tee "$OUT/bench_chunk.txt"
