#!/usr/bin/env bash
# Twenty-eighth session, call 4 (H100; carry .whl and .gpu_out): per-kernel GPU time of one backward (torch.profiler,
# bench_backward.py --parts), ours with the new register caps and fla 0.6.0, on K3 (96 heads x 8192, safe gate, L2
# norm and gate in the kernel: 1.25x fla's fwd+bwd in call 3, the shape furthest behind) and on 32 x 16384.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 560 python3 benchmarks/bench_backward.py --parts --shapes h96_dense_1x8192_safe_l2,h32_dense_1x16384 \
    2>&1 | grep -v -i warn | tee "$OUT/parts.txt"
