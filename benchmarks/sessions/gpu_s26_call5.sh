#!/usr/bin/env bash
# Twenty-sixth session, H100 (carry .whl and .gpu_out), about 9 min: (1) the GPU tests call 4 ran out of time for
# (a fresh machine compiles every kernel): test_small_k_on_gpu, test_autograd.py's kept-matrices tests; (2) ours
# (the session's defaults) and fla in one process on 32 x 16384 and K3; (3) accuracy on the safe-gate shape.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q -k small_k \
    -p no:cacheprovider --tb=line 2>&1 | grep -v -i warn | tail -8 | tee "$OUT/tests.txt"
timeout -s INT -k 10 120 python3 -m pytest tests/kernels/test_autograd.py -q -p no:cacheprovider --tb=line \
    -k "kept_chunk_matrices or kept_only" 2>&1 | grep -v -i warn | tail -8 | tee -a "$OUT/tests.txt"
echo "== ours and fla" | tee -a "$OUT/fla.txt"
timeout -s INT -k 10 210 python3 benchmarks/bench_backward.py --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
    2>&1 | grep -v -i warn | tee -a "$OUT/fla.txt"
timeout -s INT -k 10 90 python3 benchmarks/bench_backward.py --no-speed --accuracy \
    --accuracy-shapes h8_dense_1x2048_safe_l2 2>&1 | grep -v -i warn | tee "$OUT/accuracy.txt"
