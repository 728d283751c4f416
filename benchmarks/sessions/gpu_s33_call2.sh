#!/usr/bin/env bash
# Session 33 call 2 (H100, warm; carry .whl and .gpu_out): why the chunked backward's CPU-tier comparison tests
# (sums in one launch, K-tiles apart, pass directions) fail on the GPU (call 1), with the defaults untouched.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= \
    -k "k_tiles or one_launch or pass_directions" -q -p no:cacheprovider --tb=short -rfEs > "$OUT/pytest_tb.txt" 2>&1
tail -30 "$OUT/pytest_tb.txt"
