#!/usr/bin/env bash
# Twenty-fifth session, H100 (carry .whl and .gpu_out with .gpu_out/old_bwd = `git archive 45891f3 kda_trace
# benchmarks/bench_backward.py` and .gpu_out/old_fwd = `git archive 7876e0b kda_trace benchmarks/bench_chunk.py`), at
# most 9.5 min. (1) GPU runs of the new CPU tests: the bf16 copies (now within 1e-5 on a GPU), the gradients written
# in the inputs' dtype, test_autograd.py whole (the kept matrices), test_chunk.py's kept matrices; (2) the local
# kernels writing dq, dk, dv in the inputs' dtype (current) against 45891f3 (fp32 buffers cast by torch), two rounds
# alternating; (3) the prefill (kernels/chunk.py gained the SAVE branches) against the session's start, 7876e0b, two
# rounds, ours only.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 120 python3 -m pytest tests/kernels/test_backward_chunked.py -k "copies or inputs_dtype" -q \
    -p no:cacheprovider --tb=short 2>&1 | grep -v -i warn | tail -15 | tee "$OUT/tests.txt"
timeout -s INT -k 10 330 python3 -m pytest tests/kernels/test_autograd.py -q -p no:cacheprovider --tb=short 2>&1 \
    | grep -v -i warn | tail -15 | tee -a "$OUT/tests.txt"
timeout -s INT -k 10 60 python3 -m pytest tests/kernels/test_chunk.py -k kept -q -p no:cacheprovider --tb=short 2>&1 \
    | grep -v -i warn | tail -15 | tee -a "$OUT/tests.txt"
for round in 1 2; do
    for tree in 45891f3 current; do
        echo "== round $round $tree" | tee -a "$OUT/backward.txt"
        script=benchmarks/bench_backward.py; [ "$tree" = current ] || script=.gpu_out/old_bwd/benchmarks/bench_backward.py
        timeout -s INT -k 10 100 python3 $script --no-fla --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 2>&1 \
            | grep -v -i warn | tee -a "$OUT/backward.txt"
    done
done
for round in 1 2; do
    for tree in 7876e0b current; do
        echo "== round $round $tree" | tee -a "$OUT/prefill.txt"
        script=benchmarks/bench_chunk.py; [ "$tree" = current ] || script=.gpu_out/old_fwd/benchmarks/bench_chunk.py
        timeout -s INT -k 10 $(( (570 - SECONDS) / 2 > 60 ? 60 : (570 - SECONDS) / 2 )) python3 $script --no-fla \
            --shapes h32_dense_1x16384,h96_dense_1x8192_safe_l2 2>&1 | grep -v -i warn | tee -a "$OUT/prefill.txt"
    done
done
