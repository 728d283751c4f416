#!/usr/bin/env bash
# Twenty-first session (issue 15), H200 (needs_h200): the twentieth session's stress run goes on (run directory
# stress_s20b, carried in .gpu_out) with the judge's lower host-memory peak (one input set at a time) and the
# input checksums on the GPU. NAMES: the definitions (default: the dense K != V forward, whose stress workload
# killed the worker before, then the prefill ones); INVALID_REFERENCE records are evaluated again.
# $OUT/phases.tsv: every phase of every evaluation with the machine's available host memory (KDA_TRACE_PHASE_LOG).
source benchmarks/gpu_env.sh
export KDA_TRACE_PHASE_LOG=$OUT/phases.tsv
names=()
for n in ${NAMES:-kda_fwd_h32_dk128_dv256_v_last kda_prefill_h8_d128_k_last kda_prefill_h24_d128_k_last_safe_gate \
        kda_prefill_h32_d128_k_last kda_prefill_h48_d128_k_last_safe_gate kda_prefill_h64_d128_k_last_safe_gate \
        kda_prefill_h96_d128_k_last_safe_gate kda_prefill_h16_d128_k_last_safe_gate}; do names+=(--name "$n"); done
SOLUTIONS="triton fla" PHASE=calibrate RUN_NAME=stress_s20b bash benchmarks/gpu_verdicts.sh ${STRESS_S:-540} \
    --size stress-only --warmup 0 --reps 1 --max-reps 1 --timeout 400 --rerun INVALID_REFERENCE "${names[@]}"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/gpu_after.txt" 2>&1
free -g >> "$OUT/gpu_after.txt" 2>&1
