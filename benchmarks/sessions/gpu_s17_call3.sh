#!/usr/bin/env bash
# Seventeenth session, third H100 call (issue 20): the new defaults (qg_in_intra on) against fla tuned on each of
# issue 20's six shapes, then the accuracy of both against the fp32 recurrence. Logs in $OUT.
source benchmarks/gpu_env.sh
timeout -s INT -k 15 "${FLA_S:-390}" python3 benchmarks/bench_chunk.py --fla-tune-each \
    --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2,h32_varlen_16x4096,h96_dense_1x8192,h16_dense_2x16384,h8_dense_1x131072 \
    2>&1 | tee "$OUT/bench_chunk.txt"
timeout -s INT -k 15 140 python3 benchmarks/bench_chunk.py --no-speed --accuracy 2>&1 | tee "$OUT/accuracy.txt"
