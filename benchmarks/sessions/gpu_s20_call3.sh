#!/usr/bin/env bash
# Twentieth session, third and later calls (issue 15), H200 (needs_h200): call 2's stress run goes on
# (run directory stress_s20b, carried back in .gpu_out). NAMES=kda_prefill: only those definitions (call 4: the
# 35 GB kda_fwd_h32_dk128_dv256 stress workload killed the worker, out of the 128 GB host memory, in call 3).
source benchmarks/gpu_env.sh
SOLUTIONS="triton fla" PHASE=calibrate RUN_NAME=stress_s20b bash benchmarks/gpu_verdicts.sh ${STRESS_S:-540} \
    --size stress-only --warmup 0 --reps 1 --max-reps 1 --timeout 400 ${NAMES:+--name $NAMES}
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/gpu_after.txt" 2>&1
