#!/usr/bin/env bash
# Session 38 call 4 (H100; carry .whl and .gpu_out): gate_in_intra (kernel 2's program computes its chunk's G first,
# kernel 1 not launched) against the defaults on issue 20's six shapes, and with 32-wide gate tiles.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 420 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:gate_in_intra=True --ab h96_dense_1x8192_safe_l2:gate_in_intra=True \
    --ab h32_varlen_16x4096:gate_in_intra=True --ab h96_dense_1x8192:gate_in_intra=True \
    --ab h16_dense_2x16384:gate_in_intra=True --ab h8_dense_1x131072:gate_in_intra=True \
    --ab h32_dense_1x16384:gate_in_intra=True,gate_bk=32 --ab h96_dense_1x8192_safe_l2:gate_in_intra=True,gate_bk=32 \
    2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
