#!/usr/bin/env bash
# Eighteenth session, first H100 call (issue 16): the backward's diagonal blocks on tensor cores at two anchors
# (LAUNCH["diag_blocks"] = "anchors", the new default) against the element-wise form, two alternating rounds (the
# first with per-kernel times), then the GPU tests of the chunked backward, then fla tuned on 32 heads x 16384.
# Logs in $OUT.
source benchmarks/gpu_env.sh
shapes=h32_dense_1x16384,h96_dense_1x8192_safe_l2,h32_varlen_real_65536
for round in 1 2; do
    for form in anchors elementwise; do
        echo "== round $round diag_blocks=$form" | tee -a "$OUT/ab.txt"
        timeout -s INT -k 15 150 python3 benchmarks/bench_backward.py --no-fla $([ $round = 1 ] && echo --parts) \
            --shapes "$shapes" --launch "diag_blocks=$form" 2>&1 | tee -a "$OUT/ab.txt"
    done
done
timeout -s INT -k 15 150 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q -p no:cacheprovider -rfEs \
    2>&1 | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 15 200 python3 benchmarks/bench_backward.py --fla-tune-each --shapes h32_dense_1x16384 2>&1 | tee "$OUT/vs_fla.txt"
