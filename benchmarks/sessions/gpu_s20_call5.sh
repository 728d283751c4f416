#!/usr/bin/env bash
# Twentieth session, fifth call (issue 15), H100: the cheat fixtures again after this session's timing change (the
# last repetition's snapshot copy no longer counts in the host clock's span), on decode h32 and prefill h32, a
# third of their workloads (--shard 0/3) to fit one call. Run directory .gpu_out/cheats_s20.
source benchmarks/gpu_env.sh
NAMES="kda_decode_h32_d128_k_last kda_prefill_h32_d128_k_last" PHASE=cheats RUN_NAME=cheats_s20 \
    bash benchmarks/gpu_verdicts.sh 520 --shard 0/3
