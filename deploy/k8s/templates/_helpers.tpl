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

{{/* Health probes (startup, readiness, liveness): gRPC health on `port`; under mTLS (the
     kubelet's gRPC probes have no TLS) HTTP /healthz on `metricsPort` (default ports.metrics). */}}
{{- define "moe.grpcProbes" -}}
{{- $p := .root.Values.probes -}}
{{- $how := printf "grpc: {port: %d}" (int .port) -}}
{{- if .root.Values.security.mtls.enabled -}}
{{- $how = printf "httpGet: {path: /healthz, port: %d}" (int (.metricsPort | default .root.Values.ports.metrics)) -}}
{{- end -}}
startupProbe:
  {{ $how }}
  periodSeconds: {{ $p.startup.periodSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
  timeoutSeconds: {{ $p.startup.timeoutSeconds }}
readinessProbe:
  {{ $how }}
  periodSeconds: {{ $p.readiness.periodSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
  timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
livenessProbe:
  {{ $how }}
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

{{/* ---- mTLS (security.mtls): one certificate per role, mounted at /etc/moe-tls. ---- */}}

{{/* The roles that call each gRPC server (SECURITY.md's table): grpc.auth grants exactly these. */}}
{{- define "moe.mtls.callers" -}}
{{- toJson (dict "router" (list "gateway" "admin") "expert-worker" (list "router" "admin") "kv-store" (list "router" "admin") "asr" (list "gateway") "tts" (list "gateway")) -}}
{{- end -}}

{{/* The identity of a role (its certificate's URI SAN): (dict "root" $ "role" R) */}}
{{- define "moe.mtls.identity" -}}
{{- printf "spiffe://%s/ns/%s/%s/%s" .root.Values.security.mtls.trustDomain .root.Release.Namespace (include "moe.fullname" .root) .role -}}
{{- end -}}

{{/* The Secret holding a role's tls.crt, tls.key, ca.crt: (dict "root" $ "role" R) */}}
{{- define "moe.mtls.secretName" -}}
{{- $byo := index (.root.Values.security.mtls.secrets | default dict) .role | default "" -}}
{{- $byo | default (include "moe.component" (dict "root" .root "component" (printf "tls-%s" .role))) -}}
{{- end -}}

{{/* The DNS names a role's callers dial (its certificate's DNS SANs), as JSON. */}}
{{- define "moe.mtls.dnsNames" -}}
{{- $root := .root -}}
{{- $ns := $root.Release.Namespace -}}
{{- $out := list -}}
{{- $headless := dict "router" (list "router") "kv-store" (list "kv-store") "expert-worker" list -}}
{{- if not $root.Values.routers.sidecarExperts -}}
{{- range $pool := $root.Values.expertPools -}}{{- $_ := set $headless "expert-worker" (append (get $headless "expert-worker") (printf "experts-%s" $pool.name)) -}}{{- end -}}
{{- end -}}
{{- if hasKey $headless .role -}}
{{- /* StatefulSet pods: <sts>-<i>.<service>.<namespace>.svc (moe.podDns) */ -}}
{{- range $c := get $headless .role -}}
{{- $svc := include "moe.component" (dict "root" $root "component" $c) -}}
{{- $out = concat $out (list (printf "*.%s.%s.svc" $svc $ns) (printf "%s.%s.svc" $svc $ns)) -}}
{{- end -}}
{{- if and (eq .role "expert-worker") $root.Values.routers.sidecarExperts -}}
{{- /* sidecars: the router dials 127.0.0.1 and verifies the name localhost */ -}}
{{- $out = append $out "localhost" -}}
{{- end -}}
{{- else if has .role (list "asr" "tts") -}}
{{- /* ClusterIP Services: the gateway dials the short name */ -}}
{{- $svc := include "moe.component" (dict "root" $root "component" .role) -}}
{{- $out = list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* A gRPC server's grpc.tls and grpc.auth (JSON): (dict "root" $ "component" C) */}}
{{- define "moe.mtls.server" -}}
{{- $root := .root -}}
{{- $m := $root.Values.security.mtls -}}
{{- $auth := dict "enabled" true -}}
{{- range $role := index (include "moe.mtls.callers" . | fromJson) .component -}}
{{- $ids := list (include "moe.mtls.identity" (dict "root" $root "role" $role)) -}}
{{- if eq $role "admin" -}}{{- $ids = concat $ids ($m.adminIdentities | default list) -}}{{- end -}}
{{- $_ := set $auth $role (dict "identities" $ids) -}}
{{- end -}}
{{- toJson (dict
  "tls" (dict "cert_file" "/etc/moe-tls/tls.crt" "key_file" "/etc/moe-tls/tls.key" "client_ca_file" "/etc/moe-tls/ca.crt" "require_client_cert" true "reload_interval" $m.reloadInterval)
  "auth" $auth) -}}
{{- end -}}

{{/* A client's channel (JSON): (dict "root" $ "serverName" NAME-or-"") */}}
{{- define "moe.mtls.channel" -}}
{{- $tls := dict "enabled" true "ca_file" "/etc/moe-tls/ca.crt" "cert_file" "/etc/moe-tls/tls.crt" "key_file" "/etc/moe-tls/tls.key" "reload_interval" .root.Values.security.mtls.reloadInterval -}}
{{- with .serverName -}}{{- $_ := set $tls "server_name_override" . -}}{{- end -}}
{{- toJson (dict "tls" $tls) -}}
{{- end -}}

{{/* The volume of a role's certificate: (dict "root" $ "role" R "name" VOLUME) */}}
{{- define "moe.mtls.volume" -}}
{{- if .root.Values.security.mtls.enabled -}}
- name: {{ .name | default "tls" }}
  secret:
    secretName: {{ include "moe.mtls.secretName" . }}
    defaultMode: 288  # 0440: owner root, group the pod's fsGroup; nobody else
    items: [{key: tls.crt, path: tls.crt}, {key: tls.key, path: tls.key}, {key: ca.crt, path: ca.crt}]
{{- end }}
{{- end -}}

{{/* Its mount (no subPath: the kubelet updates the files in place on rotation). */}}
{{- define "moe.mtls.mount" -}}
{{- if .root.Values.security.mtls.enabled -}}
- name: {{ .name | default "tls" }}
  mountPath: /etc/moe-tls
  readOnly: true
{{- end }}
{{- end -}}
