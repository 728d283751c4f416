#!/usr/bin/env bash
# The chunked kernel on the GPU machine (carry .whl, .whl_test, .gpu_out):
#     [PHASES="host ours ab fla_profile parts tests fla accuracy"] [SWEEP=shape] [AB="shape:key=value,... ..."]
#     [OLD_CHUNKS="a.py b.py"] bash benchmarks/gpu_bench_chunk.sh FLA_S [fla shapes]
# host: host (Python) cost per call of ours and fla on the host-bound shapes (bench_chunk.py --host);
# ours: ours alone on every shape, per-kernel times at 32 heads x 16384 tokens and 96 heads x 8192 (safe gate,
#       L2 norm), the launch-setting sweep on $SWEEP if set;
# ab: each $AB entry (shape:key=value,...) against the default launch settings, timed in alternation;
# fla_profile: fla's per-kernel times at 96 heads x 8192 with and without safe gate + L2 norm (fla tunes first);
# parts: bench_chunk_parts.py, with the older chunk.py files named in $OLD_CHUNKS (see its docstring);
# tests: the GPU tests of both kernels;
# fla: ours against fla on the brief's shapes, fla autotuned on each shape (--fla-tune-each), at most FLA_S s;
# accuracy: both against the fp32 reference (at most 150 s). Logs in $OUT.
set -o pipefail
source benchmarks/gpu_env.sh
phases=" ${PHASES:-ours parts tests fla accuracy} "
all=h32_dense_1x4096,h32_dense_1x16384,h32_varlen_16x4096,h32_varlen_8x2048,h16_dense_2x16384,h96_dense_1x8192,h96_dense_1x8192_safe_l2,h32_varlen_1x16384_safe_l2,h64_dense_1x8192,h24_dense_1x8192,h8_dense_1x16384,h32_varlen_real_8192
if [[ $phases == *" host "* ]]; then
    python3 benchmarks/bench_chunk.py --no-speed --host h32_dense_1x4096,h32_varlen_8x2048,h32_varlen_real_8192 2>&1 | tee "$OUT/host.txt"
fi
if [[ $phases == *" ours "* ]]; then
    python3 benchmarks/bench_chunk.py --no-fla --shapes "$all" --profile h32_dense_1x16384 2>&1 | tee "$OUT/ours_only.txt"
    python3 benchmarks/bench_chunk.py --no-speed --profile h96_dense_1x8192_safe_l2 ${SWEEP:+--sweep $SWEEP} 2>&1 | tee -a "$OUT/ours_only.txt"
fi
if [[ $phases == *" ab "* ]]; then
    ab_args=()
    for spec in ${AB:-}; do ab_args+=(--ab "$spec"); done
    python3 benchmarks/bench_chunk.py --no-speed "${ab_args[@]}" 2>&1 | tee "$OUT/ab.txt"
fi
if [[ $phases == *" fla_profile "* ]]; then
    python3 benchmarks/bench_chunk.py --no-speed --profile-fla h96_dense_1x8192_safe_l2 2>&1 | tee "$OUT/fla_profile.txt"
    python3 benchmarks/bench_chunk.py --no-speed --profile-fla h96_dense_1x8192 2>&1 | tee -a "$OUT/fla_profile.txt"
fi
if [[ $phases == *" parts "* ]]; then
    python3 benchmarks/bench_chunk_parts.py $OLD_CHUNKS 2>&1 | tee "$OUT/parts.txt"
fi
if [[ $phases == *" tests "* ]]; then
    python3 -m pytest tests/kernels -o addopts= -m gpu -q -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/pytest_kernels_gpu.txt"
fi
if [[ $phases == *" fla "* ]]; then
    fla_shapes=${2:-h32_dense_1x16384,h96_dense_1x8192,h16_dense_2x16384,h32_dense_1x4096,h32_varlen_16x4096,h32_varlen_8x2048,h96_dense_1x8192_safe_l2,h64_dense_1x8192,h24_dense_1x8192,h8_dense_1x16384,h32_varlen_1x16384_safe_l2}
    timeout -s INT -k 15 "$1" python3 benchmarks/bench_chunk.py --fla-tune-each --shapes "$fla_shapes" 2>&1 | tee "$OUT/bench_chunk.txt"
fi
if [[ $phases == *" accuracy "* ]]; then
    timeout -s INT -k 15 150 python3 benchmarks/bench_chunk.py --no-speed --accuracy 2>&1 | tee "$OUT/accuracy.txt"
fi
