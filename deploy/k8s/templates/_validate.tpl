{{/* Cross-field checks that values.schema.json cannot express: `helm install` fails with the
     message instead of rendering a cluster that would not start. Called from configmap.yaml. */}}
{{- define "moe.validate" -}}
{{- $v := .Values -}}
{{- range $role := list "gateway" "routers" "asr" "tts" -}}
{{- $a := (index $v $role).autoscaling -}}
{{- if and $a.enabled (gt (int $a.minReplicas) (int $a.maxReplicas)) -}}
{{- fail (printf "%s.autoscaling.minReplicas (%v) must not exceed maxReplicas (%v)" $role $a.minReplicas $a.maxReplicas) -}}
{{- end -}}
{{- end -}}
{{- $names := dict -}}
{{- $workers := 0 -}}
{{- range $p := $v.expertPools -}}
{{- if hasKey $names $p.name -}}{{- fail (printf "expertPools: duplicate name %q" $p.name) -}}{{- end -}}
{{- $_ := set $names $p.name true -}}
{{- $workers = add $workers (ternary 1 (int $p.replicas) $v.routers.sidecarExperts) | int -}}
{{- end -}}
{{- if and $v.routers.sidecarExperts (not $v.expertPools) -}}
{{- fail "routers.sidecarExperts needs at least one entry in expertPools" -}}
{{- end -}}
{{- if eq $v.placement.policy "static" -}}
{{- range $e := $v.placement.table -}}
{{- range $id := splitList "," (index (splitList "=" $e) 1) -}}
{{- if ge (int $id) $workers -}}
{{- fail (printf "placement.table entry %q names worker %s, but the pools have %d workers (ids 0-%d)" $e $id $workers (sub $workers 1)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (eq $v.numerics.device "gpu") (eq $v.model.source "preset") -}}
{{- fail "numerics.device gpu with a generated preset model: use a real checkpoint (model.source pvc, hostPath or image)" -}}
{{- end -}}
{{- end -}}
