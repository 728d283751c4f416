#!/usr/bin/env bash
# Session 30 call 7 (H100; carry .whl and .gpu_out; the session's last 330 s of device time): LAUNCH["qk_norm_factors"]
# (written after call 6, CPU-tested): the backward reads q and k (bf16) with their rows' L2-norm factors instead of
# fp32 normalised copies. Only the in-op L2 norm shapes change: K3. Accuracy on the safe-gate shape (the same
# gradients expected), then two alternating rounds on K3.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-speed --no-fla --accuracy \
    --accuracy-shapes h8_dense_1x2048_safe_l2 --launch qk_norm_factors=True 2>&1 \
    | grep -v -i warn | grep -v Variable | tee -a "$OUT/accuracy.txt"
AB_TIMEOUT=60 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 2 "" qk_norm_factors=True
