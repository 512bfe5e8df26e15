{{/* Names, labels and the pieces every role's pod shares. */}}

{{- define "moe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "moe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains (include "moe.name" .) .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "moe.name" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* moe.component: "<fullname>-<component>" for (dict "root" $ "component" "router") */}}
{{- define "moe.component" -}}
{{- printf "%s-%s" (include "moe.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "moe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "moe.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .pool }}
moe-cluster.io/pool: {{ . }}
{{- end }}
{{- end -}}

{{- define "moe.labels" -}}
{{ include "moe.selectorLabels" . }}
app.kubernetes.io/part-of: moe-cluster
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels selecting every pod of the release (NetworkPolicy, PodMonitor). */}}
{{- define "moe.releaseSelector" -}}
app.kubernetes.io/name: {{ include "moe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "moe.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) -}}
{{- end -}}

{{/* The checkpoint directory every service is given. */}}
{{- define "moe.modelDir" -}}
{{- $m := .Values.model -}}
{{- if eq $m.source "preset" -}}
{{- printf "%s/%s" $m.mountPath $m.name -}}
{{- else if eq $m.source "pvc" -}}
{{- if $m.pvc.subPath -}}{{- printf "%s/%s" $m.mountPath $m.pvc.subPath -}}{{- else -}}{{- $m.mountPath -}}{{- end -}}
{{- else if eq $m.source "hostPath" -}}
{{- $m.mountPath -}}
{{- else -}}
{{- $m.image.path -}}
{{- end -}}
{{- end -}}

{{/* Pod-level volumes: config, /tmp, the model. (dict "root" $ "configMap" NAME) */}}
{{- define "moe.volumes" -}}
{{- $m := .root.Values.model -}}
- name: config
  configMap:
    name: {{ include "moe.component" (dict "root" .root "component" "config") }}
- name: tmp
  emptyDir: {sizeLimit: {{ .root.Values.tmpSizeLimit }}}
{{- if eq $m.source "preset" }}
- name: model
  emptyDir: {}
{{- else if eq $m.source "pvc" }}
- name: model
  persistentVolumeClaim:
    claimName: {{ required "model.pvc.claimName is required when model.source is pvc" $m.pvc.claimName }}
    readOnly: true
{{- else if eq $m.source "hostPath" }}
- name: model
  hostPath:
    path: {{ required "model.hostPath.path is required when model.source is hostPath" $m.hostPath.path }}
    type: Directory
{{- end }}
{{- end -}}

{{- define "moe.volumeMounts" -}}
- name: config
  mountPath: /etc/moe
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if ne .Values.model.source "image" }}
- name: model
  mountPath: {{ .Values.model.mountPath }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* The init container that generates a preset checkpoint (model.source preset). */}}
{{- define "moe.modelInit" -}}
{{- $m := .Values.model -}}
{{- if eq $m.source "preset" }}
- name: make-model
  image: {{ include "moe.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: [moe, make-model, --preset, {{ $m.preset.name | quote }}, --arch, {{ $m.preset.arch | quote }}, --dtype, {{ $m.preset.dtype | quote }}, --out, {{ include "moe.modelDir" . | quote }}]
  securityContext: {{- toYaml .Values.containerSecurityContext | nindent 4 }}
  resources:
    requests: {cpu: 100m, memory: 128Mi}
    limits: {memory: 1Gi}
  volumeMounts:
    - name: model
      mountPath: {{ $m.mountPath }}
    - name: tmp
      mountPath: /tmp
{{- end }}
{{- end -}}

{{/* Pod spec parts shared by every role: (dict "root" $ "role" .Values.routers "component" "router") */}}
{{- define "moe.podCommon" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "moe.serviceAccountName" (dict "root" $root "component" .component) }}
automountServiceAccountToken: false
securityContext: {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- with $root.Values.image.pullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
terminationGracePeriodSeconds: {{ .role.terminationGracePeriodSeconds | default 30 }}
{{- with (.role.nodeSelector | default $root.Values.nodeSelector) }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.role.tolerations | default $root.Values.tolerations) }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.role.affinity | default $root.Values.affinity) }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "moe.serviceAccountName" -}}
{{- if .root.Values.serviceAccount.create -}}
{{- include "moe.component" . -}}
{{- else -}}
default
{{- end -}}
{{- end -}}

