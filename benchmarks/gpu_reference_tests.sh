#!/usr/bin/env bash
# The GPU and slow tiers of tests/references on the GPU machine (.whl, .whl_test and .gpu_out carried):
#     [WARM=EXPR WARM_S=S] bash benchmarks/gpu_reference_tests.sh STOP_S MARK [pytest arguments, e.g. -n 4]
# With WARM, the tier's tests matching `-k EXPR` first run in one process for at most WARM_S seconds, so that
# fla's first-use autotuning times its configurations on an otherwise idle GPU (the kept choices are reused by
# later benchmark runs); log in $OUT/pytest_MARK_warm.txt. Then the whole tier runs with the pytest arguments
# (the warmed tests again, now quick); log in $OUT/pytest_MARK.txt. pytest is stopped with SIGINT STOP_S seconds
# after the start (the tests that finished are reported).
set -o pipefail
source benchmarks/gpu_env.sh
start=$(date +%s)
mark=$2

tier() {  # LOG_NAME SECONDS [pytest arguments]
    local log="$OUT/$1.txt"
    echo "pytest -m $mark ${*:3} (stop after $2 s)" | tee "$log"
    timeout -s INT -k 30 "$2" python3 -m pytest tests/references -o addopts= -m "$mark" -v -p no:cacheprovider \
        --durations=25 -rfEs "${@:3}" 2>&1 | tee -a "$log"
    echo "pytest -m $mark exit status $? after $(($(date +%s) - start)) s" | tee -a "$log"
}

if [ -n "$WARM" ]; then
    tier "pytest_${mark}_warm" "${WARM_S:-300}" -k "$WARM"
fi
left=$(($1 - ($(date +%s) - start)))
if [ "$left" -gt 10 ]; then
    tier "pytest_$mark" "$left" "${@:3}"
else
    echo "no time left for the whole tier" | tee "$OUT/pytest_$mark.txt"
fi
