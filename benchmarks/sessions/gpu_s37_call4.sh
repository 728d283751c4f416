#!/usr/bin/env bash
# Session 37 call 4 (H100): kg_in_intra (the intra kernel also writes the W/U kernel's operands beta k exp(G) and
# k exp(G_last - G), bf16, so the W/U kernel reads neither k nor the fp32 G) against the defaults on issue 20's six
# shapes; the timeline of one call on 32 x 16384 with it.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 60 python3 benchmarks/timeline_chunk.py h32_dense_1x16384 --launch kg_in_intra=True 2>&1 | grep -v -i warn | tee -a "$OUT/timeline.txt"
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:kg_in_intra=True --ab h96_dense_1x8192_safe_l2:kg_in_intra=True \
    --ab h16_dense_2x16384:kg_in_intra=True --ab h96_dense_1x8192:kg_in_intra=True \
    --ab h32_varlen_16x4096:kg_in_intra=True --ab h8_dense_1x131072:kg_in_intra=True 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
