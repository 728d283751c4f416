#!/usr/bin/env bash
# Eighteenth session, seventh H100 call: (issue 16) which of the two anchored kernels' tf32 diagonal products cost
# the safe-gate shape's ddt_bias accuracy in call 4: tf32x3 in one of them, tf32 in the other; (issue 20) the
# forward state pass on 32-wide V-tiles (state_bv=32) A/B on the shapes with the output in the pass. Logs in $OUT.
source benchmarks/gpu_env.sh
for launch in pairs_diag_precision=tf32x3,sums_diag_precision=tf32 pairs_diag_precision=tf32,sums_diag_precision=tf32x3; do
    echo "== $launch" | tee -a "$OUT/accuracy.txt"
    timeout -s INT -k 15 90 python3 benchmarks/bench_backward.py --no-fla --no-speed --accuracy \
        --accuracy-shapes h8_dense_1x2048_safe_l2 --launch "$launch" 2>&1 | grep -v -i warn | tee -a "$OUT/accuracy.txt"
done
timeout -s INT -k 15 200 python3 benchmarks/bench_chunk.py --no-speed --ab h96_dense_1x8192_safe_l2:state_bv=32 \
    --ab h96_dense_1x8192:state_bv=32 --ab h64_dense_1x8192:state_bv=32 2>&1 | tee "$OUT/ab_chunk.txt"
