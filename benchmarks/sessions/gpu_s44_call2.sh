#!/usr/bin/env bash
# Session 44 call 2 (H200; carry .whl and .gpu_out): experiment intra_tma (uncommitted working tree; its diff is kept
# beside the records): the one-launch intra kernel's row loads by Hopper tensor descriptors (TMA: 3-D host
# descriptors over [rows, heads, K], blocks of 16/32/64 rows x BK) instead of masked pointer loads; 1: q and k, 2: also
# G (with an async-proxy fence after the gate prologue, which writes G). The A/B's "o max abs" says whether the bits
# match the defaults' (they should: the same values loaded).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:intra_tma=1 --ab h32_dense_1x16384:intra_tma=2 \
    --ab h96_dense_1x8192_safe_l2:intra_tma=1 --ab h96_dense_1x8192_safe_l2:intra_tma=2 \
    --ab h16_dense_2x16384:intra_tma=2 --ab h32_varlen_16x4096:intra_tma=2 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
