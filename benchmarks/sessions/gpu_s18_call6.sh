#!/usr/bin/env bash
# Eighteenth session, sixth H100 call (issue 16): the anchored diagonal blocks' products in tf32x3 (the new
# default, diag_precision) against tf32 (call 4: the safe-gate shape's ddt_bias error doubled), two alternating
# rounds; the 2-stage pass now only where it fits (else 1 stage; call 4's GPU tests ran out of shared memory);
# the GPU tests; the safe-gate accuracy with tf32x3; ours and fla on 32 heads x 16384 (fla tuned there in call 2).
# Logs in $OUT.
source benchmarks/gpu_env.sh
timeout -s INT -k 15 150 python3 -m pytest tests/kernels/test_backward_chunked.py tests/kernels/test_autograd.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/tests.txt"
shapes=h32_dense_1x16384,h96_dense_1x8192_safe_l2,h32_varlen_real_65536
for round in 1 2; do
    for launch in diag_precision=tf32x3 diag_precision=tf32; do
        echo "== round $round $launch" | tee -a "$OUT/ab.txt"
        timeout -s INT -k 15 100 python3 benchmarks/bench_backward.py --no-fla $([ $round = 1 ] && echo --parts) \
            --shapes "$shapes" --launch "$launch" 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
    done
done
timeout -s INT -k 15 150 python3 benchmarks/bench_backward.py --no-fla --no-speed --accuracy \
    --accuracy-shapes h8_dense_1x2048_safe_l2,h32_dense_1x1024 2>&1 | tee "$OUT/accuracy.txt"
timeout -s INT -k 15 100 python3 benchmarks/bench_backward.py --shapes h32_dense_1x16384 2>&1 | tee "$OUT/vs_fla.txt"
