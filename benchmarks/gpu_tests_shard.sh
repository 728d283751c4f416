#!/usr/bin/env bash
# One shard of a full GPU pass over the kernel tests (every test, not only the `gpu`-marked ones: the forward's
# CPU-tier tests found a GPU-only bug in the thirty-first session), sized for one device call:
#
#     source benchmarks/gpu_env.sh            # in a device call's script (sets $OUT)
#     bash benchmarks/gpu_tests_shard.sh SHARD SHARDS [PATHS...]   # SHARD in 0..SHARDS-1; PATHS: tests/kernels
#
# Test ids are collected in pytest's order and dealt round-robin (id i goes to shard i % SHARDS), so each shard
# gets a mix of files and shapes. Results: $OUT/tests_shard_SHARD_of_SHARDS.txt (pytest's summary with every
# failure). TESTS_TIMEOUT: seconds for the shard (540). Triton's cache under .gpu_out/triton (gpu_env.sh) keeps
# the compiled kernels for the next call while the machine is warm.
# Expected failures: the backward's CPU-tier tests that call test_backward.py's `check` at its interpreter bar
# (RMS-relative 1e-5 for fp32 inputs) fail on a GPU, whose tf32 and bf16 products give about 1e-3 (H100,
# thirty-third session: the chunked mode's comparison tests, e.g. test_sums_in_one_launch[k_tiles]); read those
# failures' numbers, not their count. Their float64 cases hold 1e-12 on a GPU since the scale fix of that session.
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 SHARD SHARDS [PATHS...]" >&2
    exit 2
fi
shard=$1
shards=$2
shift 2
paths=("$@")
[ $# -eq 0 ] && paths=(tests/kernels)
ids=$(python3 -m pytest "${paths[@]}" -o addopts= -m "" --collect-only -q -p no:cacheprovider 2>/dev/null \
    | grep "::" | awk -v s="$shard" -v n="$shards" '(NR - 1) % n == s')
echo "$(echo "$ids" | grep -c "::") tests in shard $shard of $shards" | tee "${OUT:-.}/tests_shard_${shard}_of_${shards}.txt"
# shellcheck disable=SC2086
timeout -s INT -k 10 "${TESTS_TIMEOUT:-540}" python3 -m pytest $ids -o addopts= -m "" -q -p no:cacheprovider -rfEs \
    2>&1 | tail -40 | tee -a "${OUT:-.}/tests_shard_${shard}_of_${shards}.txt"
