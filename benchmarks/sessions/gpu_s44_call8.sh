#!/usr/bin/env bash
# Session 44 call 8 (H200; carry .whl and .gpu_out): K3 with the W/U operands written by the intra kernel
# (kg_in_intra=True: there it first takes a pass over k for the norm factors; the W/U kernel then reads neither k
# nor the fp32 G, and discard_g turns on), under the intra cap (ptxas, Triton 3.9: 164 bytes of spills against 100)
# and uncapped (8 bytes). Last timed on the H100 (0.993, thirty-seventh session), before the intra cap and one anchor.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h96_dense_1x8192_safe_l2:kg_in_intra=True --ab h96_dense_1x8192_safe_l2:kg_in_intra=True,intra_maxnreg=0 \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
