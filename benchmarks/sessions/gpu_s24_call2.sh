#!/usr/bin/env bash
# For the twenty-fourth session (issue 15's calibration with the current forward kernels), an H200 or H100 (carry
# .whl and .gpu_out), a resumable slice of about 9.5 min: our `triton` on the prefill definitions' non-stress
# workloads (the chunk-states ones come with their prefill names: --name matches substrings), resuming the
# twenty-second session's run directory .gpu_out/calib_s22 (48 of 204 forward workloads re-run there, all PASSED;
# if it is missing, unpack benchmarks/results/2026-11-26-s22/call3's archive first). Repeat the call until the
# records cover them; `benchmarks/row_margins.py .gpu_out/calib_s22` prints the margins.
names=()
for h in h8_d128_k_last h12_d128_k_last_safe_gate h16 h24 h32 h48 h64 h96; do names+=(--name "kda_prefill_$h"); done
SOLUTIONS=triton PHASE=calibrate RUN_NAME=calib_s22 bash benchmarks/gpu_verdicts.sh 560 "${names[@]}"
