#!/usr/bin/env bash
# Nineteenth session, third call (issue 15), H100: call 2's float64 check again (its log did not come back),
# written to $OUT/truth_rows_<workload>.txt and its dg_raw lines printed; then the rest of kda_bwd_varlen_h32 (calib_s19).
source benchmarks/gpu_env.sh
for wl in "3889c18e" "8cc092f8" "f116161e --seed 1162621451689319817"; do
    timeout -s INT -k 15 150 python3 benchmarks/row_truth.py --name kda_bwd_fused_h96_d128_v_last_safe_gate \
        --workload $wl > "$OUT/truth_rows_${wl%% *}.txt" 2>&1
    grep '"dg_raw"' "$OUT/truth_rows_${wl%% *}.txt" | cut -c1-260
done
left=$((570 - SECONDS))
SOLUTIONS="triton reference fla" PHASE=calibrate RUN_NAME=calib_s19 bash benchmarks/gpu_verdicts.sh $left \
    --name kda_bwd_varlen_h32_d128_v_last 2>&1 | grep -v "^kda_bwd_\(fused\|h32\)"
