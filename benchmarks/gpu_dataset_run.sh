#!/usr/bin/env bash
# The H100 dataset run (benchmarks/RESULTS.md, "H100 dataset run") in slices that end within the device tool's
# 600 s per command. On the GPU machine, from the repository root, with .whl, .whl_test and .gpu_out carried:
#     bash benchmarks/gpu_dataset_run.sh STOP_S [more kda-trace run arguments]
# runs triton, reference and fla (or $SOLUTIONS; $BASELINE names the --baseline) on every non-stress workload into .gpu_out/run (or $RUN_DIR) with --resume for at most
# STOP_S seconds (then SIGINT: finished records stay, the interrupted workload runs again next time),
# re-renders the report and packs .gpu_out (the run, and the autotuning results but not the compiled kernels)
# into $OUT/gpu_out.tar.gz. Unpack it into the checkout and carry .gpu_out to the next call.
set -o pipefail
source benchmarks/gpu_env.sh
run_dir=${RUN_DIR:-.gpu_out/run}
mkdir -p "$run_dir"
start=$(date +%s)
solutions=()
for s in ${SOLUTIONS:-triton reference fla}; do solutions+=(--solution "$s"); done
baseline=(${BASELINE:+--baseline "$BASELINE"})  # e.g. BASELINE=fla: speedups against fla in the reports
timeout -s INT -k 30 "$1" python3 -m kda_trace.cli run --op-type kda "${solutions[@]}" "${baseline[@]}" --timeout 400 \
    --out "$run_dir" --resume "${@:2}" 2>&1 | tee -a "$OUT/run_log.txt"
echo "kda-trace run exit status $? after $(($(date +%s) - start)) s" | tee -a "$OUT/run_log.txt"
python3 -m kda_trace.cli report "$run_dir" "${baseline[@]}" > "$OUT/report_log.txt" 2>&1
find .gpu_out/triton -type f ! -name '*.autotune.json' -delete
tar czf "$OUT/gpu_out.tar.gz" .gpu_out
