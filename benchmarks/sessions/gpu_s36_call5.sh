#!/usr/bin/env bash
# Session 36 call 5 (H100; carry .whl and .gpu_out with fla's autotuning results): the final kernels of #16
# (b69d018's) against fla 0.6.0 in one process on the three target shapes, then K3 again in a second process.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 300 python3 benchmarks/bench_backward.py 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
timeout -s INT -k 10 150 python3 benchmarks/bench_backward.py --shapes h96_dense_1x8192_safe_l2 2>&1 \
    | grep -v -i warn | tee -a "$OUT/fla.txt"
