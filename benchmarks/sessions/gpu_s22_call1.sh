#!/usr/bin/env bash
# Prepared in the twenty-first session for the next (issue 15), on an H200 (needs_h200; carry .whl and .gpu_out):
# the runner changes made after that session's device time, on a GPU.
# 1. tests/runner/test_gpu.py (inputs kept off the GPU give the same verdicts as kept ones, among others);
# 2. the decode stress pool (8.7 GB, kept off the GPU) with several timed repetitions: each now runs on inputs of
#    its own and a drawn one is digest-checked, so pool_write_skipped_when_timed must be REWARD_HACK and honest
#    triton PASSED (before 2edd6b3 that fixture would have passed here);
# 3. what time is left: the stress run of benchmarks/sessions/gpu_s21_call1.sh (the 3 prefill workloads it did not reach).
source benchmarks/gpu_env.sh
export CHEATS_BASE=triton
python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu tests/runner/test_gpu.py > "$OUT/runner_gpu_tests.txt" 2>&1
tail -5 "$OUT/runner_gpu_tests.txt"
KDA_TRACE_PHASE_LOG=$OUT/phases_reps.tsv timeout -s INT -k 30 240 python3 -m kda_trace.cli run \
    --name kda_decode_h32_d128_k_last --size stress-only --reps 3 --max-reps 10 --timeout 200 \
    --solution triton --solution tests/runner/cheats.py::pool_write_skipped_when_timed \
    --solution tests/runner/cheats.py::honest --out .gpu_out/stress_reps_s22 2>&1 | tail -30 | tee "$OUT/stress_reps_log.txt"
tar czf "$OUT/stress_reps_s22.tar.gz" .gpu_out/stress_reps_s22
# the device returns 8 files: this part's texts go back in one archive (the nested script packs its own)
(cd "$OUT" && tar czf s22_part1.tar.gz runner_gpu_tests.txt stress_reps_log.txt phases_reps.tsv --remove-files)
left=$((560 - SECONDS))
[ "$left" -gt 200 ] && NAMES=${NAMES:-kda_prefill_h64_d128_k_last_safe_gate} STRESS_S=$left bash benchmarks/sessions/gpu_s21_call1.sh
