#!/usr/bin/env bash
# Session 35 call 5 (H100; carry .whl and .gpu_out): the gate's chain rule in the backward's last kernel (this
# tree) against 9997a9a (.gpu_out/base): accuracy against float64 on the safe-gate shape, K3 and 32 x 16384 in two
# alternating rounds, then the gate-chain and kept-states tests.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/bench_backward.py --accuracy --no-speed --no-fla \
    --accuracy-shapes h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
AB_TIMEOUT=120 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" tree:.gpu_out/base
timeout -s INT -k 10 120 python3 -m pytest -o addopts= -m '' -q -p no:cacheprovider \
    tests/kernels/test_autograd.py -k "gate_chain or kept_states" 2>&1 | grep -E "^E |Error|passed|failed" \
    | head -20 | tee "$OUT/tests.txt"
