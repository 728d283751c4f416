#!/usr/bin/env bash
# Twenty-fifth session, H100 (carry .whl and .gpu_out), at most 9.5 min. (1) The pass reading bf16 copies of W and Kt
# (chunked_pass_bf16_copies, new default): its CPU test on the GPU (bit-identical gradients); (2) A/B, two rounds
# alternating, 32 x 16384 and K3: copies on (default), off, and 3a with 128-wide V-tiles (one partial copy instead
# of two) on 8 warps; (3) the default's per-kernel times at 32 x 16384.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 100 python3 -m pytest tests/kernels/test_backward_chunked.py -k copies -q -p no:cacheprovider \
    --tb=short 2>&1 | grep -v -i warn | tail -20 | tee "$OUT/tests.txt"
for round in 1 2; do
    for launch in "" chunked_pass_bf16_copies=False split_bv=128,split_v_warps=8; do
        echo "== round $round [$launch]" | tee -a "$OUT/backward.txt"
        timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-fla --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
            --launch "$launch" 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
echo "== parts" | tee -a "$OUT/backward.txt"
timeout -s INT -k 10 $((570 - SECONDS)) python3 benchmarks/bench_backward.py --no-fla --parts --shapes h32_dense_1x16384 \
    2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
