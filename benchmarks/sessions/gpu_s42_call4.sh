#!/usr/bin/env bash
# Session 42 call 4 (H200; carry .whl and .gpu_out): the intra kernel's last block takes its 48 earlier columns as
# a 32-wide and a 16-wide tile (new default intra_off_tail) instead of one 64-wide tile with 16 masked columns:
# A/B on K3 and 32 x 16384 (default / changed > 1: the 64-wide tile faster); on K3 the register cap 168 (6
# programs per SM by registers; ptxas: 100 bytes of spills) with and without two pipeline stages; then the
# chunked forward's GPU tests (the variants' test now also checks that the defaults are no less accurate than
# the two anchors).
source benchmarks/gpu_env.sh
S=h96_dense_1x8192_safe_l2
timeout -s INT -k 10 300 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab $S:intra_off_tail=False --ab h32_dense_1x16384:intra_off_tail=False \
    --ab $S:intra_maxnreg=168 --ab $S:intra_maxnreg=168,intra_stages=2 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
timeout -s INT -k 10 240 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "matches_fla or launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
