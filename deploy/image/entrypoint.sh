#!/bin/sh
# The image's entrypoint: the first argument names the service (a binary in /opt/moe/bin), the
# rest are its flags. `exec`, so the service is PID 1's only child under `--init`/tini and gets
# SIGTERM directly (graceful drain).
set -eu
bin=/opt/moe/bin
if [ "$#" -eq 0 ] || [ "$1" = "--help" ] || [ "$1" = "-h" ]; then
  echo "usage: IMAGE SERVICE [FLAGS...]   services: $(ls "$bin" | tr '\n' ' ')" >&2
  echo "  e.g. IMAGE router --set core.model_dir=/models/small --set grpc.port=50051" >&2
  exit 0
fi
svc=$1
shift
case "$svc" in
  */* | .*) echo "moe-entrypoint: bad service name '$svc'" >&2; exit 2 ;;
esac
if [ ! -x "$bin/$svc" ]; then
  echo "moe-entrypoint: unknown service '$svc' (have: $(ls "$bin" | tr '\n' ' '))" >&2
  exit 2
fi
exec "$bin/$svc" "$@"
