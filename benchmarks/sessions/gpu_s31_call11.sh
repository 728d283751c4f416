#!/usr/bin/env bash
# Session 31 call 11 (H100; carry .whl and .gpu_out): `_wu_kernel` on 8 warps where V <= 16 (kernels/chunk.py
# `_wu_warps`; call 10: 2 or 8 warps right, 4 wrong). The forward against float64 at the failing shapes, then the
# forward's tests with V <= 16 and call 7's third failure (test_state_split_into_segments) on the GPU.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/sessions/debug_s31_forward_v16.py fixed 2>&1 | grep -v -i warn \
    | tee "$OUT/debug.txt"
timeout -s INT -k 10 $((330 - SECONDS)) python3 -m pytest tests/kernels/test_chunk.py -o addopts= -q \
    -p no:cacheprovider -rfE -k "safe_gate_logits_x2 or 2-2-128-16-vk or dense_two or state_split_into_segments" \
    2>&1 | grep -v "^\s*$" | tail -30 | tee "$OUT/pytest_chunk_gpu.txt"
