#!/usr/bin/env bash
# Twenty-fifth session, H100 (carry .whl and .gpu_out), about 6 min: (1) the two CPU tests that call 6 found with
# interpreter-only bars, now with GPU bars (the gradients in the inputs' dtype; kept against recomputed matrices);
# (2) ours (all of the session's defaults) and fla in one process, 32 x 16384, K3 and the packed 65536-token batch.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 120 python3 -m pytest tests/kernels/test_backward_chunked.py -k "inputs_dtype" -q \
    -p no:cacheprovider --tb=short 2>&1 | grep -v -i warn | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_autograd.py -k kept -q -p no:cacheprovider --tb=short \
    2>&1 | grep -v -i warn | tail -15 | tee -a "$OUT/tests.txt"
echo "== ours and fla" | tee -a "$OUT/backward.txt"
timeout -s INT -k 10 $((570 - SECONDS)) python3 benchmarks/bench_backward.py \
    --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2,h32_varlen_real_65536 2>&1 | grep -v -i warn | tee -a "$OUT/backward.txt"
