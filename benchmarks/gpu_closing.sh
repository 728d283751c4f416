#!/usr/bin/env bash
# A closing GPU call (carry .whl, .whl_test, .gpu_out): some gpu_bench_chunk.sh phases, then a resumable
# `kda-trace run` slice, all within UNTIL_S seconds:
#     [PHASES="tests accuracy"] [FLA_S=200] [SEED_RUN=benchmarks/results/2026-11-22-h100/run_s4] [RUN_DIR=.gpu_out/run_s4] \
#     [SOLUTIONS="triton reference fla"] bash benchmarks/gpu_closing.sh UNTIL_S [kda-trace run arguments]
# PHASES (default none) and FLA_S are passed to gpu_bench_chunk.sh. When RUN_DIR has no traces yet and SEED_RUN
# names a checked-in run, its traces are copied in first, so --resume finishes that run instead of starting over.
# The rest is gpu_dataset_run.sh (SOLUTIONS, RUN_DIR; the run comes back in $OUT/gpu_out.tar.gz). Example, the
# evaluations the fourth session did not reach:
#     PHASES="tests accuracy" SEED_RUN=benchmarks/results/2026-11-22-h100/run_s4 RUN_DIR=.gpu_out/run_s4 \
#         bash benchmarks/gpu_closing.sh 560 --name kda_prefill_h96 --max-reps 30
set -o pipefail
start=$(date +%s)
if [[ -n ${PHASES:-} ]]; then
    PHASES=$PHASES bash benchmarks/gpu_bench_chunk.sh "${FLA_S:-200}"
fi
export RUN_DIR=${RUN_DIR:-.gpu_out/run}
if [[ ! -d $RUN_DIR/traces && -n ${SEED_RUN:-} ]]; then
    mkdir -p "$RUN_DIR" && cp -r "$SEED_RUN/traces" "$RUN_DIR/"
fi
bash benchmarks/gpu_dataset_run.sh $(($1 - ($(date +%s) - start))) "${@:2}"
