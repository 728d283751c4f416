#!/usr/bin/env bash
# Twenty-fifth session, H100 (carry .whl and .gpu_out), about 3 min: with the pass reading bf16 copies of W and Kt
# (less shared memory per stage), two pipeline stages at 96 (sequence, head) pairs too? K3, default (one stage there)
# against chunked_pass_stages=2, two rounds alternating.
source benchmarks/gpu_env.sh
for round in 1 2; do
    for launch in "" chunked_pass_stages=2; do
        echo "== round $round [$launch]" | tee -a "$OUT/backward.txt"
        timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-fla --shapes h96_dense_1x8192_safe_l2 \
            --launch "$launch" 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
