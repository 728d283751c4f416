#!/usr/bin/env bash
# Session 36 call 3 (H100; carry .whl and .gpu_out with fla's autotuning results): the kept P, A_qk and X
# written on and below their diagonal blocks only (the backward reads the lower triangles), this tree, against
# b69d018 (.gpu_out/base): K3 and 32 x 16384 in two alternating rounds; the kept-matrices tests on the GPU
# (the autograd one with NaN-filled memory above the diagonal blocks); then ours against fla 0.6.0 in one process
# on the three target shapes.
source benchmarks/gpu_env.sh
AB_TIMEOUT=100 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" tree:.gpu_out/base
timeout -s INT -k 10 100 python3 -m pytest -o addopts= -m '' -q -p no:cacheprovider tests/kernels/test_chunk.py \
    tests/kernels/test_autograd.py -k "kept_chunk_matrices" 2>&1 | grep -E "^E |Error|passed|failed" | head -20 \
    | tee "$OUT/tests.txt"
timeout -s INT -k 10 240 python3 benchmarks/bench_backward.py 2>&1 | grep -v -i warn | tee "$OUT/fla.txt"
