#!/usr/bin/env bash
# Session 36 call 1 (H100; carry .whl and .gpu_out): the training forward without the A_kk scratch (the solve
# forms diag(beta) P from the kept P) and without the bf16 X (the W/U kernel reads the fp32 one), this tree,
# against the session's start (.gpu_out/base: git archive 350d770): K3 and 32 x 16384 in two alternating rounds;
# then K3 kernel by kernel with this tree.
source benchmarks/gpu_env.sh
AB_TIMEOUT=120 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" tree:.gpu_out/base
timeout -s INT -k 10 150 python3 benchmarks/bench_backward.py --parts --no-fla --shapes h96_dense_1x8192_safe_l2 2>&1 \
    | grep -v -i warn | tee "$OUT/parts.txt"
