#!/usr/bin/env bash
# Twenty-sixth session, H100 (carry .whl and .gpu_out, with bb5d0bd's tree unpacked in .gpu_out/old_bb5), about
# 9 min: `_local_vk_kernel` (3a and 3b in one kernel per chunk and value head, from the pass's Vn and dVn, no
# partial copies) against bb5d0bd. (1) the backward's GPU tests; (2) two alternating rounds, new and old, on
# 32 x 16384 and K3 (fla not timed); (3) the new kernels' parts; (4) accuracy, new and old (fla beside them).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider --tb=short 2>&1 | grep -v -i warn | tail -25 | tee "$OUT/tests.txt"
timeout -s INT -k 10 200 python3 -m pytest tests/kernels/test_autograd.py -q -p no:cacheprovider --tb=short 2>&1 \
    | grep -v -i warn | tail -25 | tee -a "$OUT/tests.txt"
for round in 1 2; do
    for tree in benchmarks .gpu_out/old_bb5/benchmarks; do
        echo "== round $round $tree" | tee -a "$OUT/backward.txt"
        timeout -s INT -k 10 90 python3 $tree/bench_backward.py --no-fla \
            --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
echo "== parts (new)" | tee -a "$OUT/parts.txt"
timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-fla --parts --shapes h32_dense_1x16384 2>&1 \
    | grep -v -i warn | tail -40 | tee -a "$OUT/parts.txt"
for tree in benchmarks .gpu_out/old_bb5/benchmarks; do
    echo "== accuracy $tree" | tee -a "$OUT/accuracy.txt"
    timeout -s INT -k 10 $((585 - SECONDS)) python3 $tree/bench_backward.py --no-speed --accuracy \
        --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee -a "$OUT/accuracy.txt"
done
