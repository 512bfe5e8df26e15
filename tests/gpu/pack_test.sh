#!/usr/bin/env bash
# The bundle that travels to a GPU machine, checked here: pack.sh builds it under 64 MiB, every
# binary finds its libraries through RPATH $ORIGIN with an empty environment (only what the
# device has already may come from elsewhere: libc, the CUDA driver and cuBLAS), and
# device_check.sh prints one JSON line and, without a device, fails (a skip is not a pass there).
# Usage: pack_test.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$here/pack.sh" "$build" "$tmp/bundle"
for b in "$tmp"/bundle/moe_*; do
  # DT_RPATH, not DT_RUNPATH: it also serves the libraries' own dependencies.
  rpath=$(readelf -d "$b" | sed -n 's/.*(RPATH).*\[\(.*\)\]/\1/p')
  [[ $rpath == '$ORIGIN'* ]] || { echo "FAIL: $b RPATH is '$rpath'" >&2; exit 1; }
  # Resolved outside the bundle: allowed only for what pack.sh leaves to the device.
  env -i ldd "$b" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    case $path in
      "$tmp"/bundle/*) ;;
      *) [[ $name =~ ^(ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libcublas|libcublasLt) ]] ||
           { echo "FAIL: $(basename "$b") takes $name from $path" >&2; exit 1; } ;;
    esac
  done
  if env -i ldd "$b" | grep -q "not found"; then
    env -i ldd "$b" | grep "not found" | grep -v -E "libcuda|libcublas" && { echo "FAIL: $b" >&2; exit 1; }
  fi
done
set +e
json=$(env -i PATH=/usr/bin:/bin "$tmp/bundle/device_check.sh" "$tmp/bundle" "$tmp/out")
rc=$?
set -e
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); names={x["name"] for x in r["results"]};
assert "device_check_passed" in names and "moe_kernels_cuda_test_passed" in names, names' "$json"
if nvidia-smi -L > /dev/null 2>&1; then
  echo "a GPU is present: device_check rc=$rc"
else
  [[ $rc -ne 0 ]] || { echo "FAIL: device_check passed without a device" >&2; exit 1; }
fi
echo "pack_test: ok"
