#!/usr/bin/env bash
# Twentieth session, first call (issue 15), H200 (needs_h200): fla on kda_bwd_varlen_h32's last workload
# (78bd6fb3, 65536 tokens in 12 sequences; run directory calib_s19, where the nineteenth session's budget ended
# during it), then ours and fla on the stress workloads under the per-row bound (run directory stress_s20,
# resumable: the next calls go on with the same command). One repetition each: a stress input set lives in host
# memory and every repetition copies it.
SOLUTIONS=fla PHASE=calibrate RUN_NAME=calib_s19 bash benchmarks/gpu_verdicts.sh 240 \
    --name kda_bwd_varlen_h32_d128_v_last --inputs-on-host --timeout 220 2>&1 | grep -v "^kda_bwd_\(fused\|h32\)"
SOLUTIONS="triton fla" PHASE=calibrate RUN_NAME=stress_s20 bash benchmarks/gpu_verdicts.sh ${STRESS_S:-300} \
    --size stress-only --warmup 0 --reps 1 --max-reps 1 --timeout 280
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/gpu_after.txt" 2>&1
if [ "$(find "$OUT" -type f | wc -l)" -gt 8 ]; then
    (cd "$OUT" && find . -name "*.txt" | tar czf texts.tar.gz -T - --remove-files)
fi
