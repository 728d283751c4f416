#!/usr/bin/env bash
# Session 31 call 8 (H100; carry .whl and .gpu_out): the forward with fewer than 16 value columns padded to 16
# (kernels/chunk.py MIN_V): call 7's shapes and more value widths against float64; then the forward's test file on
# the GPU with the failures named (call 7 saw three F's before its time ran out).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/sessions/debug_s31_chunk_states.py more 2>&1 | grep -v -i warn \
    | tee "$OUT/debug.txt"
timeout -s INT -k 10 $((420 - SECONDS)) python3 -m pytest tests/kernels/test_chunk.py -o addopts= -q -x \
    -p no:cacheprovider -rfE 2>&1 | grep -v "^\s*$" | tail -40 | tee "$OUT/pytest_chunk_gpu.txt"
