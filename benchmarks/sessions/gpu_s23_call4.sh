#!/usr/bin/env bash
# Twenty-third session, fourth call (issue 15), H100 (carry .whl and .gpu_out), about 9.5 min, after this session's
# runner fixes: (1) prefill h32 shard 0/4 again with the side-stream fixture (it PASSED the 260-token workload in
# call 3; the sixth session's explanation: the wrapped solution reads cu_seqlens on the host mid-call, which releases
# the held-back call's gate; a second possible one, now closed: freed output blocks holding the first call's results
# reused by the held-back call's outputs) and content_cache (left out of call 3: its cache filled the GPU); (2) every fixture on
# chunk-states h12 shard 0/4, where call 1 failed them with KeyError 'num_chunks' (a fixture bug) and with processes
# that could not start (content_cache's process held 75 GiB: now stopped after it fails out of memory, and a process
# that cannot start says why, so the runner stops the others and tries again).
set -o pipefail
CHEATS="honest side_stream content_cache" NAMES="kda_prefill_h32_d128_k_last" PHASE=cheats RUN_NAME=cheats_s23_h32_fix \
    bash benchmarks/gpu_verdicts.sh 210 --shard 0/4
NAMES="kda_prefill_h12_d128_k_last_safe_gate_chunk_states" PHASE=cheats RUN_NAME=cheats_s23_cs \
    bash benchmarks/gpu_verdicts.sh $((570 - SECONDS)) --shard 0/4
rm -f "$OUT"/*_report_log.txt  # the device returns at most 8 files
