#!/usr/bin/env bash
# Session 34 call 3 (H100; carry .whl and .gpu_out): keep_states with U kept unrounded too (fp32 U in the forward
# when it saves its states, so the kept V_new = U - W S has no bf16 U in it): against float64 on the two accuracy
# shapes of call 2, then against the defaults on K3 and 32 x 16384, two alternating rounds; the kept-states test.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 280 python3 benchmarks/bench_backward.py --accuracy --no-speed --no-fla --launch keep_states=True \
    --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
AB_TIMEOUT=120 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" keep_states=True
timeout -s INT -k 10 120 python3 -m pytest -o addopts= -m '' -q -p no:cacheprovider tests/kernels/test_autograd.py -k kept_states 2>&1 | tail -5 | tee "$OUT/tests.txt"
