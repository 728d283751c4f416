#!/usr/bin/env bash
# Nineteenth session, sixth call (issue 15), the same H200: the reference and fla on kda_bwd_varlen_h32's last
# workload (78bd6fb3, 65536 tokens in 12 sequences), the calibration's last gap. Run directory calib_s19.
SOLUTIONS="reference fla" PHASE=calibrate RUN_NAME=calib_s19 bash benchmarks/gpu_verdicts.sh 470 \
    --name kda_bwd_varlen_h32_d128_v_last --inputs-on-host --timeout 400 2>&1 | grep -v "^kda_bwd_\(fused\|h32\)"
