#!/usr/bin/env bash
# Sixteenth session, second H100 call (issue 20): the split state pass's boundaries and intra_one_launch as
# defaults, then ours against fla tuned on each shape, then the GPU launch-variant test. Logs in $OUT.
source benchmarks/gpu_env.sh
python3 benchmarks/bench_chunk.py --no-speed --ab h8_dense_1x131072:state_split=128 --ab h8_dense_1x16384:state_split=64 \
    --ab h16_dense_1x65536:state_split=0 --ab h16_dense_1x65536:state_split=32 \
    --ab h8_dense_1x131072:intra_one_launch=False --ab h32_varlen_16x4096:intra_one_launch=False 2>&1 | tee "$OUT/ab.txt"
timeout -s INT -k 15 "${FLA_S:-240}" python3 benchmarks/bench_chunk.py --fla-tune-each \
    --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2,h32_varlen_16x4096,h96_dense_1x8192,h16_dense_2x16384,h8_dense_1x131072,h32_dense_1x4096,h16_dense_1x65536 \
    2>&1 | tee "$OUT/bench_chunk.txt"
python3 -m pytest tests/kernels/test_chunk.py -o addopts= -m gpu -q -p no:cacheprovider -rfEs -k "variants_on_gpu or matches_fla" 2>&1 | tail -15 | tee "$OUT/tests.txt"
