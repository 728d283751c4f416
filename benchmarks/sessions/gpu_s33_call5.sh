#!/usr/bin/env bash
# Session 33 call 5 (H100; carry .whl and .gpu_out): the safe-gate accuracy shape that call 4's time limit cut
# (ours and fla against float64), and the float64 probe with the failing test's options ([V, K] states, scale 0.7).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/float64_gpu_probe.py 2>&1 | grep -v -i warn | tee "$OUT/float64_probe.txt"
timeout -s INT -k 10 280 python3 benchmarks/bench_backward.py --accuracy --no-speed \
    --accuracy-shapes h8_varlen_3,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
