#!/usr/bin/env bash
# Session 37 call 2 (H100): why call 1's pipelined parts lost (0.90-0.98): the timeline of one call and what each
# kernel holds of an SM (registers, shared memory), defaults and pipeline_parts=4; then A/Bs of the parts with a
# lighter state pass (1 stage: no shared-memory buffers; 32-wide tiles: half the programs).
source benchmarks/gpu_env.sh
for launch in pipeline_parts=0 pipeline_parts=4,pipeline_priority=-1 pipeline_parts=4,pipeline_priority=-1,state_stages=1; do
    timeout -s INT -k 10 90 python3 benchmarks/timeline_chunk.py h32_dense_1x16384 --launch $launch 2>&1 | grep -v -i warn | tee -a "$OUT/timeline.txt"
done
timeout -s INT -k 10 200 python3 benchmarks/bench_chunk.py --no-speed --no-fla \
    --ab h32_dense_1x16384:pipeline_parts=4,pipeline_priority=-1,state_stages=1 \
    --ab h32_dense_1x16384:pipeline_parts=4,pipeline_priority=-1,state_bv=32 \
    --ab h32_dense_1x16384:pipeline_parts=4,pipeline_priority=-1,state_bv=32,state_stages=1 2>&1 | grep -v -i warn | tee -a "$OUT/ab.txt"
