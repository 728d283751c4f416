#!/usr/bin/env bash
# Session 32 call 5 (H100; carry .whl and .gpu_out): the one-launch sums kernel on 2 warps by default now. The
# chunked mode's GPU tests with it; A/B at 32 x 16384 against 4 warps (call 4 cut that shape's default line).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -8 | tee "$OUT/pytest_chunked_gpu.txt"
AB_TIMEOUT=80 bash benchmarks/ab_backward.sh h32_dense_1x16384 2 "" sums_warps=4
