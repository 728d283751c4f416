#!/usr/bin/env bash
# Session 34 call 7 (H100; carry .whl and .gpu_out): the forward's L2-norm factors kept for the backward and the
# kept chunk matrices' zeros written by the kernels (no fill) against cd26b69 (.gpu_out/base34: keep_states the
# default, neither change), K3 and 32 x 16384, two alternating rounds; the tests of both on the GPU.
source benchmarks/gpu_env.sh
AB_TIMEOUT=120 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 tree:.gpu_out/base34 ""
timeout -s INT -k 10 200 python3 -m pytest -o addopts= -m '' -q -p no:cacheprovider -rfEs \
    tests/kernels/test_chunk.py::test_kept_chunk_matrices_against_float64 tests/kernels/test_autograd.py -k "kept or qk_norm" \
    2>&1 | tail -6 | tee "$OUT/tests.txt"
