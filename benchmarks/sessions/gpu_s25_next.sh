#!/usr/bin/env bash
# Queued at the end of the twenty-fifth session (its device time ran out), H100 (carry .whl and .gpu_out), about
# 9 min: the session's last defaults on the GPU. (1) The backward's GPU tests: test_backward_chunked.py -m gpu,
# test_autograd.py whole (the kept matrices only where some input requires grad), test_chunk.py's kept matrices;
# (2) ours (two pass stages at every head count) and fla in one process on 32 x 16384, K3 and the packed batch.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider --tb=short 2>&1 | grep -v -i warn | tail -25 | tee "$OUT/tests.txt"
timeout -s INT -k 10 300 python3 -m pytest tests/kernels/test_autograd.py -q -p no:cacheprovider --tb=short 2>&1 \
    | grep -v -i warn | tail -25 | tee -a "$OUT/tests.txt"
timeout -s INT -k 10 60 python3 -m pytest tests/kernels/test_chunk.py -k kept -q -p no:cacheprovider --tb=short 2>&1 \
    | grep -v -i warn | tail -15 | tee -a "$OUT/tests.txt"
echo "== ours and fla" | tee -a "$OUT/backward.txt"
timeout -s INT -k 10 $((570 - SECONDS)) python3 benchmarks/bench_backward.py \
    --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2,h32_varlen_real_65536 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
