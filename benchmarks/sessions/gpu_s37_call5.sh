#!/usr/bin/env bash
# Session 37 call 5 (H100): kg_in_intra with the L2 pre-pass over k only (call 4: 0.977 on K3 with q and k), and
# kb_from_rows (beta k exp(G) from the intra kernel's k exp(G - G_c) rows: one ex2 per element less).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 60 python3 benchmarks/timeline_chunk.py h32_dense_1x16384 --launch kg_in_intra=True,kb_from_rows=True 2>&1 | grep -v -i warn | tee -a "$OUT/timeline.txt"
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h96_dense_1x8192_safe_l2:kg_in_intra=True --ab h96_dense_1x8192_safe_l2:kg_in_intra=True,kb_from_rows=True \
    --ab h32_dense_1x16384:kg_in_intra=True --ab h32_dense_1x16384:kg_in_intra=True,kb_from_rows=True \
    --ab h16_dense_2x16384:kg_in_intra=True,kb_from_rows=True 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
