#!/usr/bin/env bash
# The GPU and slow tiers of tests/references on the GPU machine (same carried paths as gpu_dataset_run.sh):
#     bash benchmarks/gpu_reference_tests.sh STOP_S MARK [pytest arguments, e.g. -n 4]
# stops pytest after STOP_S seconds (SIGINT: the tests that finished are reported); log in $OUT/pytest_MARK.txt.
set -o pipefail
source benchmarks/gpu_env.sh
start=$(date +%s)
timeout -s INT -k 30 "$1" python3 -m pytest tests/references -o addopts= -m "$2" -v -p no:cacheprovider \
    --durations=20 -rfEs "${@:3}" 2>&1 | tee "$OUT/pytest_$2.txt"
echo "pytest -m $2 exit status $? after $(($(date +%s) - start)) s" | tee -a "$OUT/pytest_$2.txt"
