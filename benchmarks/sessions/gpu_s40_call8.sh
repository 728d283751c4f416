#!/usr/bin/env bash
# Session 40 call 8 (H200; carry .whl and .gpu_out): "tf32_rn" now rounds with backward_blocks' bit operations
# (`_tf32_rn`, moved to chunk.py, ties to even) instead of call 4's PTX cvt.rna.tf32: the tests of the solve's
# products on the GPU, then call 4's A/B again (the peeled solve with truncated tf32 operands against the default).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 100 python3 -m pytest -o addopts= -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "peeled_tf32_solve or tensor_cores or solve_in_tf32" 2>&1 | tail -20 | tee "$OUT/tests.txt"
T=solve_inv_precision=tf32,solve_merge_precision=tf32
timeout -s INT -k 10 150 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:$T --ab h96_dense_1x8192_safe_l2:$T 2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
