#!/usr/bin/env bash
# Nineteenth session, first call (issue 15), H100: fla's backward at 96 heads. Its first evaluation autotunes
# every kernel for 96 heads (more than 9 minutes in the thirteenth session), so the phase limit is raised; the
# tuned configs (keyed on heads and dims, not tokens) come back in calib_s19.tar.gz for the H200 call, which needs
# the H200 only for the reference on the 65536-token workload. fla's records go into the calib_s19 run directory.
SOLUTIONS=fla PHASE=calibrate RUN_NAME=calib_s19 bash benchmarks/gpu_verdicts.sh 560 \
    --name kda_bwd_fused_h96_d128_v_last_safe_gate --timeout 590
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/gpu_after.txt" 2>&1
