#!/usr/bin/env bash
# Twenty-fourth session (issue 16), H100 (carry .whl and .gpu_out), about 8 min: the training path's new defaults
# (the options inside the forward kernel, their backward by kernels/option_grads.py, the pass in bf16 but Qt^T dO),
# ours only: speed with per-kernel times at 32 heads x 16384, K3 and 65536 packed tokens, every gradient against
# float64 on the three accuracy shapes; then the GPU tests of the backward, the options' gradients and autograd.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 330 python3 benchmarks/bench_backward.py --no-fla --parts --accuracy \
    --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2,h32_varlen_real_65536 2>&1 | grep -v -i warn | tee "$OUT/backward.txt"
timeout -s INT -k 10 $((575 - SECONDS)) python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -5 | tee "$OUT/tests.txt"
timeout -s INT -k 10 $((585 - SECONDS)) python3 -m pytest tests/kernels/test_option_grads.py tests/kernels/test_autograd.py -q \
    -p no:cacheprovider -rfEs 2>&1 | tail -5 | tee -a "$OUT/tests.txt"
