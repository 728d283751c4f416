#!/usr/bin/env bash
# Session 34 call 4 (H100; carry .whl and .gpu_out): keep_states with the kept U in tf32 from the solve's fp32 X
# (this tree) against float64 on call 3's two accuracy shapes; then on K3 and 32 x 16384, two alternating rounds:
# the defaults, keep_states here, and keep_states in call 3's code (.gpu_out/fp32u: U fp32 from the bf16 X).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 280 python3 benchmarks/bench_backward.py --accuracy --no-speed --no-fla --launch keep_states=True \
    --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
AB_TIMEOUT=120 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" keep_states=True \
    tree:.gpu_out/fp32u@keep_states=True
