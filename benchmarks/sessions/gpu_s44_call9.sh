#!/usr/bin/env bash
# Session 44 call 9 (H200; carry .whl and .gpu_out): the backward's GPU tests that run the forward with the kept chunk
# matrices (SAVE) with state_prefetch on (460b36b; the state pass with save_states and without O in it):
# test_backward.py and two of the chunked mode's K = V = 128 cases (the rest left out for the device time left).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 220 python3 -m pytest tests/kernels/test_backward.py \
    "tests/kernels/test_backward_chunked.py::test_chunked_mode_on_gpu[128-128-launch0]" \
    "tests/kernels/test_backward_chunked.py::test_chunked_mode_on_gpu[128-128-launch3]" \
    -o addopts= -m gpu -v -p no:cacheprovider -rfEs --durations=5 --tb=short > "$OUT/tests.txt" 2>&1
tail -25 "$OUT/tests.txt"
