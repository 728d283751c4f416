#!/usr/bin/env bash
# Session 38 call 1 (H100; carry .whl and .gpu_out): probes for #20 at 32 (sequence, head) pairs.
# (1) the state pass and the output kernel stepping by 64 or 128 tokens (benchmarks/probe_state_steps.py);
# (2) the output inside the state pass on narrow V-tiles (out_in_state with state_bv 16 / 32) against the defaults.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/probe_state_steps.py 2>&1 | grep -v -i warn | tee -a "$OUT/probe.txt"
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:out_in_state=True,state_bv=16 \
    --ab h32_dense_1x16384:out_in_state=True,state_bv=32,state_stages=2 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
