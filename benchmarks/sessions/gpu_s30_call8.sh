#!/usr/bin/env bash
# Session 30 call 8 (H100; carry .whl and .gpu_out; the session's last device time): the runner on the two backward
# definitions through the in-kernel gate, L2 norm and beta logits with this session's defaults (q and k read with
# their norm factors, the sums at one anchor under the safe gate, 3c's new tiles), triton and the reference, into
# .gpu_out/run_s30; kda_bwd_fused_h96 first (not reached in the twenty-ninth session; its 65536-token workload
# needs an H200 for the reference).
RUN_DIR=.gpu_out/run_s30 SOLUTIONS="triton reference" bash benchmarks/gpu_dataset_run.sh 160 \
    --name kda_bwd_fused_h96_d128_v_last_safe_gate --name kda_bwd_fused_h32_d128_v_last
