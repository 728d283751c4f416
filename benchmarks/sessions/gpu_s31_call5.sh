#!/usr/bin/env bash
# Session 31 call 5 (H100; carry .whl and .gpu_out): call 4's test_kept_states_give_the_gradients failed on the GPU
# with a CUDA error that the next tests then met (K = 20, V = 12, packed, GVA); alone, with blocking launches, to
# see which launch fails.
source benchmarks/gpu_env.sh
CUDA_LAUNCH_BLOCKING=1 timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_autograd.py -o addopts= -q \
    -p no:cacheprovider -x -k "kept_states" 2>&1 | grep -v "^\s*$" | tail -60 | tee "$OUT/pytest_kept_states.txt"
