#!/usr/bin/env bash
# Twenty-sixth session, H100 (carry .whl and .gpu_out), about 5 min, the last of the session's device time:
# `_local_vk_kernel`'s K-tiles of 64 as the default (call 7's winner): the chunked mode's GPU tests at real sizes
# (K = 128, 100, 256) and its accuracy against float64 (fla not run: its compile does not fit the time left).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -k chunked_mode_on_gpu -p no:cacheprovider --tb=line 2>&1 | grep -v -i warn | tail -8 | tee "$OUT/tests.txt"
timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-speed --no-fla --accuracy \
    --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
