#!/usr/bin/env bash
# Twenty-fourth session, H100 (carry .whl and .gpu_out), about 2 min: the exact mode by default at K <= 16 on a GPU
# (call 12: the chunked mode is wrong there): test_small_k_on_gpu, then test_autograd.py whole.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -k small_k -q \
    -p no:cacheprovider --tb=line 2>&1 | grep -v -i warn | tail -8 | tee "$OUT/tests.txt"
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_autograd.py -q -p no:cacheprovider --tb=line 2>&1 \
    | grep -v -i warn | tail -8 | tee -a "$OUT/tests.txt"
