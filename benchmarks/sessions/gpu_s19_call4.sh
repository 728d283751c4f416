#!/usr/bin/env bash
# Nineteenth session, fourth call (issue 15), H200 (needs_h200: the reference on 88cbb0e1 does not fit 80 GB):
# kda_bwd_fused_h96 with dg_raw's per-row bound 0.5 (tools/build_kda_dataset.py, TOL_DG_RAW_SAFE): ours (this
# session's code) on all 8 workloads, fla again where it failed, the reference and fla on 88cbb0e1; then the rest of
# kda_bwd_varlen_h32 (the reference and fla on 78bd6fb3) while time is left. Run directory calib_s19.
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
SOLUTIONS="triton reference fla" PHASE=calibrate RUN_NAME=calib_s19 bash benchmarks/gpu_verdicts.sh 565 \
    --name kda_bwd_fused_h96_d128_v_last_safe_gate --name kda_bwd_varlen_h32_d128_v_last \
    --rerun INCORRECT_NUMERICAL --rerun INVALID_REFERENCE --timeout 500 2>&1 | grep -v "^kda_bwd_\(fused_h32\|h32\)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/gpu_after.txt" 2>&1
