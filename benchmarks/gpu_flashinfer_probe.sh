#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root, in two or three device calls made back to back
# (what the first leaves in /tmp lasts only while the machine stays warm, 30 s after a call):
#   1. carry [".fi_carry1"]:               bash benchmarks/gpu_flashinfer_probe.sh stage1
#   2. carry [".fi_carry2", ".whl"]:       bash benchmarks/gpu_flashinfer_probe.sh probe
#   3. (optional, same machine) carry [".whl"]:  bash benchmarks/gpu_flashinfer_probe.sh run
# stage1 copies the first part of the CuTe DSL libraries to /tmp/fi_parts. probe joins the parts,
# checks them, installs flashinfer and its needs into /tmp/fi_site, then runs
# benchmarks/gpu_flashinfer_probe.py (table + $OUT/flashinfer_probe.json) and the gpu tier of
# tests/references/test_ref_flashinfer.py ($OUT/flashinfer_ref_tests.log). run evaluates the flashinfer
# solution beside ours and fla's on the decode and mtp definitions (--size all) and returns $OUT/flashinfer_run.tar.gz.
# .fi_carry1 / .fi_carry2 come from benchmarks/flashinfer_wheels.sh; .whl from ../shared/device/fetch-wheels.sh.
set -uo pipefail
mode=${1:?usage: gpu_flashinfer_probe.sh stage1|probe|run}
OUT=${OUT:-$PWD/kda-trace-out}
mkdir -p "$OUT" /tmp/fi_parts
site=/tmp/fi_site
setup_env() {
  export PYTHONPATH=$PWD:$site:$site/nvidia_cutlass_dsl/dsl_packages:/tmp/site PYTHONUNBUFFERED=1
  export FLASHINFER_WORKSPACE_BASE=/tmp/fi_cache
}
case "$mode" in
stage1)
  cp .fi_carry1/* /tmp/fi_parts/ && ls -la /tmp/fi_parts ;;
probe)
  cp .fi_carry2/cu13.tar.xz.part-* /tmp/fi_parts/ || exit 1
  if [ ! -f /tmp/fi_parts/cu13.tar.xz.part-aa ]; then
    echo "part 1 is missing from /tmp/fi_parts: the machine was not the warm one of stage1; run stage1 again right before" >&2
    exit 3
  fi
  cat /tmp/fi_parts/cu13.tar.xz.part-* > /tmp/cu13.tar.xz
  (cd /tmp && sha256sum -c "$OLDPWD/.fi_carry2/SHA256SUMS") || { echo "cu13.tar.xz does not match its checksum" >&2; exit 4; }
  mkdir -p $site
  [ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target $site .fi_carry2/*.whl || exit 5
  xz -dc /tmp/cu13.tar.xz | tar -C $site -xf - || exit 6
  xz -dc .fi_carry2/flashinfer_trimmed.tar.xz | tar -C $site -xf - || exit 7
  setup_env
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/flashinfer_env.txt"
  python3 -m pip list 2>/dev/null | grep -iE "^(cuda-bindings|cuda-core|cuda-pathfinder|torch|protobuf|requests|nvidia-ml-py) " | tee -a "$OUT/flashinfer_env.txt"
  timeout 300 python3 benchmarks/gpu_flashinfer_probe.py --out "$OUT" 2>&1 | tee "$OUT/flashinfer_probe.log"
  timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/references/test_ref_flashinfer.py -rs 2>&1 | tail -60 > "$OUT/flashinfer_ref_tests.log"
  tail -20 "$OUT/flashinfer_ref_tests.log" ;;
run)
  [ -d $site/flashinfer ] || { echo "no $site: run stage1 and probe first, on this same warm machine" >&2; exit 3; }
  [ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
  setup_env
  timeout 540 python3 -m kda_trace.cli run --name kda_decode --name kda_mtp --solution flashinfer --solution triton --solution fla \
    --size all --out /tmp/fi_run 2>&1 | tail -40 | tee "$OUT/flashinfer_run.log"
  tar -C /tmp -czf "$OUT/flashinfer_run.tar.gz" fi_run ;;
*)
  echo "unknown mode $mode" >&2; exit 2 ;;
esac
