#!/usr/bin/env bash
# The backward kernel on the GPU machine (carry .whl, .whl_test, .gpu_out like gpu_bench_chunk.sh):
#     [PHASES="tests ours sweep fla accuracy"] bash benchmarks/gpu_bench_backward.sh [FLA_S]
# tests: the GPU tests of the gate, backward (exact and chunked modes) and autograd modules (the int64 stress test
#     with -m stress, separately);
# ours: ours alone (fwd+bwd, bwd; the default chunked mode) on the issue's shapes, with the GPU time of each backward kernel;
# sweep: the exact mode's local reverse V-tile, warps, scratch segment and programs, the chunk maps' and pass's
#     tiles, at 32 heads x 16384 tokens;
# fla: ours against fla's chunk_kda, fla autotuned on each shape, at most FLA_S s (default 900);
# accuracy: every gradient of ours and fla against float64 autograd;
# chunked: the chunked mode (the default, kernels/backward_chunked.py) beside the exact mode, speed with --parts:
#     chunked (split local kernels, tf32 products), exact, and chunked with every product tf32x3;
# chunked_accuracy: every gradient of the chunked mode against float64 (tf32, then tf32x3 products); "accuracy"
#     gives fla's and the default mode's. CHUNKED_LAUNCHES / ACCURACY_LAUNCHES override the LAUNCH settings of the two;
#     TESTS overrides the test files. Logs in $OUT.
set -o pipefail
fla_s=${1:-900}
source benchmarks/gpu_env.sh
phases=" ${PHASES:-tests ours fla accuracy} "
shapes=h32_dense_1x16384,h32_varlen_real_65536,h96_dense_1x8192_safe_l2
if [[ $phases == *" tests "* ]]; then
    python3 -m pytest ${TESTS:-tests/kernels/test_backward.py tests/kernels/test_backward_chunked.py tests/kernels/test_autograd.py \
        tests/kernels/test_gate.py} \
        -o addopts= -m gpu -q -p no:cacheprovider -rfEs 2>&1 | tail -15 | tee "$OUT/pytest_backward_gpu.txt"
fi
if [[ $phases == *" ours "* ]]; then
    python3 benchmarks/bench_backward.py --no-fla --parts --shapes "$shapes" 2>&1 | tee "$OUT/bwd_ours.txt"
fi
if [[ $phases == *" sweep "* ]]; then
    for cfg in "16 4 16 programs=0" "16 8 16 programs=0" "32 8 16 programs=0" "16 4 64 programs=0" \
               "16 4 16 programs=4096" "16 4 16 programs=528" "16 4 16 map_bx=32" "16 4 16 pass_bv=32" \
               "16 4 16 pass_rows=32"; do
        read -r bv warps seg launch <<< "$cfg"
        python3 benchmarks/bench_backward.py --no-fla --shapes h32_dense_1x16384 --bv "$bv" --warps "$warps" --seg "$seg" \
            --launch "mode=exact,$launch" 2>&1 | tee -a "$OUT/bwd_sweep.txt"
    done
fi
if [[ $phases == *" chunked "* ]]; then
    for launch in ${CHUNKED_LAUNCHES:-mode=chunked mode=exact \
                  mode=chunked,chunked_precision=tf32x3,chunked_pass_precision=tf32x3,split_precision=tf32x3}; do
        echo "== LAUNCH $launch" | tee -a "$OUT/bwd_chunked.txt"
        python3 benchmarks/bench_backward.py --no-fla --parts --shapes "$shapes" --launch "$launch" 2>&1 \
            | tee -a "$OUT/bwd_chunked.txt"
    done
fi
if [[ $phases == *" chunked_accuracy "* ]]; then
    for launch in ${ACCURACY_LAUNCHES:-mode=chunked mode=chunked,chunked_precision=tf32x3,chunked_pass_precision=tf32x3,split_precision=tf32x3}; do
        echo "== LAUNCH $launch" | tee -a "$OUT/bwd_chunked_accuracy.txt"
        timeout -s INT -k 15 280 python3 benchmarks/bench_backward.py --no-fla --no-speed --accuracy \
            --launch "$launch" 2>&1 | tee -a "$OUT/bwd_chunked_accuracy.txt"
    done
fi
if [[ $phases == *" fla "* ]]; then
    timeout -s INT -k 15 "$fla_s" python3 benchmarks/bench_backward.py --fla-tune-each --shapes "$shapes" 2>&1 \
        | tee "$OUT/bwd_vs_fla.txt"
fi
if [[ $phases == *" accuracy "* ]]; then
    timeout -s INT -k 15 600 python3 benchmarks/bench_backward.py --no-speed --accuracy 2>&1 | tee "$OUT/bwd_accuracy.txt"
fi
