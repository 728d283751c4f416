#!/usr/bin/env bash
# Session 31 call 12 (H100; carry .whl and .gpu_out): with `_wu_kernel` fixed at V <= 16 (call 11), keep_states
# restored (opt-in): the autograd tests on the GPU (call 4's failure and the three after it), then the forward's
# test of the split state pass (inputs now on the device).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 -m pytest tests/kernels/test_autograd.py -o addopts= -q -p no:cacheprovider -rfE \
    -k "kept or norm_factors" 2>&1 | grep -v "^\s*$" | tail -12 | tee "$OUT/pytest_autograd_gpu.txt"
timeout -s INT -k 10 $((330 - SECONDS)) python3 -m pytest tests/kernels/test_chunk.py -o addopts= -q \
    -p no:cacheprovider -rfE -k "state_split_into_segments" 2>&1 | grep -v "^\s*$" | tail -12 \
    | tee "$OUT/pytest_chunk_gpu.txt"
