#!/usr/bin/env bash
# Session 31 call 7 (H100; carry .whl and .gpu_out): is the forward (kernels/chunk.py) right on the GPU at K = 20,
# V = 12 (call 6)? benchmarks/sessions/debug_s31_chunk_states.py, then the forward's test file on the GPU.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/sessions/debug_s31_chunk_states.py 2>&1 | grep -v -i warn \
    | tee "$OUT/debug.txt"
timeout -s INT -k 10 $((480 - SECONDS)) python3 -m pytest tests/kernels/test_chunk.py -o addopts= -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/pytest_chunk_gpu.txt"
