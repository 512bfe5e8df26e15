#!/usr/bin/env bash
# Renders deploy/monitoring/moe-rules.yaml (the chart's rule file with every role's rules and
# the default thresholds) for a plain Prometheus, promtool and the rule unit tests.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
helm=${HELM:-$here/../test/.tools/helm3/helm}
{
  printf '%s\n' "# GENERATED from deploy/k8s (templates/monitoring/_rules.tpl) with every role's rules and the" \
    "# default thresholds: deploy/monitoring/render-rules.sh. Do not edit; the deploy test checks it."
  "$helm" template moe "$here/../k8s" --set monitoring.rulesForDisabledRoles=true \
      --show-only templates/monitoring/rules.yaml |
    node -e 'const y=require(process.argv[1]);let s="";process.stdin.on("data",d=>s+=d).on("end",()=>process.stdout.write(y.parse(s).data["moe-rules.yaml"]))' \
      "$here/../test/node_modules/yaml"
} > "$here/moe-rules.yaml.tmp"
mv "$here/moe-rules.yaml.tmp" "$here/moe-rules.yaml"
