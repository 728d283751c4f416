#!/usr/bin/env bash
# Session 36 call 7 (H100; carry .whl and .gpu_out): the default (CPU) tier of the backward's kernel tests run on
# the GPU (DEVICE is cuda there), to see which bars are CPU-only: every failure with its line.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 540 python3 -m pytest -q -p no:cacheprovider --tb=line -rf --durations=5 \
    tests/kernels/test_backward.py tests/kernels/test_backward_chunked.py tests/kernels/test_autograd.py \
    2>&1 | tail -60 | tee "$OUT/tests.txt"
