#!/usr/bin/env bash
# Twenty-third session, third call (issue 15), H100 (carry .whl and .gpu_out), about 9.5 min: the cheat table on
# prefill h32 (shard 0/4), which call 1 (benchmarks/sessions/gpu_s23_call2.sh) did not reach. content_cache left out: its cache grows by
# one output set per timed repetition (fresh inputs every repetition), ran the GPU out of memory on chunk-states
# h12's 8192 tokens in call 1, and its process's 75 GiB then kept the next solutions' processes from starting (fixed
# in the runner after this call). The backward bf16 call prepared for this slot moved to benchmarks/sessions/gpu_s24_call1.sh.
CHEATS="honest row_zeroed row_from_neighbour row_stale state_row_zeroed patches_timer patches_harness thread_fill
        side_stream returns_input_memory gc_scan caller_frames empty_like illegal_address forged_pass forges_trace_files
        timing_aware lazy_tensor lazy_when_timed pool_write_skipped_when_timed wrong_unless_judged_whole asks_seeds_ahead
        off_by_percent_when_timed tests/runner/redteam.py::keeps_l2_warm tests/runner/redteam.py::disables_stream_checks" \
NAMES="kda_prefill_h32_d128_k_last" PHASE=cheats RUN_NAME=cheats_s23_h32 bash benchmarks/gpu_verdicts.sh 560 --shard 0/4
