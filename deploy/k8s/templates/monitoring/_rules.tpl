{{/*
Prometheus recording and alert rules (a plain rule file: `groups:`). Metric names are exactly
DESIGN.md §5's (and the service READMEs'); where two services export one name (gateway and
router both export the request metrics) the rules select by `job`, which the scrape config sets
to the role (deploy/monitoring/prometheus.yaml; the PodMonitor/ServiceMonitor's jobLabel).
Rules of roles that are not enabled (operator, kv-store, asr, tts) are left out unless
monitoring.rulesForDisabledRoles. Every alert has a runbook_url into deploy/RUNBOOK.md.
*/}}
{{- define "moe.rules" -}}
{{- $a := .Values.monitoring.alerts -}}
{{- $rb := $a.runbookBaseUrl -}}
{{- $all := .Values.monitoring.rulesForDisabledRoles -}}
groups:
  - name: moe.recording
    rules:
      # Request latency quantiles per serving role: the gateway's is what clients see, the
      # router's excludes the network and the gateway (the diagnosis tree compares the two).
      - record: job_model:moe_request_ttft_seconds:p99_5m
        expr: histogram_quantile(0.99, sum by (namespace, job, model, le) (rate(moe_request_ttft_seconds_bucket{job=~"gateway|router"}[5m])))
      - record: job_model:moe_request_ttft_seconds:p50_5m
        expr: histogram_quantile(0.5, sum by (namespace, job, model, le) (rate(moe_request_ttft_seconds_bucket{job=~"gateway|router"}[5m])))
      - record: job_model:moe_request_tpot_seconds:p99_5m
        expr: histogram_quantile(0.99, sum by (namespace, job, model, le) (rate(moe_request_tpot_seconds_bucket{job=~"gateway|router"}[5m])))
      - record: job_model:moe_request_tpot_seconds:p50_5m
        expr: histogram_quantile(0.5, sum by (namespace, job, model, le) (rate(moe_request_tpot_seconds_bucket{job=~"gateway|router"}[5m])))
      - record: job_model:moe_request_e2e_seconds:p99_5m
        expr: histogram_quantile(0.99, sum by (namespace, job, model, le) (rate(moe_request_e2e_seconds_bucket{job=~"gateway|router"}[5m])))
      - record: model:moe_request_queue_seconds:p99_5m
        expr: histogram_quantile(0.99, sum by (namespace, model, le) (rate(moe_request_queue_seconds_bucket{job="router"}[5m])))
      - record: stage:moe_stage_seconds:p99_5m
        expr: histogram_quantile(0.99, sum by (namespace, stage, le) (rate(moe_stage_seconds_bucket{job="gateway"}[5m])))
      - record: job_model_finish_reason:moe_requests:rate5m
        expr: sum by (namespace, job, model, finish_reason) (rate(moe_requests_total{job=~"gateway|router"}[5m]))
      - record: job_model:moe_request_errors:ratio_rate5m
        expr: |-
          sum by (namespace, job, model) (rate(moe_requests_total{job=~"gateway|router",finish_reason="error"}[5m]))
            / sum by (namespace, job, model) (rate(moe_requests_total{job=~"gateway|router"}[5m]))
      - record: model:moe_generation_tokens:rate5m
        expr: sum by (namespace, model) (rate(moe_generation_tokens_total{job="router"}[5m]))
      # A tier's queries are the lookups that missed every tier above it, so this is each
      # tier's own hit rate (DESIGN.md §5). The routers do the lookups.
      - record: tier:moe_prefix_cache_hit_ratio:rate5m
        expr: |-
          sum by (namespace, tier) (rate(moe_prefix_cache_hits_total{job="router"}[5m]))
            / sum by (namespace, tier) (rate(moe_prefix_cache_queries_total{job="router"}[5m]))
      - record: tier:moe_kv_usage_ratio:max
        expr: max by (namespace, tier) (moe_kv_usage_ratio)
      - record: model:moe_requests_waiting:sum
        expr: sum by (namespace, model) (moe_requests_waiting{job="router"})
      - record: model:moe_requests_running:sum
        expr: sum by (namespace, model) (moe_requests_running{job="router"})
      # Expert load: the worst layer across routers, the busiest replica, the slowest worker.
      - record: layer:moe_expert_balancedness:min
        expr: min by (namespace, layer) (moe_expert_balancedness{job="router"})
      - record: worker:moe_expert_replica_utilisation:max
        expr: max by (namespace, worker) (moe_expert_replica_utilisation{job="router"})
      - record: worker:moe_expert_call_seconds:p99_5m
        expr: histogram_quantile(0.99, sum by (namespace, worker, le) (rate(moe_expert_call_seconds_bucket{job="router"}[5m])))
      - record: worker:moe_expert_call_errors:rate5m
        expr: sum by (namespace, worker) (rate(moe_expert_call_errors_total{job="router"}[5m]))
  - name: moe.alerts
    rules:
      - alert: MoEGatewayDown
        expr: up{job="gateway"} == 0
        for: 2m
        labels: {severity: critical}
        annotations:
          summary: {{`"gateway {{ $labels.instance }} is not scraped"`}}
          description: {{`"Prometheus cannot scrape the gateway {{ $labels.instance }} ({{ $labels.namespace }}) for 2 minutes: the API is degraded or down."`}}
          runbook_url: {{ printf "%s#moegatewaydown" $rb }}
      - alert: MoERouterDown
        expr: up{job="router"} == 0
        for: 2m
        labels: {severity: critical}
        annotations:
          summary: {{`"router {{ $labels.instance }} is not scraped"`}}
          description: {{`"Router {{ $labels.instance }} ({{ $labels.namespace }}) is down for 2 minutes; the gateway routes around it, with less capacity and colder caches."`}}
          runbook_url: {{ printf "%s#moerouterdown" $rb }}
      - alert: MoEExpertWorkerDown
        expr: up{job="expert-worker"} == 0
        for: 2m
        labels: {severity: critical}
        annotations:
          summary: {{`"expert worker {{ $labels.instance }} is down"`}}
          description: {{`"Expert worker {{ $labels.instance }} ({{ $labels.namespace }}) is not scraped for 2 minutes. Routers use other replicas of its experts; requests whose experts have no live replica fail."`}}
          runbook_url: {{ printf "%s#moeexpertworkerdown" $rb }}
      - alert: MoEExpertCallErrors
        expr: worker:moe_expert_call_errors:rate5m > 0.1
        for: 5m
        labels: {severity: warning}
        annotations:
          summary: {{`"expert calls to worker {{ $labels.worker }} fail"`}}
          description: {{`"Routers see {{ $value | humanize }} failed RunExperts calls/s to worker {{ $labels.worker }} ({{ $labels.namespace }}) over 5 minutes."`}}
          runbook_url: {{ printf "%s#moeexpertcallerrors" $rb }}
      - alert: MoEExpertImbalance
        expr: |-
          layer:moe_expert_balancedness:min < {{ $a.balancednessMin }}
            and on (namespace) model:moe_generation_tokens:rate5m > 0
        for: 15m
        labels: {severity: warning}
        annotations:
          summary: {{`"experts of layer {{ $labels.layer }} are imbalanced"`}}
          description: {{ printf "\"Measured balancedness (mean/max worker load) of layer {{ $labels.layer }} ({{ $labels.namespace }}) is {{ $value | humanize }}, below %v for 15 minutes: recalibrate the placement.\"" $a.balancednessMin }}
          runbook_url: {{ printf "%s#moeexpertimbalance" $rb }}
      - alert: MoETTFTP99High
        expr: job_model:moe_request_ttft_seconds:p99_5m{job="gateway"} > {{ $a.ttftP99Seconds }}
        for: 10m
        labels: {severity: warning}
        annotations:
          summary: {{`"TTFT p99 of {{ $labels.model }} is {{ $value | humanizeDuration }}"`}}
          description: {{ printf "\"Time to first token p99 at the gateway ({{ $labels.namespace }}, model {{ $labels.model }}) is above %vs for 10 minutes. Follow the slow-response tree: network, routing, cache.\"" $a.ttftP99Seconds }}
          runbook_url: {{ printf "%s#moettftp99high" $rb }}
      - alert: MoEQueueGrowing
        expr: |-
          model:moe_requests_waiting:sum > {{ $a.queueDepth }}
            and deriv(model:moe_requests_waiting:sum[10m]) > 0
        for: 10m
        labels: {severity: warning}
        annotations:
          summary: {{`"router queues of {{ $labels.model }} keep growing"`}}
          description: {{ printf "\"{{ $value }} requests wait in the routers' queues ({{ $labels.namespace }}, more than %v) and the queue grew over the last 10 minutes: the cluster is short of capacity.\"" $a.queueDepth }}
          runbook_url: {{ printf "%s#moequeuegrowing" $rb }}
      - alert: MoEErrorRatioHigh
        expr: job_model:moe_request_errors:ratio_rate5m{job="gateway"} > {{ $a.errorRatio }}
        for: 5m
        labels: {severity: critical}
        annotations:
          summary: {{`"{{ $value | humanizePercentage }} of {{ $labels.model }} requests end in error"`}}
          description: {{ printf "\"More than %v of the requests the gateway finished ({{ $labels.namespace }}, model {{ $labels.model }}) ended with finish_reason error over 5 minutes.\"" $a.errorRatio }}
          runbook_url: {{ printf "%s#moeerrorratiohigh" $rb }}
{{- if or $all (and .Values.operator.enabled .Values.operator.install) }}
  - name: moe.operator
    rules:
      - record: namespace:moe_operator_reconcile_errors:ratio_rate15m
        expr: |-
          sum by (namespace) (rate(moe_operator_reconciles_total{job="operator",result="error"}[15m]))
            / sum by (namespace) (rate(moe_operator_reconciles_total{job="operator"}[15m]))
      - alert: MoEOperatorDown
        expr: up{job="operator"} == 0
        for: 5m
        labels: {severity: warning}
        annotations:
          summary: {{`"operator {{ $labels.instance }} is down"`}}
          description: {{`"Operator replica {{ $labels.instance }} ({{ $labels.namespace }}) is not scraped for 5 minutes. The running cluster keeps serving; while no replica leads, spec changes, expert-pool autoscaling and recalibrations wait."`}}
          runbook_url: {{ printf "%s#moeoperatordown" $rb }}
      - alert: MoEOperatorNoLeader
        expr: max by (namespace) (moe_operator_leader{job="operator"}) == 0
        for: 5m
        labels: {severity: warning}
        annotations:
          summary: {{`"no operator replica leads in {{ $labels.namespace }}"`}}
          description: {{`"Operator replicas run in {{ $labels.namespace }} but none has held the Lease for 5 minutes: nothing is reconciled, scaled or recalibrated."`}}
          runbook_url: {{ printf "%s#moeoperatornoleader" $rb }}
      - alert: MoEOperatorReconcileErrors
        expr: namespace:moe_operator_reconcile_errors:ratio_rate15m > 0.5
        for: 15m
        labels: {severity: warning}
        annotations:
          summary: {{`"most MoECluster reconciles fail in {{ $labels.namespace }}"`}}
          description: {{`"{{ $value | humanizePercentage }} of the operator's reconciles in {{ $labels.namespace }} failed over 15 minutes: the MoECluster's Degraded condition and events say why."`}}
          runbook_url: {{ printf "%s#moeoperatorreconcileerrors" $rb }}
      - alert: MoEOperatorRecalibrationFailed
        expr: |-
          sum by (namespace) (increase(moe_operator_recalibrations_total{job="operator",result="failed"}[30m])) > 0
            or sum by (namespace) (increase(moe_operator_placement_changes_total{job="operator",result="failed"}[30m])) > 0
        labels: {severity: warning}
        annotations:
          summary: {{`"a recalibration or placement change failed in {{ $labels.namespace }}"`}}
          description: {{`"The operator's recalibrations or expert-pool placement changes failed in the last 30 minutes ({{ $labels.namespace }}): the routers keep the old placement, and an expert pool does not scale until one succeeds."`}}
          runbook_url: {{ printf "%s#moeoperatorrecalibrationfailed" $rb }}
{{- end }}
{{- if or $all .Values.kvStore.enabled }}
  - name: moe.kv-store
    rules:
      - record: tier_op:moe_kv_store_op_seconds:p99_5m
        expr: histogram_quantile(0.99, sum by (namespace, tier, op, le) (rate(moe_kv_store_op_seconds_bucket{job="kv-store"}[5m])))
      - record: tier_op:moe_kv_store_bytes:rate5m
        expr: sum by (namespace, tier, op) (rate(moe_kv_store_bytes_total{job="kv-store"}[5m]))
      - record: tier_reason:moe_kv_evictions:rate5m
        expr: sum by (namespace, tier, reason) (rate(moe_kv_evictions_total{job="kv-store"}[5m]))
      - alert: MoEKvStoreDown
        expr: up{job="kv-store"} == 0
        for: 2m
        labels: {severity: warning}
        annotations:
          summary: {{`"kv-store {{ $labels.instance }} is down"`}}
          description: {{`"kv-store {{ $labels.instance }} ({{ $labels.namespace }}) is not scraped for 2 minutes: its L2/L3 blocks are cache misses (more prefill, higher TTFT), never failed requests."`}}
          runbook_url: {{ printf "%s#moekvstoredown" $rb }}
      - alert: MoEKvCorruptBlocks
        expr: sum by (namespace, instance) (increase(moe_kv_corrupt_blocks_total{job="kv-store"}[15m])) > 0
        labels: {severity: warning}
        annotations:
          summary: {{`"kv-store {{ $labels.instance }} dropped corrupt blocks"`}}
          description: {{`"Blocks or cached responses on kv-store {{ $labels.instance }} ({{ $labels.namespace }}) failed their checksums in the last 15 minutes: each was discarded and recomputed (outputs are unchanged), but its disk or filesystem is damaging data."`}}
          runbook_url: {{ printf "%s#moekvcorruptblocks" $rb }}
      - alert: MoEL2HitRateLow
        expr: |-
          tier:moe_prefix_cache_hit_ratio:rate5m{tier="l2"} < {{ $a.l2HitRateMin }}
            and on (namespace, tier) sum by (namespace, tier) (rate(moe_prefix_cache_queries_total{job="router",tier="l2"}[5m])) > 1
        for: 30m
        labels: {severity: warning}
        annotations:
          summary: {{`"L2 hit rate is {{ $value | humanizePercentage }}"`}}
          description: {{ printf "\"L2's own hit rate (hits / queries of the lookups that missed L1) in {{ $labels.namespace }} is below %v for 30 minutes.\"" $a.l2HitRateMin }}
          runbook_url: {{ printf "%s#moel2hitratelow" $rb }}
{{- end }}
{{- if or $all .Values.asr.enabled .Values.tts.enabled }}
  - name: moe.voice
    rules:
{{- if or $all .Values.asr.enabled }}
      - record: namespace:moe_asr_finalize_seconds:p99_5m
        expr: histogram_quantile(0.99, sum by (namespace, le) (rate(moe_asr_finalize_seconds_bucket{job="asr"}[5m])))
      - record: namespace:moe_asr_realtime_factor:max
        expr: max by (namespace) (moe_asr_realtime_factor{job="asr"})
{{- end }}
{{- if or $all .Values.tts.enabled }}
      - record: namespace:moe_tts_first_chunk_seconds:p99_5m
        expr: histogram_quantile(0.99, sum by (namespace, le) (rate(moe_tts_first_chunk_seconds_bucket{job="tts"}[5m])))
      - alert: MoETTSFirstChunkP99High
        expr: namespace:moe_tts_first_chunk_seconds:p99_5m > {{ $a.ttsFirstChunkP99Seconds }}
        for: 10m
        labels: {severity: warning}
        annotations:
          summary: {{`"TTS first-chunk p99 is {{ $value | humanizeDuration }}"`}}
          description: {{ printf "\"The p99 time from text to the first audio chunk in {{ $labels.namespace }} is above %vs for 10 minutes: voice answers start late.\"" $a.ttsFirstChunkP99Seconds }}
          runbook_url: {{ printf "%s#moettsfirstchunkp99high" $rb }}
{{- end }}
{{- end }}
{{- end -}}
