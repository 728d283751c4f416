#!/usr/bin/env bash
# Session 45 call 7 (H200; carry .whl and .gpu_out): three launch settings on K3 in the device time left: the gate
# kernel on 2 warps (8 lost, 0.973), the output kernel apart at 96 pairs (out_in_state=False; last timed on the H100 in
# the eighteenth session, 0.976 the other way round), the solve on 2 warps under its new cap.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h96_dense_1x8192_safe_l2:gate_warps=2 \
    --ab h96_dense_1x8192_safe_l2:out_in_state=False \
    --ab h96_dense_1x8192_safe_l2:solve_warps=2 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
