#!/usr/bin/env bash
# Session 38 call 5 (H100; carry .whl and .gpu_out): gate_in_intra's part of the intra program: its loop over
# K-tiles unrolled (gate_unroll, the same bits) and 128-wide tiles (gate_bk=128: the gate kernel stays at 64);
# gate_in_intra on the two shapes with the gate computed in the op.
source benchmarks/gpu_env.sh
S=h32_dense_1x16384
timeout -s INT -k 10 420 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab $S:gate_unroll=True --ab $S:gate_bk=128 --ab $S:gate_bk=128,gate_unroll=True \
    --ab h32_varlen_16x4096:gate_unroll=True \
    --ab h96_dense_1x8192_safe_l2:gate_in_intra=True,gate_unroll=True \
    --ab h32_varlen_1x16384_safe_l2:gate_in_intra=True --ab h32_varlen_1x16384_safe_l2:gate_in_intra=True,gate_unroll=True \
    2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
