#!/usr/bin/env bash
# Builds the service image from already-built binaries (build/bin), with no second compile:
# copies them (debug info stripped) with the entrypoint, the chart and (with the operator) the
# Helm binary of scripts/setup (deploy/test/.tools/helm3/helm) into a small context and runs the
# Dockerfile's `prebuilt` path. Offline on this machine kind (shared/TOOLCHAIN.md): the base is
# `localhost/debian:12`, made once by mmdebstrap and imported when missing; podman runs with
# runc and explicit ulimits (containers.conf here).
#
#   deploy/image/build-image.sh [--tag localhost/moe:dev] [--bin-dir build/bin] [--base IMAGE]
#                               [--helm deploy/test/.tools/helm3/helm]
#
# For a from-source build (no build/bin needed): podman build -f deploy/image/Dockerfile .
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
tag=localhost/moe:dev
bin_dir=$repo/build/bin
base=localhost/debian:12
helm=$repo/deploy/test/.tools/helm3/helm
while (($#)); do
  case "$1" in
    --tag) tag=$2; shift 2 ;;
    --bin-dir) bin_dir=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --helm) helm=$2; shift 2 ;;
    *) echo "build-image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}

if [ "$base" = localhost/debian:12 ] && ! podman image exists "$base"; then
  echo "build-image.sh: making $base with mmdebstrap (once, ~1.5 min)" >&2
  rootfs=$(mktemp -d)
  trap 'rm -rf "$rootfs"' EXIT
  mmdebstrap --quiet --variant=minbase --include=usr-is-merged bookworm "$rootfs/rootfs.tar"
  podman import --quiet "$rootfs/rootfs.tar" "$base" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/build/bin" "$ctx/build/tools" "$ctx/deploy/image"
services=(gateway router expert-worker moe operator kv-store asr tts)
copied=()
for s in "${services[@]}"; do
  [ -x "$bin_dir/$s" ] || continue
  objcopy --strip-debug "$bin_dir/$s" "$ctx/build/bin/$s"
  copied+=("$s")
done
for s in gateway router expert-worker kv-store moe; do
  [ -x "$ctx/build/bin/$s" ] || { echo "build-image.sh: $bin_dir/$s is not built" >&2; exit 1; }
done
# The operator renders clusters with Helm and the chart (its defaults: /usr/local/bin/helm,
# /usr/share/moe/chart).
if [ -x "$ctx/build/bin/operator" ]; then
  [ -x "$helm" ] || { echo "build-image.sh: the operator needs Helm: $helm is missing (scripts/setup)" >&2; exit 1; }
  cp "$helm" "$ctx/build/tools/helm"
fi
cp -r "$repo/deploy/k8s" "$ctx/deploy/k8s"
cp "$here/Dockerfile" "$here/entrypoint.sh" "$ctx/deploy/image/"
echo "build-image.sh: $tag from $base with ${copied[*]}" >&2
podman build --quiet --pull=never --layers=true --build-arg BASE="$base" \
  --build-arg BIN_STAGE=prebuilt -f "$ctx/deploy/image/Dockerfile" -t "$tag" "$ctx" >/dev/null
podman image inspect --format '{{.Id}} {{.Size}}' "$tag"
