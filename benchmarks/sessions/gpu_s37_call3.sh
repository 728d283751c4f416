#!/usr/bin/env bash
# Session 37 call 3 (H100): the solve kernel (169 us of 2014 at 32 x 16384, call 2's timeline: 1 warp, 252 registers,
# so 8 warps per SM) with a register cap or more warps, on 32 x 16384 and K3.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:solve_maxnreg=128 --ab h32_dense_1x16384:solve_maxnreg=168 \
    --ab h32_dense_1x16384:solve_warps=2 --ab h32_dense_1x16384:solve_warps=4 \
    --ab h96_dense_1x8192_safe_l2:solve_maxnreg=128 --ab h96_dense_1x8192_safe_l2:solve_warps=2 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
for launch in solve_maxnreg=128 solve_warps=2; do
    timeout -s INT -k 10 60 python3 benchmarks/timeline_chunk.py h32_dense_1x16384 --launch $launch 2>&1 | grep -v -i warn | tee -a "$OUT/timeline.txt"
done
