#!/usr/bin/env bash
# The chunked kernel on the GPU machine (carry .whl, .whl_test, .gpu_out):
#     bash benchmarks/gpu_bench_chunk.sh FLA_S [shapes]
# 1. ours alone on every shape, and our per-kernel times at 32 heads x 16384 tokens (no fla: it autotunes for
#    minutes per new shape); 2. the GPU tests of both kernels; 3. ours against fla in one run (at most FLA_S s).
set -o pipefail
source benchmarks/gpu_env.sh
shapes=${2:-h32_dense_1x4096,h32_dense_1x16384,h32_varlen_16x4096,h32_varlen_8x2048,h16_dense_2x16384,h96_dense_1x8192,h96_dense_1x8192_safe_l2,h32_varlen_1x16384_safe_l2,h64_dense_1x8192,h24_dense_1x8192,h8_dense_1x16384,h32_varlen_real_8192}
python3 benchmarks/bench_chunk.py --no-fla --shapes "$shapes" --profile h32_dense_1x16384 2>&1 | tee "$OUT/ours_only.txt"
python3 -m pytest tests/kernels -o addopts= -m gpu -q -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/pytest_kernels_gpu.txt"
timeout -s INT -k 15 "$1" python3 benchmarks/bench_chunk.py --shapes "$shapes" 2>&1 | tee "$OUT/bench_chunk.txt"
