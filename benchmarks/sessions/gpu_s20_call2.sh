#!/usr/bin/env bash
# Twentieth session, second call (issue 15), H200 (needs_h200): call 1's stress run called honest triton and fla
# REWARD_HACK on the decode pools (the last repetition's snapshot copy inside the host clock's span) and ran fla
# out of memory (the pools' input sets kept on the GPU). With both fixed: the GPU tests of the two, then ours and
# fla on every stress workload again in a new run directory stress_s20b (resumable: call 3 goes on).
source benchmarks/gpu_env.sh
timeout 120 python3 -m pytest tests/runner/test_gpu.py -o addopts= -p no:cacheprovider -q -k "one_repetition or inputs_on_host" \
    2>&1 | tail -15 | tee "$OUT/pytest_gpu.txt"
SOLUTIONS="triton fla" PHASE=calibrate RUN_NAME=stress_s20b bash benchmarks/gpu_verdicts.sh ${STRESS_S:-420} \
    --size stress-only --warmup 0 --reps 1 --max-reps 1 --timeout 400
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/gpu_after.txt" 2>&1
