#!/usr/bin/env bash
# Session 31 call 2 (H100; carry .whl and .gpu_out): LAUNCH["keep_states"] (CPU-tested): for bf16 inputs the
# autograd forward keeps its fp32 chunk-start states and bf16 V_new, and the backward's pass runs only its reverse
# recursion (384 programs on K3 instead of 768; no states, U or Vn written by the backward). Accuracy on the safe
# gate and on 32 x 1024; A/B on K3 and 32 x 16384 (two rounds); per-kernel times with it on K3.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-speed --no-fla --accuracy \
    --accuracy-shapes h8_dense_1x2048_safe_l2,h32_dense_1x1024 --launch keep_states=True 2>&1 \
    | grep -v -i warn | grep -v Variable | tee -a "$OUT/accuracy.txt"
AB_TIMEOUT=70 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" keep_states=True
timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-fla --parts --launch keep_states=True \
    --shapes h96_dense_1x8192_safe_l2 2>&1 | grep -v -i warn | tee -a "$OUT/parts.txt"
