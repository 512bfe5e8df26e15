#!/usr/bin/env bash
# Builds llama.cpp's own tools natively (GGML_NATIVE=ON: -march=native; OpenMP off, so ggml uses
# its own thread pool) from the source bundle inside the pinned node-llama-cpp package
# (node_modules/node-llama-cpp/llama/gitRelease.bundle, the llama.cpp release that package's
# prebuilt binaries come from), into bench/llamacpp/.native/ (git-ignored, never part of CI):
#   .native/bin/{llama-bench,llama-batched-bench,llama-server,llama-quantize}
#
#   cd bench/llamacpp && npm install && ./build-native.sh [JOBS=2]
#
# `npm install` (not `npm ci`: npm 11 rejects this lock file for lacking entries of other
# platforms' optional binaries; `npm install` keeps the lock file unchanged) fetches the package.
# Idempotent: an existing checkout of the same commit is reused and the build is incremental.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
jobs=${1:-2}
pkg="$here/node_modules/node-llama-cpp/llama"
bundle="$pkg/gitRelease.bundle"
out="$here/.native"
src="$out/src"
if [[ ! -f "$bundle" ]]; then
  echo "build-native.sh: $bundle not found; run 'npm install' in $here first" >&2
  exit 1
fi
commit=$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" {print $1}')
mkdir -p "$out"
if [[ ! -d "$src/.git" ]]; then
  git clone --quiet "$bundle" "$src"
fi
git -C "$src" -c advice.detachedHead=false checkout --quiet "$commit"
# AMX off: -march=native on these Xeon VMs enables AMX-INT8, whose Q8_0 kernels then trap
# (SIGILL in tinygemm_kernel_amx: the VM does not grant the tile state), so llama.cpp could not
# run a Q8_0 model here at all; AVX-512 VNNI/BF16 stay on.
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
cmake -S "$src" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" \
  -DGGML_NATIVE=ON -DGGML_OPENMP=OFF -DGGML_CCACHE=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON \
  -DBUILD_SHARED_LIBS=OFF >"$out/cmake.log"
cmake --build "$out/build" -j "$jobs" \
  --target llama-bench llama-batched-bench llama-server llama-quantize
mkdir -p "$out/bin"
for t in llama-bench llama-batched-bench llama-server llama-quantize; do
  ln -sf "../build/bin/$t" "$out/bin/$t"
done
echo "llama.cpp $commit (node-llama-cpp $(node -p "require('$here/node_modules/node-llama-cpp/package.json').version")," \
  "$(jq -r .tag "$pkg/llama.cpp.info.json" 2>/dev/null || echo '?')) -> $out/bin" >&2
