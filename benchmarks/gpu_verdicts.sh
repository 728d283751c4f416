#!/usr/bin/env bash
# Issue 15 on the GPU machine (repository root, .whl carried; .gpu_out carried to resume): the cheat table and
# the per-row calibration, each a resumable `kda-trace run` slice of at most STOP_S seconds.
#     PHASE=cheats bash benchmarks/gpu_verdicts.sh STOP_S      # tests/runner/cheats.py on our triton kernels
#     PHASE=calibrate bash benchmarks/gpu_verdicts.sh STOP_S [--shard I/N]   # triton, reference, fla: every non-stress workload
#     PHASE=stress bash benchmarks/gpu_verdicts.sh STOP_S      # one wrong row on the stress workloads (H200)
# The run directory (.gpu_out/<phase>) comes back packed in $OUT/<phase>.tar.gz; unpack it into the checkout
# and carry .gpu_out to resume. benchmarks/row_margins.py reads the calibration records.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.gpu_out/triton CHEATS_BASE=triton
mkdir -p "$TRITON_CACHE_DIR"
{
    date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
    git log -1 --format='commit %H' 2>/dev/null
} > "$OUT/env_${PHASE}.txt" 2>&1
stop=$1; shift
run_dir=.gpu_out/${RUN_NAME:-$PHASE}  # RUN_NAME: a second run directory in one call
# CHEATS overrides the fixtures: names in tests/runner/cheats.py, or FILE.py::NAME (the red team's in redteam.py)
cheats=(${CHEATS:-honest row_zeroed row_from_neighbour row_stale state_row_zeroed patches_timer patches_harness thread_fill
        side_stream side_stream_when_timed returns_input_memory gc_scan caller_frames empty_like illegal_address forged_pass forges_trace_files
        timing_aware lazy_tensor lazy_when_timed pool_write_skipped_when_timed wrong_unless_judged_whole asks_seeds_ahead
        off_by_percent_when_timed
        content_cache tests/runner/redteam.py::keeps_l2_warm tests/runner/redteam.py::disables_stream_checks})
# content_cache is expected to pass with its own time (its cache never hits; making its key costs it more than the
# kernel on small workloads), or to fail out of GPU memory where one output set per timed repetition does not fit;
# keeps_l2_warm is REWARD_HACK (the flush buffer it replaced is checked: timing.TimingTampered)
args=()
case "$PHASE" in
cheats)  # NAMES overrides the definitions; EXTRA adds solutions (e.g. "fla")
    for n in ${NAMES:-kda_prefill_h32_d128_k_last kda_prefill_h24_d128_k_last_safe_gate kda_decode_h32_d128_k_last kda_mtp_h32_d128_k_last}; do
        args+=(--name "$n"); done
    args+=(--solution triton)
    for e in ${EXTRA:-}; do args+=(--solution "$e"); done
    for c in "${cheats[@]}"; do [[ $c == *::* ]] || c=tests/runner/cheats.py::$c; args+=(--solution "$c"); done ;;
calibrate)  # SOLUTIONS overrides "triton reference fla"
    args=(--op-type kda --warmup 1 --reps 3 --max-reps 5)
    for e in ${SOLUTIONS:-triton reference fla}; do args+=(--solution "$e"); done ;;
stress)
    args=(--name "${NAMES:-kda_prefill_h32_d128_k_last}" --size stress-only --solution triton
          --solution tests/runner/cheats.py::row_zeroed --warmup 0 --reps 1 --max-reps 1) ;;
esac
start=$(date +%s)
timeout -s INT -k 30 "$stop" python3 -m kda_trace.cli run "${args[@]}" --timeout 400 --out "$run_dir" --resume "$@" \
    2>&1 | tee -a "$OUT/${RUN_NAME:-$PHASE}_log.txt" | grep -v "^REWARD_HACK\|^INCORRECT\|^RUNTIME_ERROR" | tail -60
echo "kda-trace run exit status $? after $(($(date +%s) - start)) s" | tee -a "$OUT/${RUN_NAME:-$PHASE}_log.txt"
python3 -m kda_trace.cli report "$run_dir" > "$OUT/${RUN_NAME:-$PHASE}_report_log.txt" 2>&1
python3 benchmarks/row_margins.py "$run_dir" 2>&1 | tee "$OUT/${RUN_NAME:-$PHASE}_margins.txt" | tail -40
find .gpu_out/triton -type f ! -name '*.autotune.json' -delete
tar czf "$OUT/${RUN_NAME:-$PHASE}.tar.gz" "$run_dir" .gpu_out/triton
