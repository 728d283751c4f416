#!/usr/bin/env bash
# Nineteenth session, second call (issue 15), H100. (1) fla failed the per-row bound on dg_raw in three of
# kda_bwd_fused_h96's workloads (call 1): who is off? The reference, ours and fla against float64
# (benchmarks/row_truth.py) on those inputs (runner's seed A; f116161e failed on its set-B seed, from the log).
# (2) With the rest of the call: our backward (this session's code) on the 32-head backward definitions, and the
# reference and fla where they are missing (calib_s19 run directory).
source benchmarks/gpu_env.sh
for wl in "3889c18e" "8cc092f8" "f116161e --seed 1162621451689319817"; do
    timeout -s INT -k 15 150 python3 benchmarks/row_truth.py --name kda_bwd_fused_h96_d128_v_last_safe_gate \
        --workload $wl 2>&1 | tee -a "$OUT/row_truth.txt" | grep '"dg_raw"'
done
left=$((560 - SECONDS))
SOLUTIONS="triton reference fla" PHASE=calibrate RUN_NAME=calib_s19 bash benchmarks/gpu_verdicts.sh $left \
    --name kda_bwd_h32_d128_v_last --name kda_bwd_varlen_h32_d128_v_last --name kda_bwd_fused_h32_d128_v_last
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/gpu_after.txt" 2>&1
