#!/usr/bin/env bash
# Session 45 call 4 (H200; carry .whl and .gpu_out): state_l2_ahead (new): the state pass asks L2 for the next
# chunk's tiles (W, k exp(G_last - G), U, and with O in the pass q exp(G), A_qk and G's last row; PTX
# prefetch.global.L2, one line per thread and tile) a step ahead. With O in the pass (K3, 96 x 8192, 16 x 4096 packed,
# 8 x 131072's segments) it runs with one stage: every step's loads wait on DRAM unpipelined.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 400 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h96_dense_1x8192_safe_l2:state_l2_ahead=True \
    --ab h96_dense_1x8192:state_l2_ahead=True \
    --ab h32_varlen_16x4096:state_l2_ahead=True \
    --ab h8_dense_1x131072:state_l2_ahead=True \
    --ab h32_dense_1x16384:state_l2_ahead=True \
    2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
