#!/usr/bin/env bash
# Session 35 call 4 (H100; carry .whl and .gpu_out with call 3's fla autotuning results): ours (9997a9a) against
# fla 0.6.0 in one process on the three target shapes (call 3 ran out of time while fla tuned the packed shape).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 570 python3 benchmarks/bench_backward.py 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
