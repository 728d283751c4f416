#!/usr/bin/env bash
# Session 34 call 10 (H100; carry .whl and .gpu_out): the GPU tests that train through kda_autograd with bf16 inputs
# (keep_states the default now): against fla 0.6.0's chunk_kda (the first try, with the real-size tests too, ran past its limit: no result).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider -rfEs tests/kernels/test_backward.py \
    -k "bf16_training_step" 2>&1 | grep -E "^E |Error|passed|failed|^FAILED" | head -20 | tee "$OUT/tests.txt"
