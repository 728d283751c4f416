#!/usr/bin/env bash
# Session 31 call 1 (H100; carry .whl and .gpu_out): LAUNCH["sums_grads"] (`_local_grads_kernel`: 3b's sums and
# 3c's dq, dk, dg in one launch, each work item's four row blocks in one program, no [T, HV, K] sum buffers;
# CPU-tested). ptxas (sm_90, triton 3.6, K = 128, one anchor, norm factors): 288 bytes of spills at the default cap
# of 128 registers, 108 at 168, none uncapped (255). Accuracy on the safe gate, then one round of the four
# variants on K3, the per-kernel times of the default and the fused form, and a second round.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 80 python3 benchmarks/bench_backward.py --no-speed --no-fla --accuracy \
    --accuracy-shapes h8_dense_1x2048_safe_l2 --launch sums_grads=True 2>&1 \
    | grep -v -i warn | grep -v Variable | tee -a "$OUT/accuracy.txt"
AB_TIMEOUT=60 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2 1 "" sums_grads=True \
    sums_grads=True,sums_maxnreg=168 sums_grads=True,sums_maxnreg=0
for launch in "" sums_grads=True; do
    timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-fla --parts --launch "$launch" \
        --shapes h96_dense_1x8192_safe_l2 2>&1 | grep -v -i warn | tee -a "$OUT/parts.txt"
done
AB_TIMEOUT=60 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 1 "" sums_grads=True
