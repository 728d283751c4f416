#!/usr/bin/env bash
# Session 36 call 8 (H100; carry .whl and .gpu_out with fla's autotuning results): the bf16 training step against
# fla's chunk_kda on the GPU, in both backward modes (never finished before: fla's first-use tuning).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 400 python3 -m pytest -o addopts= -m gpu -q -p no:cacheprovider --tb=short -rfEs \
    tests/kernels/test_backward.py -k bf16_training_step 2>&1 | tail -30 | tee "$OUT/tests.txt"
