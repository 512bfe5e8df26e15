{{/* Each service's YAML config (--config /etc/moe/<role>.yaml). The chart's part first, then
     the role's `config` values merged over it; pod-specific values come as --set flags. */}}

{{- define "moe.config.gateway" -}}
{{- $v := .Values -}}
{{- $base := dict
  "model_dir" (include "moe.modelDir" .)
  "model_id" $v.model.name
  "max_model_len" (int $v.model.maxModelLen)
  "log_level" $v.logLevel
  "http" (dict "host" "0.0.0.0" "port" (int $v.ports.gatewayHttp))
  "routing" (dict "routers" (include "moe.routerAddresses" . | fromJsonArray))
-}}
{{- /* Voice: the asr and tts Services (ClusterIP; each stream is one gRPC call, so streams
     spread over the pods as connections do). Without them the voice endpoints answer 503. */ -}}
{{- $voice := dict -}}
{{- range $role := list "asr" "tts" -}}
{{- if (index $v $role).enabled -}}
{{- $port := ternary $v.ports.asrGrpc $v.ports.ttsGrpc (eq $role "asr") -}}
{{- $_ := set $voice $role (list (printf "%s:%d" (include "moe.component" (dict "root" $ "component" $role)) (int $port))) -}}
{{- end -}}
{{- end -}}
{{- if $voice -}}{{- $_ := set $base "voice" $voice -}}{{- end -}}
{{- if $v.gateway.apiKeysSecret -}}
{{- $_ := set $base "auth" (dict "api_keys_file" "/etc/moe-secrets/api-keys") -}}
{{- end -}}
{{- with $v.routers.config.core -}}{{- with .block_size -}}{{- $_ := set $base.routing "block_size" . -}}{{- end -}}{{- end -}}
{{- if $v.security.mtls.enabled -}}
{{- /* mTLS: the gateway's certificate (role gateway) on its router and voice channels */ -}}
{{- $_ := set $base.routing "channel" (include "moe.mtls.channel" (dict "root" .) | fromJson) -}}
{{- if $voice -}}{{- $_ := set $base.voice "channel" (include "moe.mtls.channel" (dict "root" .) | fromJson) -}}{{- end -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $base (deepCopy ($v.gateway.config | default dict))) -}}
{{- end -}}

{{- define "moe.config.router" -}}
{{- $v := .Values -}}
{{- $base := dict
  "core" (dict "model_dir" (include "moe.modelDir" .) "model_name" $v.model.name "activations" $v.numerics.activations "weights" ($v.numerics.weights | default "checkpoint"))
  "grpc" (dict "host" "0.0.0.0" "port" (int $v.ports.routerGrpc))
  "metrics" (dict "host" "0.0.0.0" "port" (int $v.ports.metrics))
  "log_level" $v.logLevel
-}}
{{- $workers := include "moe.expertWorkers" . | fromJsonArray -}}
{{- if $workers -}}
{{- /* Sidecar workers share the pod's memory emptyDir at /dev/shm: shared memory, required
     (a sidecar that does not offer it counts as down); pools in other pods: gRPC. */ -}}
{{- $transport := ternary "shm" "grpc" (and $v.routers.sidecarExperts true) -}}
{{- $_ := set $base "experts" (dict "workers" $workers "placement" (include "moe.placement" . | fromJsonArray) "utilisation_threshold" $v.placement.utilisationThreshold "transport" $transport) -}}
{{- end -}}
{{- if $v.kvStore.enabled -}}
{{- $_ := set $base "kv_store" (dict "targets" (include "moe.kvStoreAddresses" . | fromJsonArray) "lossy_int8" ($v.numerics.lossyKv | default false) "response_cache" ($v.kvStore.responseCache | default false)) -}}
{{- end -}}
{{- if $v.security.mtls.enabled -}}
{{- /* mTLS: serve gateway and admin; dial workers and the kv-store as role router (sidecar
     workers on 127.0.0.1 present the name localhost) */ -}}
{{- $_ := mustMergeOverwrite $base.grpc (include "moe.mtls.server" (dict "root" . "component" "router") | fromJson) -}}
{{- if $base.experts -}}{{- $_ := set $base.experts "channel" (include "moe.mtls.channel" (dict "root" . "serverName" (ternary "localhost" "" (and $v.routers.sidecarExperts true))) | fromJson) -}}{{- end -}}
{{- if $base.kv_store -}}{{- $_ := set $base.kv_store "channel" (include "moe.mtls.channel" (dict "root" .) | fromJson) -}}{{- end -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $base (deepCopy ($v.routers.config | default dict))) -}}
{{- end -}}

