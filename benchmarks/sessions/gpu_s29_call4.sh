#!/usr/bin/env bash
# Twenty-ninth session, call 4 (H100; carry .whl and .gpu_out): "tf32_rn" (backward_blocks.`_tf32_rn`: fp32
# operands rounded to nearest tf32 before a tf32 product; the tensor cores truncate them, a bias toward zero) for
# the sums kernel's diagonal blocks (call 3: tf32 there took ddt_bias 1.70e-3 -> 4.49e-3, 2.3-2.7% faster), and
# for every tf32 product of the backward (chunked_precision, split_precision). Accuracy against float64, then two
# alternating rounds on K3 and 32 x 16384.
source benchmarks/gpu_env.sh
rn_all=sums_diag_precision=tf32_rn,split_precision=tf32_rn,chunked_precision=tf32_rn
for launch in sums_diag_precision=tf32_rn $rn_all; do
    timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-speed --no-fla --accuracy \
        --accuracy-shapes h32_dense_1x1024,h8_dense_1x2048_safe_l2 --launch $launch 2>&1 \
        | grep -v -i warn | grep -v Variable | sed "s/^/[$launch] /" | tee -a "$OUT/accuracy.txt"
done
AB_TIMEOUT=110 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" \
    sums_diag_precision=tf32_rn $rn_all
