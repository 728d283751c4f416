#!/usr/bin/env bash
# Twenty-eighth session, call 7 (H100; carry .whl and .gpu_out): the final defaults (register caps on the sums and
# operands kernels, `_local_vk_kernel` on 32 x 32 tiles and 4 warps): the chunked mode's GPU tests (K and V of
# 128/128, 100/60, 256/64, small K), then accuracy against float64 on two shapes (fla not run: its numbers on the
# same seeded inputs are the twenty-sixth session's), then the remaining backward GPU tests as far as time goes.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 330 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/pytest_chunked_gpu.txt"
timeout -s INT -k 10 90 python3 benchmarks/bench_backward.py --no-speed --no-fla --accuracy \
    --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
timeout -s INT -k 10 $((585 - SECONDS)) python3 -m pytest tests/kernels/test_backward.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/pytest_backward_gpu.txt"
