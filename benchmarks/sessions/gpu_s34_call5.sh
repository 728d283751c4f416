#!/usr/bin/env bash
# Session 34 call 5 (H100; carry .whl and .gpu_out): keep_states the default (kept U in tf32 from the fp32 X). Ours
# against fla 0.6.0 in one process on the three target shapes; the kept-states test on the GPU.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 330 python3 benchmarks/bench_backward.py 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
timeout -s INT -k 10 120 python3 -m pytest -o addopts= -m '' -q -p no:cacheprovider tests/kernels/test_autograd.py -k kept_states 2>&1 | tail -5 | tee "$OUT/tests.txt"
