#!/usr/bin/env bash
# Prepared in the twenty-second session for the next (issues 20 and 16), H100 (carry .whl and .gpu_out), about 9 min:
# 1. the GPU tests of the two untimed variants: out_overlap (now releasing every overlap_every chunks) and the
#    backward pass on bf16 operands (the chunked mode's GPU tests with it);
# 2. out_overlap A/B at 32 and 16 pairs (8 and 32 chunks per release), against the defaults;
# 3. the backward with chunked_pass_precision=bf16 against the default (tf32), two rounds, speed at 32 heads x
#    16384 and K3, and every gradient's accuracy against float64 on the safe-gate shape (fla's beside it).
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_chunk.py -o addopts= -m gpu -q -p no:cacheprovider \
    -rfEs -k "overlap_on_gpu" 2>&1 | tail -5 | tee "$OUT/tests.txt"
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --ab h32_dense_1x16384:out_overlap=True \
    --ab h32_dense_1x16384:out_overlap=True,overlap_every=32 --ab h16_dense_2x16384:out_overlap=True 2>&1 \
    | tee "$OUT/ab_chunk.txt"
for round in 1 2; do
    for launch in chunked_pass_precision=tf32 chunked_pass_precision=bf16; do
        echo "== round $round $launch" | tee -a "$OUT/backward.txt"
        timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-fla --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
            --launch "$launch" $([ "$round" = 1 ] && echo "--accuracy --accuracy-shapes h8_dense_1x2048_safe_l2") 2>&1 \
            | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
