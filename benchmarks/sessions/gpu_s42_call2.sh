#!/usr/bin/env bash
# Session 42 call 2 (H200; carry .whl and .gpu_out): where the intra kernel's L1/TEX time goes on K3 (78% of the
# L1/TEX pipe, 30% of DRAM in the forty-first session's profile): Nsight Compute's full set on one launch, with the
# section bodies (shared-memory wavefronts and bank conflicts, instruction mix, stall reasons) and the per-line
# source counters (chunk.py lines and SASS) exported from the report.
source benchmarks/gpu_env.sh
timeout -s INT -k 10 300 ncu --clock-control none --set full --import-source yes \
    --kernel-name regex:'_intra_chunk_kernel' --launch-skip 2 --launch-count 1 \
    -o "$OUT/intra" python3 benchmarks/ncu_chunk.py h96_dense_1x8192_safe_l2 > "$OUT/ncu_log.txt" 2>&1
tail -3 "$OUT/ncu_log.txt"
ncu -i "$OUT/intra.ncu-rep" --print-details all > "$OUT/details.txt" 2>&1
ncu -i "$OUT/intra.ncu-rep" --page raw --csv > "$OUT/raw.csv" 2>&1
ncu -i "$OUT/intra.ncu-rep" --page source --csv --print-source cuda > "$OUT/source_py.csv" 2>&1 || true
ncu -i "$OUT/intra.ncu-rep" --page source --csv --print-source sass > "$OUT/source_sass.csv" 2>&1 || true
gzip "$OUT"/source_*.csv "$OUT/raw.csv"
ls -la "$OUT"; head -c 600 "$OUT/details.txt"; grep -iE "shared|bank|wavefront" "$OUT/details.txt" | head -40
