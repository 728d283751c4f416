#!/usr/bin/env bash
# Twenty-third session, sixth call (issue 15), H100 (carry .whl and .gpu_out), about 9.5 min: the host clock's
# tighter bound on what the CUDA events may miss (10% + 0.05 ms, was 2x + 0.03 ms). (1) The GPU tests of the runner
# (the new one: work behind a shorter sleep on the caller's stream). (2) One run of honest solutions (triton, the
# honest fixture, fla) beside the stream and timing cheats on decode h32, mtp h32 and prefill h32 (shard 0/4 each):
# no honest record may be called REWARD_HACK by the new bound, side_stream_when_timed must be, and the records'
# wall_ms give the honest ratios of host clock to events.
set -o pipefail
source benchmarks/gpu_env.sh
timeout -s INT -k 10 200 python3 -m pytest tests/runner/test_gpu.py -o addopts= -m gpu -q -p no:cacheprovider -rfEs \
    2>&1 | tail -8 | tee "$OUT/tests.txt"
CHEATS="honest side_stream side_stream_when_timed timing_aware wrong_unless_judged_whole off_by_percent_when_timed" \
EXTRA="fla" NAMES="kda_decode_h32_d128_k_last kda_mtp_h32_d128_k_last kda_prefill_h32_d128_k_last" PHASE=cheats \
RUN_NAME=cheats_s23_wall bash benchmarks/gpu_verdicts.sh $((570 - SECONDS)) --shard 0/4
rm -f "$OUT"/*_report_log.txt
