#!/usr/bin/env bash
# Session 37 call 1 (H100; carry .whl and .gpu_out): the pipelined prefill (launch setting pipeline_parts: kernels
# 1-4 part by part on the caller's stream, each part's state pass and output on a side stream beside the next
# part's kernels 1-4) against the defaults, on issue 20's 32-pair shapes first, then K3 and the 96- and 512-pair ones.
source benchmarks/gpu_env.sh
ab() { timeout -s INT -k 10 "$1" python3 benchmarks/bench_chunk.py --no-speed --no-fla "${@:2}" 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"; }
ab 240 --ab h32_dense_1x16384:pipeline_parts=4 --ab h32_dense_1x16384:pipeline_parts=4,pipeline_priority=-1 \
    --ab h32_dense_1x16384:pipeline_parts=2 --ab h32_dense_1x16384:pipeline_parts=8,pipeline_priority=-1
ab 150 --ab h16_dense_2x16384:pipeline_parts=4,pipeline_priority=-1 --ab h96_dense_1x8192_safe_l2:pipeline_parts=4,pipeline_priority=-1
ab 150 --ab h96_dense_1x8192:pipeline_parts=4,pipeline_priority=-1 --ab h32_varlen_16x4096:pipeline_parts=4,pipeline_priority=-1 \
    --ab h8_dense_1x131072:pipeline_parts=4,pipeline_priority=-1,state_split=0
