#!/usr/bin/env bash
# Eighteenth session, fourth H100 call (issue 16): the new launch defaults (the pass's recursions in parallel
# programs, V-tiles of 32 with 2 stages up to 64 sequence-heads, 3a on 4 warps) against the settings before this
# session's call 3, two alternating rounds; the GPU tests; the safe-gate accuracy shape (ours and fla), cut in
# call 3. Logs in $OUT.
source benchmarks/gpu_env.sh
shapes=h32_dense_1x16384,h96_dense_1x8192_safe_l2,h32_varlen_real_65536
old=chunked_pass_parallel=False,chunked_pass_bv=16,chunked_pass_stages=1,split_v_warps=8
old96=chunked_pass_parallel=False,chunked_pass_bv=32,chunked_pass_stages=1,split_v_warps=8
for round in 1 2; do
    for launch in diag_blocks=anchors "$old"; do
        echo "== round $round $launch" | tee -a "$OUT/ab.txt"
        timeout -s INT -k 15 100 python3 benchmarks/bench_backward.py --no-fla $([ $round = 1 ] && echo --parts) \
            --shapes "$shapes" --launch "$launch" 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
    done
    echo "== round $round $old96" | tee -a "$OUT/ab.txt"
    timeout -s INT -k 15 60 python3 benchmarks/bench_backward.py --no-fla --shapes h96_dense_1x8192_safe_l2 \
        --launch "$old96" 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
done
timeout -s INT -k 15 150 python3 -m pytest tests/kernels/test_backward_chunked.py tests/kernels/test_autograd.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 15 200 python3 benchmarks/bench_backward.py --no-speed --accuracy --accuracy-shapes h8_dense_1x2048_safe_l2 \
    2>&1 | tee "$OUT/accuracy.txt"
