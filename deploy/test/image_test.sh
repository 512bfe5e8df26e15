#!/usr/bin/env bash
# The image test (ctest label `image`): builds the image from the already-built build/bin
# (deploy/image/build-image.sh: no second compile), checks that every binary's libraries resolve
# inside it and that it runs as a numeric non-root user, makes the tiny model with the image's
# `moe`, renders the baked chart with the baked Helm (the operator's renderer), then starts a
# router and a gateway from it in one pod (read-only root filesystem, every capability dropped,
# no privilege escalation) on host-assigned loopback ports (-p 127.0.0.1::PORT), checks their
# health and one completion, and stops them with SIGTERM (graceful drain: exit status 0). Needs
# root, podman, runc, mmdebstrap (scripts/setup).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin_dir=${MOE_BIN_DIR:-$repo/build/bin}
tag=localhost/moe:test-$$
pod=moe-image-test-$$
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/deploy/image/containers.conf}
for tool in podman runc mmdebstrap curl; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is missing (scripts/setup installs it)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (podman with runc on this machine kind)"; exit 77; }

work=$(mktemp -d)
cleanup() {
  podman pod rm -f -t 0 "$pod" >/dev/null 2>&1 || true
  podman rmi -f "$tag" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
t0=$SECONDS
step() { printf 'image_test: %-58s %4ds\n' "$1" $((SECONDS - t0)); }

"$repo/deploy/image/build-image.sh" --tag "$tag" --bin-dir "$bin_dir"
step "built $tag"

user=$(podman image inspect --format '{{.Config.User}}' "$tag")
[ "$user" = 65532:65532 ] || { echo "FAIL: image user is '$user', want 65532:65532"; exit 1; }
missing=$(podman run --rm --read-only --entrypoint /bin/sh "$tag" -c \
  'for b in /opt/moe/bin/*; do ldd "$b" | sed -n "s|^\t\(.*\) => not found|$b: \1|p"; done')
[ -z "$missing" ] || { echo "FAIL: libraries missing in the image:"; echo "$missing"; exit 1; }
services=(gateway router expert-worker kv-store moe)
[ -x "$bin_dir/operator" ] && services+=(operator)
for s in "${services[@]}"; do
  podman run --rm --read-only "$tag" "$s" --help >/dev/null || { echo "FAIL: $s --help"; exit 1; }
done
if podman run --rm --read-only "$tag" no-such-service >/dev/null 2>&1; then
  echo "FAIL: the entrypoint accepted an unknown service"; exit 1
fi
step "non-root, libraries resolve, entrypoint selects the service"

if [ -x "$bin_dir/operator" ]; then
  # The operator's renderer as it runs in its pod: the image's Helm on the image's chart, with a
  # read-only root and Helm's directories under /tmp (services/operator/chart_renderer.cc).
  rendered=$(podman run --rm --read-only --tmpfs /tmp --entrypoint /usr/local/bin/helm \
    -e HELM_CACHE_HOME=/tmp/helm/cache -e HELM_CONFIG_HOME=/tmp/helm/config \
    -e HELM_DATA_HOME=/tmp/helm/data "$tag" template moe /usr/share/moe/chart)
  grep -q '^kind: StatefulSet' <<<"$rendered" ||
    { echo "FAIL: helm template /usr/share/moe/chart in the image"; exit 1; }
  # Outside a pod (no service account) it refuses to start, naming what is missing.
  if err=$(podman run --rm --read-only --tmpfs /tmp "$tag" operator 2>&1); then
    echo "FAIL: the operator started without an API server"; exit 1
  fi
  grep -q KUBERNETES_SERVICE_HOST <<<"$err" || { echo "FAIL: operator error: $err"; exit 1; }
  step "operator: the image's Helm renders the image's chart"
fi

mkdir -p "$work/models" && chmod 0777 "$work/models"
podman run --rm --read-only -v "$work/models:/models" "$tag" moe make-model --preset tiny --out /models/tiny >/dev/null
step "moe make-model in the image"

secure=(--init --read-only --tmpfs /tmp --cap-drop=ALL --security-opt no-new-privileges -v "$work/models:/models:ro")
podman pod create --name "$pod" -p 127.0.0.1::8000 -p 127.0.0.1::9090 >/dev/null
podman run -d --pod "$pod" --name "$pod-router" "${secure[@]}" "$tag" router \
  --set core.model_dir=/models/tiny --set grpc.host=0.0.0.0 --set grpc.port=50051 \
  --set metrics.host=0.0.0.0 --set metrics.port=9090 >/dev/null
podman run -d --pod "$pod" --name "$pod-gateway" "${secure[@]}" "$tag" gateway \
  --set model_dir=/models/tiny --set http.host=0.0.0.0 --set http.port=8000 \
  --set routing.routers=127.0.0.1:50051 >/dev/null
http=$(podman port "$pod-gateway" 8000/tcp | head -1)
metrics=$(podman port "$pod-router" 9090/tcp | head -1)
case "$http$metrics" in 127.0.0.1:*127.0.0.1:*) ;; *) echo "FAIL: ports not on loopback: $http $metrics"; exit 1 ;; esac
for _ in $(seq 1 120); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$http/readyz")" = 200 ] && break
  sleep 0.5
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$http/readyz")" = 200 ] ||
  { echo "FAIL: gateway not ready"; podman logs "$pod-gateway"; podman logs "$pod-router"; exit 1; }
[ "$(curl -s "http://$metrics/healthz")" = ok ] || { echo "FAIL: router /healthz"; exit 1; }
scrape=$(curl -s "http://$metrics/metrics")  # not piped into grep -q: pipefail and SIGPIPE
grep -q '^moe_requests_running' <<<"$scrape" || { echo "FAIL: router /metrics"; exit 1; }
step "router and gateway healthy on $metrics and $http"

body=$(curl -s "http://$http/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"tiny","prompt":"Hello","max_tokens":3,"temperature":0}')
echo "$body" | grep -q '"completion_tokens":3' || { echo "FAIL: completion: $body"; exit 1; }
step "a completion through the gateway"

for c in gateway router; do
  podman stop -t 30 "$pod-$c" >/dev/null
  code=$(podman inspect --format '{{.State.ExitCode}}' "$pod-$c")
  [ "$code" = 0 ] || { echo "FAIL: $c exited $code on SIGTERM"; podman logs "$pod-$c" | tail -5; exit 1; }
done
step "SIGTERM: both drained and exited 0"
echo "image_test: 1 passed, 0 failed"
