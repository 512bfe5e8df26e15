{{- define "moe.adapterRules" -}}
rules:
  # gateway: in-flight generations per pod (gateway.autoscaling.targetRequestsRunning)
  - seriesQuery: 'moe_requests_running{job="gateway",namespace!="",pod!=""}'
    resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
    name: {matches: "^moe_requests_running$", as: "moe_gateway_requests_running"}
    metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>,job="gateway"}) by (<<.GroupBy>>)'
  # routers: queue depth per pod (routers.autoscaling.targetQueueDepth)
  - seriesQuery: 'moe_requests_waiting{job="router",namespace!="",pod!=""}'
    resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
    name: {matches: "^moe_requests_waiting$", as: "moe_router_requests_waiting"}
    metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>,job="router"}) by (<<.GroupBy>>)'
  # routers: TTFT p99 per pod over 2 minutes (routers.autoscaling.targetTtftP99Seconds)
  - seriesQuery: 'moe_request_ttft_seconds_bucket{job="router",namespace!="",pod!=""}'
    resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
    name: {matches: "^moe_request_ttft_seconds_bucket$", as: "moe_router_ttft_p99_seconds"}
    metricsQuery: 'histogram_quantile(0.99, sum(rate(<<.Series>>{<<.LabelMatchers>>,job="router"}[2m])) by (le, <<.GroupBy>>))'
  # asr: realtime factor per pod (asr.autoscaling.targetRealtimeFactor)
  - seriesQuery: 'moe_asr_realtime_factor{job="asr",namespace!="",pod!=""}'
    resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
    name: {matches: "^moe_asr_realtime_factor$", as: "moe_asr_realtime_factor"}
    metricsQuery: 'max(<<.Series>>{<<.LabelMatchers>>,job="asr"}) by (<<.GroupBy>>)'
  # tts: first-chunk p99 per pod (tts.autoscaling.targetFirstChunkP99Seconds)
  - seriesQuery: 'moe_tts_first_chunk_seconds_bucket{job="tts",namespace!="",pod!=""}'
    resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
    name: {matches: "^moe_tts_first_chunk_seconds_bucket$", as: "moe_tts_first_chunk_p99_seconds"}
    metricsQuery: 'histogram_quantile(0.99, sum(rate(<<.Series>>{<<.LabelMatchers>>,job="tts"}[2m])) by (le, <<.GroupBy>>))'
externalRules:
  # For the operator's expert-pool autoscaler (MoECluster spec.autoscaling.targets): the
  # routers' view of each worker's busy fraction, and the worst layer's balancedness.
  - seriesQuery: 'moe_expert_replica_utilisation{job="router",namespace!=""}'
    resources: {overrides: {namespace: {resource: namespace}}}
    name: {matches: "^moe_expert_replica_utilisation$", as: "moe_expert_replica_utilisation_max"}
    metricsQuery: 'max(<<.Series>>{<<.LabelMatchers>>,job="router"}) by (namespace, worker)'
  - seriesQuery: 'moe_expert_balancedness{job="router",namespace!=""}'
    resources: {overrides: {namespace: {resource: namespace}}}
    name: {matches: "^moe_expert_balancedness$", as: "moe_expert_balancedness_min"}
    metricsQuery: 'min(<<.Series>>{<<.LabelMatchers>>,job="router"}) by (namespace)'
{{- end -}}
