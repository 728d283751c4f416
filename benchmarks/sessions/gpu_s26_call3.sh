#!/usr/bin/env bash
# Twenty-sixth session, H100 (carry .whl and .gpu_out), about 3 min: call 2's GPU test failures one at a time with
# CUDA_LAUNCH_BLOCKING=1 (an illegal address poisons the rest of a process), the first failure's whole traceback.
source benchmarks/gpu_env.sh
export CUDA_LAUNCH_BLOCKING=1
for sel in "test_chunked_mode_on_gpu and 100-60" "test_small_k_on_gpu and 12" "test_small_k_on_gpu and 32"; do
    echo "== $sel" | tee -a "$OUT/tests.txt"
    timeout -s INT -k 10 60 python3 -m pytest tests/kernels/test_backward_chunked.py -o addopts= -m gpu -q -x \
        -k "$sel" -p no:cacheprovider --tb=long 2>&1 | grep -v -i warn | grep -v "^    " | tail -40 | tee -a "$OUT/tests.txt"
done
echo "== autograd first" | tee -a "$OUT/tests.txt"
timeout -s INT -k 10 60 python3 -m pytest tests/kernels/test_autograd.py -q -x -p no:cacheprovider --tb=short \
    -k test_gradcheck_dense_gva_float64 2>&1 | grep -v -i warn | tail -40 | tee -a "$OUT/tests.txt"
