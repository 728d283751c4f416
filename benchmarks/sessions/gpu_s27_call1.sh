#!/usr/bin/env bash
# Twenty-seventh session, H100 (carry .whl and .gpu_out, with d6c7a00's tree unpacked in .gpu_out/old_d6c), about
# 9 min: `_local_k_kernel` folded into `_local_sums_kernel` (dq, dk, dg per 16-row block from the sums in
# registers; the three fp32 sum buffers gone) against d6c7a00. (1) two alternating rounds, new and old, on
# 32 x 16384 and K3 (fla not timed; the first process of each tree compiles); (2) the new kernels' parts;
# (3) accuracy against float64, new and old (fla not run); (4) the chunked mode's GPU tests, as far as time goes.
source benchmarks/gpu_env.sh
AB_TIMEOUT=170 bash benchmarks/ab_backward.sh h32_dense_1x16384,h96_dense_1x8192_safe_l2 2 "" tree:.gpu_out/old_d6c
echo "== parts (new)" | tee -a "$OUT/parts.txt"
timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-fla --parts --shapes h32_dense_1x16384 2>&1 \
    | grep -v -i warn | tail -30 | tee -a "$OUT/parts.txt"
for tree in benchmarks .gpu_out/old_d6c/benchmarks; do
    echo "== accuracy $tree" | tee -a "$OUT/accuracy.txt"
    timeout -s INT -k 10 90 python3 $tree/bench_backward.py --no-speed --no-fla --accuracy \
        --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee -a "$OUT/accuracy.txt"
done
timeout -s INT -k 10 $((580 - SECONDS)) python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu \
    -q -p no:cacheprovider --tb=short 2>&1 | grep -v -i warn | tail -25 | tee "$OUT/tests.txt"
