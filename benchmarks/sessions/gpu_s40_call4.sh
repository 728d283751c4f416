#!/usr/bin/env bash
# Session 40 call 4 (H200; carry .whl and .gpu_out): the solve's products as "tf32_rn" (operands rounded to the
# nearest tf32 first, as the tensor cores truncate: call 3) with the peeled solve, the candidate default: A/B against
# the peeled solve with truncated tf32 operands on 32 x 16384 and K3; accuracy against float64 (the old tf32x3 solve
# beside it) at 8 x 4096 and 4 x 16384; the GPU tests of the solve and of the chunked forward.
source benchmarks/gpu_env.sh
T=solve_inv_precision=tf32,solve_merge_precision=tf32
timeout -s INT -k 10 150 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:$T --ab h96_dense_1x8192_safe_l2:$T 2>&1 | grep -v -i warn | tee "$OUT/ab.txt"
OLD=solve_peel=False,solve_inv_precision=tf32x3,solve_merge_precision=tf32x3
timeout -s INT -k 10 60 python3 benchmarks/solve_precision_probe.py $OLD 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
timeout -s INT -k 10 100 python3 benchmarks/solve_precision_probe.py --heads 4 --tokens 16384 $OLD 2>&1 | grep -v -i warn | tee -a "$OUT/accuracy.txt"
timeout -s INT -k 10 90 python3 -m pytest -o addopts= -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "peeled or tensor_cores or solve_in_tf32" 2>&1 | tail -20 | tee "$OUT/tests.txt"
timeout -s INT -k 10 180 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_chunk.py -k "matches_fla or launch_variants" 2>&1 | tail -15 | tee -a "$OUT/tests.txt"
