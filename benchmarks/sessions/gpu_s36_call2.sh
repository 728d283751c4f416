#!/usr/bin/env bash
# Session 36 call 2 (H100; carry .whl and .gpu_out with fla's autotuning results): b69d018 (the training forward
# without the A_kk scratch and the bf16 X): the kept tests of the chunk kernel and the autograd kept-states test
# on the GPU; accuracy against float64 on two shapes; then K3 against fla 0.6.0 in one process, twice.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 120 python3 -m pytest -o addopts= -m '' -q -p no:cacheprovider tests/kernels/test_chunk.py \
    -k "kept" 2>&1 | grep -E "^E |Error|passed|failed" | head -20 | tee "$OUT/tests_chunk.txt"
timeout -s INT -k 10 100 python3 -m pytest -o addopts= -m '' -q -p no:cacheprovider \
    tests/kernels/test_autograd.py -k kept_states 2>&1 | grep -E "^E |Error|passed|failed" | head -20 \
    | tee "$OUT/tests_autograd.txt"
timeout -s INT -k 10 150 python3 benchmarks/bench_backward.py --accuracy --no-speed --no-fla \
    --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
for round in 1 2; do
    echo "== round $round"
    timeout -s INT -k 10 150 python3 benchmarks/bench_backward.py --shapes h96_dense_1x8192_safe_l2 2>&1 \
        | grep -v -i warn
done | tee "$OUT/fla.txt"
