#!/usr/bin/env bash
# Session 41 call 4 (H200; carry .whl and .gpu_out): the GPU tests of the backward, gate and autograd modules, one
# line per test as it ends (call 3 ran them under a 330 s limit, which cut them with nothing written).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 530 python3 -m pytest tests/kernels/test_backward.py tests/kernels/test_backward_chunked.py \
    tests/kernels/test_autograd.py tests/kernels/test_gate.py -o addopts= -m gpu -v -p no:cacheprovider -rfEs \
    --durations=0 --tb=short > "$OUT/tests.txt" 2>&1
tail -40 "$OUT/tests.txt"
