#!/usr/bin/env bash
# Session 35 call 6 (H100; carry .whl and .gpu_out with fla's autotuning results): K3 against fla 0.6.0 in one
# process, twice (two more samples of call 4's 14.76 against 14.71; the kernels of 9997a9a).
source benchmarks/gpu_env.sh
for round in 1 2; do
    echo "== round $round"
    timeout -s INT -k 10 240 python3 benchmarks/bench_backward.py --shapes h96_dense_1x8192_safe_l2 2>&1 \
        | grep -v -i warn
done | tee "$OUT/fla.txt"
