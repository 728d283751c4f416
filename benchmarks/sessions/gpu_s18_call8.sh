#!/usr/bin/env bash
# Eighteenth session, eighth H100 call (issue 16): the final defaults (pairs' diagonal products tf32x3, the sums'
# tf32): ours on three shapes, fla on 32 heads x 16384 (tuned there in call 2), accuracy of ours on two shapes.
# Logs in $OUT.
source benchmarks/gpu_env.sh
timeout -s INT -k 15 100 python3 benchmarks/bench_backward.py --no-fla --parts \
    --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2,h32_varlen_real_65536 2>&1 | grep -v -i warn | tee "$OUT/ours.txt"
timeout -s INT -k 15 60 python3 benchmarks/bench_backward.py --shapes h32_dense_1x16384 2>&1 | tee "$OUT/vs_fla.txt"
timeout -s INT -k 15 100 python3 benchmarks/bench_backward.py --no-fla --no-speed --accuracy \
    --accuracy-shapes h8_dense_1x2048_safe_l2,h32_dense_1x1024 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
