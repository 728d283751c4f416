#!/usr/bin/env bash
# Our kernels on the GPU machine (same carried paths as gpu_dataset_run.sh: .whl, .whl_test, .gpu_out):
#     bash benchmarks/gpu_kernels.sh [bench_chunk.py shapes, comma-separated]
# the chunked kernel's speed table against fla (and its accuracy against an fp32 reference), then the GPU
# tests of both kernels. Logs in $OUT.
set -o pipefail
source benchmarks/gpu_env.sh
shapes=${1:-h32_dense_1x4096,h32_dense_1x16384,h32_varlen_8x2048,h32_varlen_16x4096,h32_varlen_1x16384_safe_l2,h96_dense_1x8192,h96_dense_1x8192_safe_l2,h64_dense_1x8192,h16_dense_2x16384,h24_dense_1x8192,h8_dense_1x16384}
python3 benchmarks/bench_chunk.py --shapes "$shapes" --accuracy --out "$OUT" 2>&1 | tee "$OUT/bench_chunk.txt"
python3 -m pytest tests/kernels -o addopts= -m gpu -v -p no:cacheprovider -rfEs 2>&1 | tee "$OUT/pytest_kernels_gpu.txt"
