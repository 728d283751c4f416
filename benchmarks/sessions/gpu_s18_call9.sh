#!/usr/bin/env bash
# Eighteenth session, ninth H100 call (issue 16): call 7 again, right this time (in calls 7 and 8 the sums kernel
# read pairs_diag_precision, so call 7's two settings were "both tf32x3" and "both tf32"): the safe-gate accuracy
# and the speed with tf32x3 in only one of the two anchored kernels. Logs in $OUT.
source benchmarks/gpu_env.sh
for launch in pairs_diag_precision=tf32x3,sums_diag_precision=tf32 pairs_diag_precision=tf32,sums_diag_precision=tf32x3; do
    echo "== $launch" | tee -a "$OUT/run.txt"
    timeout -s INT -k 15 100 python3 benchmarks/bench_backward.py --no-fla --accuracy --accuracy-shapes h8_dense_1x2048_safe_l2 \
        --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 --launch "$launch" 2>&1 | grep -v -i warn | tee -a "$OUT/run.txt"
done
