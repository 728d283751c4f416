#!/usr/bin/env bash
# Session 42 call 3 (H200; carry .whl and .gpu_out): the intra kernel's diagonal blocks at one anchor (its row 8)
# under the safe gate's bound (new default intra_one_anchor; two products instead of four, as the backward's
# sums_one_anchor and fla's safe-gate path): A/B against the two anchors on K3 and on 32 x 16384 with the safe gate
# and L2 norm in the op (default / changed > 1: one anchor faster); then the chunked forward's GPU tests (fla
# match and every launch variant, intra_two_anchors among them).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h96_dense_1x8192_safe_l2:intra_one_anchor=False --ab h32_varlen_1x16384_safe_l2:intra_one_anchor=False \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
timeout -s INT -k 10 240 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "matches_fla or launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
