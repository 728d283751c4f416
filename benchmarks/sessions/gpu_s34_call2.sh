#!/usr/bin/env bash
# Session 34 call 2 (H100; carry .whl and .gpu_out): keep_states (V_new kept in fp32) against float64 on two accuracy
# shapes (ours only: fla's and our defaults' errors on the same inputs are the thirty-third session's, calls 4-5);
# one backward's kernels on K3 with it; the reverse-only pass on 16-wide V-tiles, one round.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 280 python3 benchmarks/bench_backward.py --accuracy --no-speed --no-fla --launch keep_states=True \
    --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
timeout -s INT -k 10 120 python3 benchmarks/bench_backward.py --no-fla --parts --shapes h96_dense_1x8192_safe_l2 \
    --launch keep_states=True 2>&1 | grep -v -i warn | tee "$OUT/parts.txt"
AB_TIMEOUT=120 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 1 keep_states=True \
    keep_states=True,chunked_pass_bv=16
