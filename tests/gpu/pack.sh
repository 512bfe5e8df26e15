#!/usr/bin/env bash
# Packs the GPU test binaries and moe_gpu_bench with the shared libraries they need into one
# folder that travels to a GPU machine having only the CUDA driver, cuBLAS, CMake and Python
# (no gRPC, no Debian -dev packages): the binaries find the libraries beside them through
# RPATH $ORIGIN (cmake: moe_gpu_test_rpath). Left out on purpose: the C library and loader
# (the device's own), the CUDA driver (libcuda), cuBLAS/cuBLASLt (on the device; 100s of MB) and
# the CUDA runtime (linked statically). NCCL (218 MB) cannot travel, so moe_nccl_test stays here.
#
# Usage: tests/gpu/pack.sh [BUILD_DIR] [OUT_DIR]   (defaults: build, BUILD_DIR/gpu-bundle)
# Prints the bundle's size; fails if a binary is missing or the bundle is 64 MiB or more.
set -euo pipefail
build=${1:-build}
out=${2:-$build/gpu-bundle}
bins=("$build/tests/moe_kernels_cuda_test" "$build/tests/moe_cuda_expert_executor_test"
      "$build/bin/moe_gpu_bench")
for b in "${bins[@]}"; do
  [[ -x $b ]] || { echo "pack.sh: $b is not built (cmake --build $build --target $(basename "$b"))" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out"
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libcublas|libcublasLt|libcudart|libnccl)'
for b in "${bins[@]}"; do
  # Strip the debug info: the bundle is for running, and it must stay small.
  objcopy --strip-debug "$b" "$out/$(basename "$b")"
  ldd "$b" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    if [[ $name =~ $skip ]]; then continue; fi
    [[ -e $out/$name ]] || objcopy --strip-debug "$path" "$out/$name"
  done
done
cp "$(dirname "$0")/device_check.sh" "$out/"
bytes=$(du -sb "$out" | cut -f1)
echo "pack.sh: $out: $(ls "$out" | wc -l) files, $bytes bytes"
if (( bytes >= 64 * 1024 * 1024 )); then
  echo "pack.sh: the bundle is over 64 MiB" >&2
  exit 1
fi
