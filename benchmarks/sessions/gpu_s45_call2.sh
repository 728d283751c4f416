#!/usr/bin/env bash
# Session 45 call 2 (H200; carry .whl and .gpu_out): gate_in_wu (new: the W/U kernel computes its chunk's G from the
# gate input g, bf16, instead of reading the fp32 G; with gate_in_intra then no kernel after the intra kernel reads G
# but its last rows, so discard_g drops G from L2 and kernel 1 is not launched). K3: the W/U kernel at 72% of DRAM
# peak (call 1), reading G (32 of its 120 KB per chunk and head). And the solve under a register cap of 168 (196
# registers: 8 warps per SM, call 1).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h96_dense_1x8192_safe_l2:gate_in_intra=True,gate_in_wu=True \
    --ab h96_dense_1x8192_safe_l2:gate_in_wu=True \
    --ab h96_dense_1x8192_safe_l2:gate_in_intra=True \
    --ab h32_varlen_1x16384_safe_l2:gate_in_intra=True,gate_in_wu=True \
    --ab h96_dense_1x8192_safe_l2:solve_maxnreg=168 \
    --ab h32_dense_1x16384:solve_maxnreg=168 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
