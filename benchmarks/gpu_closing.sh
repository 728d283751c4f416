#!/usr/bin/env bash
# Closing GPU call(s) for the chunked kernel (carry .whl, .whl_test, .gpu_out):
#     bash benchmarks/gpu_closing.sh UNTIL_S [FIRST]
# With FIRST=1: gpu_bench_chunk.sh's phases ours, tests, fla (the three headline shapes, at most 200 s) and
# accuracy. Then, in every call, `kda-trace run --name prefill --solution triton` on the non-stress prefill
# workloads into .gpu_out/prefill_final with --resume, stopped (SIGINT) UNTIL_S seconds after the start; the run
# comes back as $OUT/prefill_final.tar.gz (unpack it into .gpu_out/ and carry .gpu_out to the next call).
set -o pipefail
source benchmarks/gpu_env.sh
start=$(date +%s)
if [[ ${2:-0} == 1 ]]; then
    PHASES="ours tests fla accuracy" bash benchmarks/gpu_bench_chunk.sh 200 \
        h32_dense_1x16384,h96_dense_1x8192,h16_dense_2x16384
fi
left=$(($1 - ($(date +%s) - start)))
timeout -s INT -k 15 "$left" python3 -m kda_trace.cli run --op-type kda --name prefill --solution triton \
    --out .gpu_out/prefill_final --resume 2>&1 | tee -a "$OUT/prefill_log.txt"
echo "kda-trace run exit status $? after $(($(date +%s) - start)) s" | tee -a "$OUT/prefill_log.txt"
python3 -m kda_trace.cli report .gpu_out/prefill_final > "$OUT/prefill_report_log.txt" 2>&1
tar czf "$OUT/prefill_final.tar.gz" -C .gpu_out prefill_final
