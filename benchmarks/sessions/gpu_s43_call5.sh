#!/usr/bin/env bash
# Session 43 call 5 (H200; carry .whl and .gpu_out): an experiment on a working tree not committed (chunk.py with a
# temporary launch key xp_form): the precomputed gate's one-anchor diagonal blocks in a cheaper checked form (rows
# 0-7 from exp(G_i - G_0) <= 1 times a per-channel exp(G_0 - G_8), two tile exps instead of three, the check by
# the two anchors' reduction plus one per-channel max) against call 2's form (default / changed > 1: the new form
# is faster). Call 3 put the whole check's cost at 1.016 (32 x 16384).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:xp_form=True --ab h16_dense_2x16384:xp_form=True --ab h96_dense_1x8192:xp_form=True \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
