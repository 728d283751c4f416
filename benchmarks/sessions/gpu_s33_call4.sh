#!/usr/bin/env bash
# Session 33 call 4 (H100; carry .whl and .gpu_out): split_vk_ktiles the default. Ours against fla 0.6.0 in one
# process on the three target shapes; both against float64 (--accuracy); then where float64 inputs lose accuracy
# on the GPU (benchmarks/float64_gpu_probe.py).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 300 python3 benchmarks/bench_backward.py 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
timeout -s INT -k 10 120 python3 benchmarks/bench_backward.py --accuracy --no-speed 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
timeout -s INT -k 10 150 python3 benchmarks/float64_gpu_probe.py 2>&1 | grep -v -i warn | tee "$OUT/float64_probe.txt"
