#!/usr/bin/env bash
# Twenty-fifth session, H100 (carry .whl and .gpu_out), about 5 min: call 9 found two pass stages faster at 96
# (sequence, head) pairs (K3) with the bf16 copies; at 1952 pairs too? The packed 65536-token batch (61 sequences x
# 32 heads), default (one stage there) against chunked_pass_stages=2, two rounds alternating.
source benchmarks/gpu_env.sh
for round in 1 2; do
    for launch in "" chunked_pass_stages=2; do
        echo "== round $round [$launch]" | tee -a "$OUT/backward.txt"
        timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-fla --shapes h32_varlen_real_65536 \
            --launch "$launch" 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
