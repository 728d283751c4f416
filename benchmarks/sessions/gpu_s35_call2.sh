#!/usr/bin/env bash
# Session 35 call 2 (H100; carry .whl and .gpu_out): the backward takes the forward's W and k exp(G_last - G)
# (this tree; the forward computes W in tf32 from the fp32 X when it keeps its states) against the session's start
# (.gpu_out/base: git archive 2ae3863): accuracy against float64 on two shapes, then K3 and 32 x 16384 in two
# alternating rounds; then the kept-states test.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_backward.py --accuracy --no-speed --no-fla \
    --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
AB_TIMEOUT=120 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" tree:.gpu_out/base
timeout -s INT -k 10 100 python3 -m pytest -o addopts= -m '' -q -p no:cacheprovider \
    tests/kernels/test_autograd.py -k kept_states 2>&1 | grep -E "^E |Error|passed|failed" | head -20 \
    | tee "$OUT/tests.txt"
