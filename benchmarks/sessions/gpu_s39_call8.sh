#!/usr/bin/env bash
# Session 39 call 8 (H100, call 6's machine; carry .whl and .gpu_out with fla's autotuning results): the two 32-pair
# shapes against fla with intra_stream on (the default from the next commit).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 140 python3 benchmarks/bench_chunk.py --launch intra_stream=True \
    --shapes h16_dense_2x16384,h32_dense_1x16384 2>&1 | grep -v -i warn | tee "$OUT/chunk.txt"
