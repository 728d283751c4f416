#!/usr/bin/env bash
# Session 31 call 3 (H100; carry .whl and .gpu_out): LAUNCH["keep_states"] = "states" (the forward's fp32
# chunk-start states kept; the reverse-only pass computes Vn = U - W S from them, off its chain; 214 registers)
# beside "states_vn" (call 2's form: the forward's bf16 V_new kept too, which cost accuracy). Errors against
# float64 with fla's on the same inputs, then A/B on K3 and 32 x 16384 (two rounds), per-kernel times on K3.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 150 python3 benchmarks/bench_backward.py --no-speed --accuracy \
    --accuracy-shapes h8_dense_1x2048_safe_l2,h32_dense_1x1024 --launch keep_states=states 2>&1 \
    | grep -v -i warn | grep -v Variable | tee -a "$OUT/accuracy.txt"
AB_TIMEOUT=70 bash benchmarks/ab_backward.sh h96_dense_1x8192_safe_l2,h32_dense_1x16384 2 "" keep_states=states \
    keep_states=states_vn
timeout -s INT -k 10 60 python3 benchmarks/bench_backward.py --no-fla --parts --launch keep_states=states \
    --shapes h96_dense_1x8192_safe_l2 2>&1 | grep -v -i warn | tee -a "$OUT/parts.txt"
