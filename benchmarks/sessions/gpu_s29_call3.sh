#!/usr/bin/env bash
# Twenty-ninth session, call 3 (H100; carry .whl and .gpu_out): the sums kernel's anchored diagonal blocks in tf32
# or bf16 instead of tf32x3 (three tf32 products each; LAUNCH["sums_diag_precision"]). The eighteenth session kept
# tf32x3 for ddt_bias (2.64e-3 -> 5.03e-3 with tf32, fla 5.35e-3); since then ours went to 1.70e-3. Accuracy
# against float64 with each (fla's numbers on the same seeded inputs: the twenty-third session's), then two
# alternating rounds on K3 and 32 x 16384.
source benchmarks/gpu_env.sh
for p in tf32 bf16; do
    timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-speed --no-fla --accuracy \
        --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 --launch sums_diag_precision=$p 2>&1 \
        | grep -v -i warn | grep -v Variable | sed "s/^/[$p] /" | tee -a "$OUT/accuracy.txt"
done
AB_TIMEOUT=110 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" \
    sums_diag_precision=tf32 sums_diag_precision=bf16
