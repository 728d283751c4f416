#!/usr/bin/env bash
# Session 39 call 1 (H100; carry .whl and .gpu_out): inv_in_intra (the intra kernel inverts its diagonal 16x16
# blocks of A_kk, the solve only merges) and discard_g (the intra kernel drops its G rows from L2 when done, no
# write-back to DRAM) against the defaults; the GPU launch-variant test first (both variants compiled and checked).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:inv_in_intra=True --ab h32_dense_1x16384:discard_g=True \
    --ab h32_dense_1x16384:inv_in_intra=True,discard_g=True --ab h96_dense_1x8192_safe_l2:inv_in_intra=True \
    --ab h32_varlen_16x4096:inv_in_intra=True,discard_g=True --ab h8_dense_1x131072:inv_in_intra=True,discard_g=True \
    2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
