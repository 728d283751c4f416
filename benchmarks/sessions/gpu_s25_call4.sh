#!/usr/bin/env bash
# Twenty-fifth session, H100 (carry .whl and .gpu_out), at most 9.5 min. kda_autograd now keeps the forward's chunk
# matrices (P, A_qk, X in fp32) and the backward skips its pairs and solve kernels (gamma moved to the operands
# kernel). (1) GPU tests: test_autograd.py (the kept matrices' test; the fp32 training test's dA_log bar),
# test_chunk.py's kept-matrices test, test_backward_chunked.py -m gpu; (2) kept against recomputed, two rounds
# alternating, 32 x 16384 and K3, accuracy in round 1; (3) ours (kept) and fla in one process.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_autograd.py -q -p no:cacheprovider --tb=short 2>&1 \
    | grep -v -i warn | tail -25 | tee "$OUT/tests.txt"
timeout -s INT -k 10 60 python3 -m pytest tests/kernels/test_chunk.py -k kept -q -p no:cacheprovider --tb=short 2>&1 \
    | grep -v -i warn | tail -25 | tee -a "$OUT/tests.txt"
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider --tb=short 2>&1 | grep -v -i warn | tail -25 | tee -a "$OUT/tests.txt"
for round in 1 2; do
    for flag in --recompute ""; do
        acc=(); [ "$round" = 1 ] && acc=(--accuracy --accuracy-shapes h32_dense_1x1024,h8_varlen_3,h8_dense_1x2048_safe_l2)
        echo "== round $round [$flag]" | tee -a "$OUT/backward.txt"
        timeout -s INT -k 10 100 python3 benchmarks/bench_backward.py --no-fla --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
            $flag "${acc[@]}" 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
echo "== ours and fla" | tee -a "$OUT/backward.txt"
timeout -s INT -k 10 $((570 - SECONDS)) python3 benchmarks/bench_backward.py --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
    2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
