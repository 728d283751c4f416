#!/usr/bin/env bash
# Nineteenth session, fifth call (issue 15), H200 (needs_h200): call 4's reference and fla on 88cbb0e1 ran out of
# memory while the worker held 116.9 GiB (the fresh reference's cached blocks: released since this call, and
# --inputs-on-host keeps the input sets and reference outputs off the GPU); fla again on the workloads it failed
# with dA_log / ddt_bias judged as sums (TOL_SUM_SAFE); then the reference and fla on kda_bwd_varlen_h32's 78bd6fb3.
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
SOLUTIONS="triton reference fla" PHASE=calibrate RUN_NAME=calib_s19 bash benchmarks/gpu_verdicts.sh 570 \
    --name kda_bwd_fused_h96_d128_v_last_safe_gate --name kda_bwd_varlen_h32_d128_v_last --inputs-on-host \
    --rerun INCORRECT_NUMERICAL --rerun RUNTIME_ERROR --timeout 500 2>&1 | grep -v "^kda_bwd_\(fused_h32\|h32\)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/gpu_after.txt" 2>&1
