#!/usr/bin/env bash
# Twenty-sixth session, H100 (carry .whl and .gpu_out), about 9 min, after call 3's fixes (the pass's float64
# compile, tf32 pass for fp32 inputs, `_local_vk_kernel` retried at one stage where its buffers do not fit):
# (1) the backward's GPU tests; (2) `_local_vk_kernel`'s pipeline stages (default, 2, 1), two alternating rounds on
# 32 x 16384 and K3; (3) accuracy with fla beside it.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider --tb=line 2>&1 | grep -v -i warn | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_autograd.py -q -p no:cacheprovider --tb=line 2>&1 \
    | grep -v -i warn | tail -15 | tee -a "$OUT/tests.txt"
for round in 1 2; do
    for launch in "" split_vk_stages=2 split_vk_stages=1; do
        echo "== round $round [$launch]" | tee -a "$OUT/backward.txt"
        timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-fla --launch "$launch" \
            --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
timeout -s INT -k 10 120 python3 benchmarks/bench_backward.py --no-speed --accuracy \
    --accuracy-shapes h32_dense_1x1024,h8_varlen_3,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