{{/* (dict "root" $ "pool" POOL "index" I) */}}
{{- define "moe.config.expertWorker" -}}
{{- $v := .root.Values -}}
{{- $grpcPort := int $v.ports.expertGrpc -}}
{{- $metricsPort := int $v.ports.metrics -}}
{{- /* Sidecars: one port pair per pool in the shared pod network. They bind 0.0.0.0 like every
     service in a pod (kubelet's gRPC probes dial the pod IP); the router dials 127.0.0.1 and the
     NetworkPolicy opens no worker port of a router pod to other pods. */ -}}
{{- $host := "0.0.0.0" -}}
{{- if $v.routers.sidecarExperts -}}
{{- $grpcPort = add $grpcPort .index | int -}}
{{- $metricsPort = add $metricsPort 1 .index | int -}}
{{- end -}}
{{- $base := dict
  "core" (dict "model_dir" (include "moe.modelDir" .root) "experts" .pool.experts "activations" $v.numerics.activations "weights" ($v.numerics.weights | default "checkpoint"))
  "shm" (dict "enabled" (and $v.routers.sidecarExperts true) "dir" "/dev/shm")
  "grpc" (dict "host" $host "port" $grpcPort)
  "metrics" (dict "host" "0.0.0.0" "port" $metricsPort)
  "log_level" $v.logLevel
-}}
{{- if $v.security.mtls.enabled -}}
{{- $_ := mustMergeOverwrite $base.grpc (include "moe.mtls.server" (dict "root" .root "component" "expert-worker") | fromJson) -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $base (deepCopy (.pool.config | default dict))) -}}
{{- end -}}

{{- define "moe.kvStoreAddresses" -}}
{{- $root := . -}}
{{- $name := include "moe.component" (dict "root" $root "component" "kv-store") -}}
{{- $out := list -}}
{{- range $i := until (int .Values.kvStore.replicas) -}}
{{- $out = append $out (printf "%s:%d" (include "moe.podDns" (dict "root" $root "sts" $name "service" $name "ordinal" $i)) (int $root.Values.ports.kvStoreGrpc)) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{- define "moe.config.kvStore" -}}
{{- $v := .Values -}}
{{- $base := dict
  "core" (dict "l2_bytes" (int64 $v.kvStore.l2Bytes) "l3_bytes" (int64 $v.kvStore.l3Bytes) "l3_dir" $v.kvStore.l3.mountPath "compression" (ternary "int8" "zstd" ($v.numerics.lossyKv | default false)))
  "grpc" (dict "host" "0.0.0.0" "port" (int $v.ports.kvStoreGrpc))
  "metrics" (dict "host" "0.0.0.0" "port" (int $v.ports.metrics))
  "log_level" $v.logLevel
-}}
{{- if $v.security.mtls.enabled -}}
{{- $_ := mustMergeOverwrite $base.grpc (include "moe.mtls.server" (dict "root" . "component" "kv-store") | fromJson) -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $base (deepCopy ($v.kvStore.config | default dict))) -}}
{{- end -}}

{{/* (dict "root" $ "role" "asr"|"tts") */}}
{{- define "moe.config.voice" -}}
{{- $v := .root.Values -}}
{{- $port := ternary $v.ports.asrGrpc $v.ports.ttsGrpc (eq .role "asr") -}}
{{- $base := dict
  "grpc" (dict "host" "0.0.0.0" "port" (int $port))
  "metrics" (dict "host" "0.0.0.0" "port" (int $v.ports.metrics))
  "log_level" $v.logLevel
-}}
{{- if $v.security.mtls.enabled -}}
{{- $_ := mustMergeOverwrite $base.grpc (include "moe.mtls.server" (dict "root" .root "component" .role) | fromJson) -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite $base (deepCopy ((index $v .role).config | default dict))) -}}
{{- end -}}
