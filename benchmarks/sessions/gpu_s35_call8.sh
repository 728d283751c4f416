#!/usr/bin/env bash
# Session 35 call 8 (H100; carry .whl and .gpu_out): the new kept-W test and the chunk kernel's kept-matrices
# test on the GPU, then the chunked backward's -m gpu tests with the kept W (as many as the limit allows).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 120 python3 -m pytest -o addopts= -m '' -q -p no:cacheprovider tests/kernels/test_chunk.py \
    -k "kept" 2>&1 | grep -E "^E |Error|passed|failed" | head -20 | tee "$OUT/tests_chunk.txt"
timeout -s INT -k 10 240 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider -rfEs \
    tests/kernels/test_backward_chunked.py 2>&1 | tail -8 | tee "$OUT/tests_gpu.txt"
