#!/usr/bin/env bash
# Session 35 call 3 (H100; carry .whl and .gpu_out): ours (9997a9a: the forward's W and k exp(G_last - G) kept)
# against fla 0.6.0 in one process on the three target shapes; then one forward and one backward kernel by kernel
# on K3, ours and fla's.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 330 python3 benchmarks/bench_backward.py 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
timeout -s INT -k 10 200 python3 benchmarks/bench_backward.py --parts --shapes h96_dense_1x8192_safe_l2 2>&1 \
    | grep -v -i warn | tee "$OUT/parts.txt"
