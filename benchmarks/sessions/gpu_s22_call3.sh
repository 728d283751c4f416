#!/usr/bin/env bash
# Twenty-second session (issue 15), H200 (needs_h200; carry .whl and .gpu_out with .gpu_out/stress_s20b restored
# from benchmarks/results/2026-11-26-s22/stress_s22):
# 1. tests/runner/test_gpu.py's graph-timed decode test, whose expectation for the reference was fixed;
# 2. the last stress workload not reached (prefill h96 safe gate, c090c044) for ours and fla;
# 3. with the time left, ours (triton) again on the forward families' non-stress workloads with the current
#    kernels (their calibration records predate the fifteenth to seventeenth sessions' kernel changes), the
#    definitions with the smallest margins first, into a new run directory (calib_s22).
export PYTHONPATH=$PWD:/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
CHEATS_BASE=triton timeout -s INT -k 10 150 python3 -m pytest -q -p no:cacheprovider -o addopts= -m gpu -rfEs \
    tests/runner/test_gpu.py -k fla_decode 2>&1 | tail -8 | tee "$OUT/runner_gpu_tests.txt"
NAMES=kda_prefill_h96_d128_k_last_safe_gate STRESS_S=$((330 - SECONDS)) bash benchmarks/sessions/gpu_s21_call1.sh
names=()
for n in kda_prefill_h32_d128_k_last kda_prefill_h8_d128_k_last_chunk_states kda_fwd_qk16_v32_d128_v_last \
        kda_prefill_h8_d128_k_last kda_fwd_h32_d128_v_last kda_fwd_h32_dk128_dv256_v_last \
        kda_prefill_h96_d128_k_last_safe_gate kda_prefill_h64_d128_k_last_safe_gate \
        kda_prefill_h96_d128_k_last_safe_gate_chunk_states kda_prefill_h12_d128_k_last_safe_gate_chunk_states \
        kda_prefill_h48_d128_k_last_safe_gate kda_prefill_h24_d128_k_last_safe_gate \
        kda_prefill_h16_d128_k_last_safe_gate kda_prefill_h12_d128_k_last_safe_gate; do names+=(--name "$n"); done
left=$((575 - SECONDS))
[ "$left" -gt 60 ] && SOLUTIONS=triton PHASE=calibrate RUN_NAME=calib_s22 bash benchmarks/gpu_verdicts.sh "$left" \
    "${names[@]}"
# the device returns 8 files: the texts left in $OUT go back in one more archive
(cd "$OUT" && find . -maxdepth 1 -name "*.txt" | tar czf texts_end.tar.gz -T - --remove-files)
