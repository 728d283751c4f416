#!/usr/bin/env bash
# Session 43 call 4 (H200; carry .whl and .gpu_out with fla's autotuning results): the new defaults (one anchor for
# every gate, range-checked where the safe gate does not bound it, uncapped there): the chunked forward's GPU tests,
# then issue 20's six shapes against fla 0.6.0.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "matches_fla or launch_variants" 2>&1 | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 10 300 python3 benchmarks/bench_chunk.py \
    --shapes h96_dense_1x8192_safe_l2,h32_dense_1x16384,h32_varlen_16x4096,h96_dense_1x8192,h16_dense_2x16384,h8_dense_1x131072 \
    2>&1 | grep -v -i warn | tee "$OUT/chunk.txt"
