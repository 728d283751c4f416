#!/usr/bin/env bash
# One closing GPU call for the chunked kernel (carry .whl, .whl_test, .gpu_out):
#     bash benchmarks/gpu_final_kernels.sh RUN_S BENCH_S
# 1. `kda-trace run` with the triton solution on every non-stress prefill workload (at most RUN_S seconds),
#    into $OUT/prefill_triton.tar.gz; 2. bench_chunk.py against fla on the brief's shapes (at most BENCH_S s).
set -o pipefail
source benchmarks/gpu_env.sh
start=$(date +%s)
timeout -s INT -k 15 "$1" python3 -m kda_trace.cli run --op-type kda --name prefill --solution triton \
    --out prefill_triton 2>&1 | tee "$OUT/prefill_triton_log.txt"
echo "kda-trace run exit status $? after $(($(date +%s) - start)) s" | tee -a "$OUT/prefill_triton_log.txt"
python3 -m kda_trace.cli report prefill_triton > "$OUT/prefill_report_log.txt" 2>&1
tar czf "$OUT/prefill_triton.tar.gz" prefill_triton
timeout -s INT -k 15 "$2" python3 benchmarks/bench_chunk.py --out "$OUT" --shapes \
    h32_dense_1x16384,h32_dense_1x4096,h16_dense_2x16384,h32_varlen_16x4096,h32_varlen_8x2048,h96_dense_1x8192,h96_dense_1x8192_safe_l2,h32_varlen_1x16384_safe_l2,h64_dense_1x8192 \
    2>&1 | tee "$OUT/bench_chunk.txt"
