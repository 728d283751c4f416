#!/usr/bin/env bash
# Session 45 call 6 (H200; carry .whl and .gpu_out): call 5 timed fla at 2.344 ms on 32 x 16384 (1.964 in the
# forty-fourth session's call 5) with autotuning results from earlier shapes; the two 32-pair shapes again with fla
# tuned on each shape (--fla-tune-each). Then the backward's GPU tests that the forty-fourth session's call 9 did not
# reach (the forward with the kept chunk matrices: state_prefetch on in its state pass; the solve's cap is not
# applied there).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 230 python3 benchmarks/bench_chunk.py --fla-tune-each --shapes h32_dense_1x16384,h16_dense_2x16384 \
    2>&1 | grep -v -i warn | tee "$OUT/chunk.txt"
timeout -s INT -k 10 330 python3 -m pytest \
    "tests/kernels/test_backward.py::test_bf16_training_step_matches_fla_on_gpu" \
    "tests/kernels/test_backward_chunked.py::test_chunked_mode_on_gpu[128-128-launch0]" \
    "tests/kernels/test_backward_chunked.py::test_chunked_mode_on_gpu[128-128-launch3]" \
    -o addopts= -m gpu -v -p no:cacheprovider -rfEs --durations=5 --tb=short > "$OUT/tests.txt" 2>&1
tail -25 "$OUT/tests.txt"
