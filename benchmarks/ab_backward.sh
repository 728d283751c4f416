#!/usr/bin/env bash
# Alternating A/B of the backward on a GPU: ROUNDS rounds, each running benchmarks/bench_backward.py once per
# variant, one process per line, fla not timed. A variant is a kernels/backward.py LAUNCH string ("key=value,...";
# "" for the defaults) or "tree:DIR", another tree's kernels (`git archive <commit> kda_trace
# benchmarks/bench_backward.py | tar x -C DIR`; its bench_backward.py imports its own package), optionally with
# a LAUNCH string of its own: "tree:DIR@key=value,...".
#
#     source benchmarks/gpu_env.sh            # in a device call's script (sets $OUT)
#     bash benchmarks/ab_backward.sh SHAPES ROUNDS VARIANT [VARIANT ...]
#
# e.g. `bash benchmarks/ab_backward.sh h32_dense_1x16384 2 "" split_vk_warps=4 tree:.gpu_out/old_x`. Appends to
# $OUT/ab.txt (./ab.txt without $OUT). AB_TIMEOUT: seconds per process (90; a fresh machine compiles every kernel).
# AB_ARGS: more bench_backward.py arguments for every line (e.g. --recompute).
set -u
if [ $# -lt 3 ]; then
    echo "usage: $0 SHAPES ROUNDS VARIANT [VARIANT ...]" >&2
    exit 2
fi
shapes=$1
rounds=$2
shift 2
for round in $(seq "$rounds"); do
    for variant in "$@"; do
        script=benchmarks/bench_backward.py
        launch=$variant
        if [[ $variant == tree:* ]]; then
            tree=${variant#tree:}
            script=${tree%%@*}/benchmarks/bench_backward.py
            launch=""
            if [[ $tree == *@* ]]; then
                launch=${tree#*@}
            fi
        fi
        echo "== round $round [$variant]"
        timeout -s INT -k 10 "${AB_TIMEOUT:-90}" python3 "$script" --no-fla --shapes "$shapes" --launch "$launch" ${AB_ARGS:-} 2>&1 \
            | grep -v -i warn
    done
done | tee -a "${OUT:-.}/ab.txt"
