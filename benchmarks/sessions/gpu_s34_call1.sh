#!/usr/bin/env bash
# Session 34 call 1 (H100; carry .whl and .gpu_out): keep_states with the forward's V_new kept in fp32 (before its
# bf16 rounding) against the defaults (recompute) on K3 and 32 x 16384, two alternating rounds, with the reverse-only
# pass on 64-wide V-tiles as a third side; the kept-states test on the GPU (accuracy: call 2).
source benchmarks/gpu_env.sh
AB_TIMEOUT=150 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" keep_states=True \
    keep_states=True,chunked_pass_bv=64,chunked_pass_warps=8
timeout -s INT -k 10 120 python3 -m pytest -o addopts= -m '' -q -p no:cacheprovider tests/kernels/test_autograd.py -k kept_states 2>&1 | tail -5 | tee "$OUT/tests.txt"
