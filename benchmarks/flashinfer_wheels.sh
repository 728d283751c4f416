#!/usr/bin/env bash
# Run HERE (the CPU machine with a package index), from the repository root, before the GPU probe:
#   benchmarks/flashinfer_wheels.sh
# Downloads flashinfer-python 0.7.2.post1 and what its KDA path needs at import and run time on the GPU
# machine (Python 3.12, manylinux x86_64, torch 2.11+cu130 already there), and packs it into two folders,
# each small enough to travel with the working tree in one device call (64 MiB in all):
#   .fi_carry1/  the first 40 MiB of the CuTe DSL's CUDA 13 libraries (xz tar, split)
#   .fi_carry2/  the rest of them, flashinfer trimmed to its Python code and data/csrc/kda (xz tar),
#                the small wheels (apache-tvm-ffi, nvidia-cutlass-dsl, -libs-base, -libs-core), SHA256SUMS
# The GPU machine image already has cuda-bindings, cuda-core, cuda-pathfinder, requests, nvidia-ml-py,
# tabulate, click, einops, ninja, packaging, protobuf and typing-extensions (KINDS.md's list), which is
# all `import flashinfer` needs besides these (checked on the CPU with flashinfer's own wheel, 2026-11-23).
# Not carried, because `import flashinfer` and the KDA entry points do not import them: nccl4py,
# nccl-extensions, nvidia-cudnn-frontend (only the cudnn backend), cuda-tile, cuda-python (metapackage).
# Takes about 5 minutes here (xz of 227 MB of libraries).
set -euo pipefail
W=.fi_wheels
mkdir -p "$W" .fi_carry1 .fi_carry2
rm -f .fi_carry1/* .fi_carry2/*
dl() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$W" "$@" 2>&1 | grep -v '^WARNING: Location' || true
}
dl flashinfer-python==0.7.2.post1 apache-tvm-ffi==0.1.15.post2 nvidia-cutlass-dsl==4.8.1 \
   nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1
ls -la "$W"
tmp=$(mktemp -d)
# flashinfer: keep the Python package, drop the C++/CUDA sources of other ops (data/, 332 MB), keep data/csrc/kda
mkdir -p "$tmp/fi" && (cd "$tmp/fi" && unzip -q "$OLDPWD/$W"/flashinfer_python-0.7.2.post1-py3-none-any.whl)
rm -rf "$tmp/fi/flashinfer/data/cutlass" "$tmp/fi/flashinfer/data/cccl" "$tmp/fi/flashinfer/data/spdlog" "$tmp/fi/flashinfer/data/include"
find "$tmp/fi/flashinfer/data/csrc" -mindepth 1 -maxdepth 1 ! -name kda -exec rm -rf {} +
tar -C "$tmp/fi" -cf - flashinfer flashinfer_python-0.7.2.post1.dist-info | xz -T0 -6 > .fi_carry2/flashinfer_trimmed.tar.xz
# the CuTe DSL's CUDA 13 libraries: one 193 MB shared object, so xz and split across the two calls
mkdir -p "$tmp/cu13" && (cd "$tmp/cu13" && unzip -q "$OLDPWD/$W"/nvidia_cutlass_dsl_libs_cu13-4.8.1-*.whl)
tar -C "$tmp/cu13" -cf - . | xz -T0 -6 > "$tmp/cu13.tar.xz"
split -b 40M "$tmp/cu13.tar.xz" "$tmp/cu13.tar.xz.part-"
mv "$tmp/cu13.tar.xz.part-aa" .fi_carry1/
mv "$tmp"/cu13.tar.xz.part-a[b-z] .fi_carry2/
cp "$W"/apache_tvm_ffi-*.whl "$W"/nvidia_cutlass_dsl-4.8.1-*.whl "$W"/nvidia_cutlass_dsl_libs_base-*.whl \
   "$W"/nvidia_cutlass_dsl_libs_core-*.whl .fi_carry2/
(cd "$tmp" && sha256sum cu13.tar.xz) > .fi_carry2/SHA256SUMS
rm -rf "$tmp"
du -sh .fi_carry1 .fi_carry2
ls -la .fi_carry1 .fi_carry2
