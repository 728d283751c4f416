#!/usr/bin/env bash
# Prepared in the twenty-second session for the next (issue 15), H100 (carry .whl and .gpu_out), about 10 min: every
# cheat fixture and planted defect with our triton and fla in one run per family, after the twentieth and
# twenty-first sessions' runner changes (inputs remade from seeds, per-repetition inputs kept off the GPU, the
# judge's order): only honest, triton and fla may pass, with times near triton's. A shard of each of the prefill
# h32, safe-gate prefill h12, decode h32 and mtp h32 definitions (`PHASE=cheats`: benchmarks/gpu_verdicts.sh).
NAMES="kda_prefill_h32_d128_k_last kda_prefill_h12_d128_k_last_safe_gate kda_decode_h32_d128_k_last kda_mtp_h32_d128_k_last" \
    PHASE=cheats RUN_NAME=cheats_s23 bash benchmarks/gpu_verdicts.sh 560 --shard 0/4