{{/* Pod annotations: scrape hints (job = role), config checksum (restart on change). */}}
{{- define "moe.podAnnotations" -}}
{{- if .root.Values.monitoring.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .metricsPort | quote }}
prometheus.io/path: /metrics
{{- end }}
checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
{{- with .root.Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* gRPC health probes (startup, readiness, liveness) on `port`. */}}
{{- define "moe.grpcProbes" -}}
{{- $p := .root.Values.probes -}}
startupProbe:
  grpc: {port: {{ .port }}}
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
  timeoutSeconds: {{ $p.startup.timeoutSeconds }}
readinessProbe:
  grpc: {port: {{ .port }}}
  periodSeconds: {{ $p.readiness.periodSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
  timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
livenessProbe:
  grpc: {port: {{ .port }}}
  periodSeconds: {{ $p.liveness.periodSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
  timeoutSeconds: {{ $p.liveness.timeoutSeconds }}
{{- end -}}

{{/* Resources with the GPU request added: (dict "resources" R "gpus" N) */}}
{{- define "moe.resources" -}}
{{- $r := deepCopy (.resources | default dict) -}}
{{- if gt (int .gpus) 0 -}}
{{- $limits := $r.limits | default dict -}}
{{- $_ := set $limits "nvidia.com/gpu" (int .gpus) -}}
{{- $_ := set $r "limits" $limits -}}
{{- end -}}
{{- toYaml $r -}}
{{- end -}}

{{/* Env every service container gets: its pod name (router_id, logs). */}}
{{- define "moe.env" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- end -}}

{{/* DNS name of a StatefulSet pod: (dict "root" $ "sts" NAME "service" NAME "ordinal" I) */}}
{{- define "moe.podDns" -}}
{{- printf "%s-%d.%s.%s.svc" .sts (int .ordinal) .service .root.Release.Namespace -}}
{{- end -}}

{{/* Router addresses the gateway routes to: replicas, or autoscaling.maxReplicas. */}}
{{- define "moe.routerAddresses" -}}
{{- $root := . -}}
{{- $n := int .Values.routers.replicas -}}
{{- if .Values.routers.autoscaling.enabled -}}{{- $n = max $n (int .Values.routers.autoscaling.maxReplicas) | int -}}{{- end -}}
{{- $name := include "moe.component" (dict "root" $root "component" "router") -}}
{{- $out := list -}}
{{- range $i := until $n -}}
{{- $out = append $out (printf "%s:%d" (include "moe.podDns" (dict "root" $root "sts" $name "service" $name "ordinal" $i)) (int $root.Values.ports.routerGrpc)) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Expert worker addresses in id order (pool order, then ordinal), and the placement. */}}
{{- define "moe.expertWorkers" -}}
{{- $root := . -}}
{{- $out := list -}}
{{- if .Values.routers.sidecarExperts -}}
{{- range $i, $pool := .Values.expertPools -}}
{{- $out = append $out (printf "127.0.0.1:%d" (add (int $root.Values.ports.expertGrpc) $i | int)) -}}
{{- end -}}
{{- else -}}
{{- range $pool := .Values.expertPools -}}
{{- $name := include "moe.component" (dict "root" $root "component" (printf "experts-%s" $pool.name)) -}}
{{- range $j := until (int $pool.replicas) -}}
{{- $out = append $out (printf "%s:%d" (include "moe.podDns" (dict "root" $root "sts" $name "service" $name "ordinal" $j)) (int $root.Values.ports.expertGrpc)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{- define "moe.placement" -}}
{{- $root := . -}}
{{- $out := list -}}
{{- if eq .Values.placement.policy "static" -}}
{{- $out = .Values.placement.table -}}
{{- else -}}
{{- $next := 0 -}}
{{- range $pool := .Values.expertPools -}}
{{- $n := ternary 1 (int $pool.replicas) $root.Values.routers.sidecarExperts -}}
{{- if gt $n 0 -}}
{{- $ids := list -}}
{{- range $j := until $n -}}{{- $ids = append $ids (toString (add $next $j)) -}}{{- end -}}
{{- range $spec := $pool.experts -}}
{{- $out = append $out (printf "%s=%s" $spec (join "," $ids)) -}}
{{- end -}}
{{- end -}}
{{- $next = add $next $n | int -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* NetworkPolicy peer: the pods of one role of this release. */}}
{{- define "moe.np.peer" -}}
- podSelector:
    matchLabels:
      app.kubernetes.io/name: {{ include "moe.name" .root }}
      app.kubernetes.io/instance: {{ .root.Release.Name }}
      app.kubernetes.io/component: {{ .component }}
{{- end -}}
