#!/usr/bin/env bash
# Twenty-fourth session (issues 16 and 20), H100 (carry .whl and .gpu_out), about 8 min: where the time goes, ours
# and fla's, kernel by kernel (torch.profiler). The backward at 32 heads x 16384 and K3 (96 x 8192, safe gate + L2 +
# beta logits): bench_backward.py --parts (fwd+bwd and bwd medians too, fla with its on-disk tuning); the forward
# (prefill) at 32 x 16384 and K3: bench_chunk.py --profile / --profile-fla.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 300 python3 benchmarks/bench_backward.py --parts --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 \
    2>&1 | grep -v -i warn | tee "$OUT/backward_parts.txt"
for shape in h32_dense_1x16384 h96_dense_1x8192_safe_l2; do
    timeout -s INT -k 10 100 python3 benchmarks/bench_chunk.py --no-speed --profile "$shape" --profile-fla "$shape" \
        2>&1 | grep -v -i warn | tee -a "$OUT/chunk_profile.txt"
done
