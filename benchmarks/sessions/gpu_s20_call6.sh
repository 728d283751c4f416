#!/usr/bin/env bash
# Twentieth session, sixth call (issue 15), H100: call 5's starved honest solutions again, with the worker's
# out-of-memory retry (WorkerContext.with_room): triton, honest and content_cache (whose cache grows with every
# fresh input set) on prefill h32's shard 0/3, bd27a101 and ace57ec0 included. Run directory .gpu_out/hog_s20.
source benchmarks/gpu_env.sh
NAMES=kda_prefill_h32_d128_k_last CHEATS="honest content_cache" PHASE=cheats RUN_NAME=hog_s20 \
    bash benchmarks/gpu_verdicts.sh 400 --shard 0/3
grep -c "evaluated twice" "$OUT/hog_s20_log.txt"
python3 - <<'PY' | tee "$OUT/retries.txt"
import json, glob
for f in glob.glob(".gpu_out/hog_s20/traces/**/*.jsonl", recursive=True):
    for line in open(f):
        r = json.loads(line); e = r["evaluation"]
        print(r["workload"]["uuid"][:8], r["solution"], e["status"], (e.get("log") or "")[:160].replace("\n", " "))
PY
