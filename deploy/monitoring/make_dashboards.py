# Writes the Grafana dashboards (deploy/k8s/files/dashboards/*.json). Edit here, then run
#   python3 deploy/monitoring/make_dashboards.py deploy/k8s/files/dashboards
# (the deploy test checks that the committed JSON is this script's output).
import json, sys
DS = {"type": "prometheus", "uid": "${datasource}"}
class D:
    def __init__(s): s.panels=[]; s.y=0; s.id=1; s.x=0; s.rowh=0
    def row(s, title, desc=""):
        s.newline(); s.panels.append({"type":"row","title":title,"id":s.id,"collapsed":False,"gridPos":{"h":1,"w":24,"x":0,"y":s.y},"panels":[]}); s.id+=1; s.y+=1
    def newline(s):
        if s.x: s.y+=s.rowh; s.x=0; s.rowh=0
    def panel(s, title, targets, kind="timeseries", unit="short", w=8, h=8, desc="", extra=None):
        if s.x + w > 24: s.newline()
        p={"type":kind,"title":title,"id":s.id,"datasource":DS,"description":desc,
           "gridPos":{"h":h,"w":w,"x":s.x,"y":s.y},
           "fieldConfig":{"defaults":{"unit":unit},"overrides":[]},
           "options":{},
           "targets":[{"datasource":DS,"refId":chr(65+i),"expr":e,"legendFormat":l} for i,(e,l) in enumerate(targets)]}
        if kind=="timeseries": p["options"]={"legend":{"displayMode":"table","placement":"bottom","calcs":["lastNotNull","max"]},"tooltip":{"mode":"multi"}}
        if extra: p.update(extra)
        s.panels.append(p); s.id+=1; s.x+=w; s.rowh=max(s.rowh,h)
    def var(name, q, label, multi=True, inc=True):
        return {"name":name,"label":label,"type":"query","datasource":DS,"query":{"query":q,"refId":name},"definition":q,"refresh":2,"multi":multi,"includeAll":inc,"allValue":".*" if inc else None,"current":{},"sort":1}
def dashboard(uid, title, desc, d, variables, tags):
    return {"uid":uid,"title":title,"description":desc,"tags":tags,"editable":True,"graphTooltip":1,"schemaVersion":39,"version":1,
            "time":{"from":"now-1h","to":"now"},"refresh":"30s","timezone":"",
            "annotations":{"list":[{"builtIn":1,"datasource":{"type":"grafana","uid":"-- Grafana --"},"enable":True,"hide":True,"iconColor":"rgba(0, 211, 255, 1)","name":"Annotations & Alerts","type":"dashboard"},
               {"datasource":DS,"enable":True,"iconColor":"orange","name":"Recalibrations","expr":"changes(moe_placement_version{job=\"router\",namespace=~\"$namespace\"}[1m]) > 0","titleFormat":"placement version changed","tagKeys":"pod"}]},
            "templating":{"list":[{"name":"datasource","label":"Prometheus","type":"datasource","query":"prometheus","current":{},"hide":0}]+variables},
            "panels":d.panels,"links":[{"title":"Runbook","type":"link","url":"https://github.com/moe-cluster/moe-cluster/blob/main/deploy/RUNBOOK.md","targetBlank":True}]}
NS='namespace=~"$namespace"'; M='model=~"$model"'
G=f'job="gateway",{NS},{M}'; R=f'job="router",{NS},{M}'; RN=f'job="router",{NS}'
RI='[$__rate_interval]'
def q(p, metric, sel, by): return f'histogram_quantile({p}, sum by ({by}le) (rate({metric}_bucket{{{sel}}}{RI})))'

d=D()
d.row("Overview: is it slow, is it failing?")
d.panel("Requests / s by finish reason", [(f'sum by (finish_reason) (rate(moe_requests_total{{{G}}}{RI}))',"{{finish_reason}}")], unit="reqps", desc="Finished requests at the gateway.")
d.panel("TTFT p99: gateway vs router", [(q(0.99,"moe_request_ttft_seconds",G,""),"gateway p99"),(q(0.99,"moe_request_ttft_seconds",R,""),"router p99"),(q(0.5,"moe_request_ttft_seconds",G,""),"gateway p50")], unit="s", desc="Gateway minus router = network + gateway (parse, route, render). A gap points at the network branch; equal and high points at routing or cache.")
d.panel("Error ratio", [(f'sum(rate(moe_requests_total{{{G},finish_reason="error"}}{RI})) / sum(rate(moe_requests_total{{{G}}}{RI}))',"gateway"),(f'sum(rate(moe_requests_total{{{R},finish_reason="error"}}{RI})) / sum(rate(moe_requests_total{{{R}}}{RI}))',"routers")], unit="percentunit")
d.panel("TPOT p50 / p99", [(q(0.5,"moe_request_tpot_seconds",R,""),"router p50"),(q(0.99,"moe_request_tpot_seconds",R,""),"router p99"),(q(0.99,"moe_request_tpot_seconds",G,""),"gateway p99")], unit="s", desc="Time per output token after the first.")
d.panel("End-to-end p50 / p99", [(q(0.5,"moe_request_e2e_seconds",G,""),"p50"),(q(0.99,"moe_request_e2e_seconds",G,""),"p99")], unit="s")
d.panel("Tokens / s", [(f'sum(rate(moe_generation_tokens_total{{{R}}}{RI}))',"generated"),(f'sum(rate(moe_prompt_tokens_total{{{R}}}{RI}))',"prompt"),(f'sum(rate(moe_cached_prompt_tokens_total{{{R}}}{RI}))',"prompt from cache")], unit="short")
d.row("1. Network: client -> gateway -> router")
d.panel("Per-stage latency p99 (gateway)", [(f'histogram_quantile(0.99, sum by (stage, le) (rate(moe_stage_seconds_bucket{{job="gateway",{NS}}}{RI})))',"{{stage}}")], unit="s", desc="parse, route, render at the gateway; later kv_fetch, prefill, decode, asr, tts.")
d.panel("Gateway overhead on TTFT (p50)", [(f'{q(0.5,"moe_request_ttft_seconds",G,"")} - {q(0.5,"moe_request_ttft_seconds",R,"")}',"gateway p50 - router p50")], unit="s", desc="Grows with network trouble between gateway and routers, or an overloaded gateway.")
d.panel("HTTP responses / s by code", [(f'sum by (code) (rate(moe_gateway_http_responses_total{{job="gateway",{NS}}}{RI}))',"{{code}}")], unit="reqps")
d.panel("Open connections, in-flight generations", [(f'sum(moe_gateway_connections_open{{job="gateway",{NS}}})',"connections"),(f'sum(moe_requests_running{{{G}}})',"in flight")], unit="short")
d.panel("Scrape health", [(f'up{{job=~"gateway|router|expert-worker|kv-store|asr|tts",{NS}}}',"{{job}} {{instance}}")], unit="short", desc="0 = the target is down (MoE*Down alerts).")
d.row("2. Routing: queues, scheduler, experts")
d.panel("Queue depth per router", [(f'moe_requests_waiting{{{R}}}',"{{pod}}{{instance}} waiting"),(f'moe_requests_running{{{R}}}',"{{pod}}{{instance}} running")], unit="short", desc="Waiting requests grow when the routers are short of capacity (MoEQueueGrowing).")
d.panel("Queue time p99", [(q(0.99,"moe_request_queue_seconds",R,""),"p99"),(q(0.5,"moe_request_queue_seconds",R,""),"p50")], unit="s")
d.panel("Expert call p99 per worker", [(f'histogram_quantile(0.99, sum by (worker, le) (rate(moe_expert_call_seconds_bucket{{{RN}}}{RI})))',"worker {{worker}}")], unit="s")
d.panel("Expert balancedness per layer", [(f'min by (layer) (moe_expert_balancedness{{{RN}}})',"layer {{layer}}")], unit="percentunit", desc="Mean / max worker load over the last window, worst router. Below the threshold for long: recalibrate (MoEExpertImbalance).", extra={"fieldConfig":{"defaults":{"unit":"percentunit","min":0,"max":1},"overrides":[]}})
d.panel("Replica utilisation per worker", [(f'max by (worker) (moe_expert_replica_utilisation{{{RN}}})',"worker {{worker}}")], unit="percentunit", desc="Busy fraction; replicas above 0.85 are avoided while another is below it.")
d.panel("Expert call errors / s per worker", [(f'sum by (worker) (rate(moe_expert_call_errors_total{{{RN}}}{RI}))',"worker {{worker}}")], unit="short")
d.panel("Expert load heat map (layer $layer)", [(f'sum by (expert) (rate(moe_expert_tokens_total{{{RN},layer=~"$layer"}}{RI}))',"{{expert}}")], kind="heatmap", w=16, h=9, desc="Tokens per second routed to each expert of the chosen layer(s); hot rows are hot experts.", extra={"options":{"calculate":False,"yAxis":{"axisPlacement":"left"},"color":{"mode":"scheme","scheme":"Oranges","steps":64},"cellGap":1,"legend":{"show":True},"tooltip":{"show":True,"yHistogram":False}}})
d.panel("Hottest experts' share (rank 0-3)", [(f'max by (layer, rank) (moe_expert_hot_share{{{RN},layer=~"$layer"}})',"layer {{layer}} rank {{rank}}")], unit="percentunit", w=8, h=9)
d.panel("Placement version, recalibrations", [(f'max(moe_placement_version{{{RN}}})',"placement version"),(f'sum(increase(moe_recalibrations_total{{{RN}}}[1h]))',"recalibrations / 1h")], unit="short")
d.panel("Layer dispatch p99 (all experts of a layer)", [(f'histogram_quantile(0.99, sum by (le) (rate(moe_expert_layer_dispatch_seconds_bucket{{{RN}}}{RI})))',"p99")], unit="s")
d.panel("Worker calls / s and rejected", [(f'sum by (instance) (rate(moe_expert_worker_calls_total{{job="expert-worker",{NS}}}{RI}))',"{{instance}} calls"),(f'sum by (instance) (rate(moe_expert_worker_rejected_calls_total{{job="expert-worker",{NS}}}{RI}))',"{{instance}} rejected")], unit="short")
d.row("3. Cache: KV tiers")
d.panel("KV usage by tier", [(f'max by (tier) (moe_kv_usage_ratio{{{NS}}})',"{{tier}}")], unit="percentunit", extra={"fieldConfig":{"defaults":{"unit":"percentunit","min":0,"max":1},"overrides":[]}})
d.panel("Prefix-cache hit rate by tier (own)", [(f'sum by (tier) (rate(moe_prefix_cache_hits_total{{{RN}}}{RI})) / sum by (tier) (rate(moe_prefix_cache_queries_total{{{RN}}}{RI}))',"{{tier}}")], unit="percentunit", desc="A tier's queries are the lookups that missed every tier above it: hits/queries is that tier's own hit rate. L2 below 85% fires MoEL2HitRateLow.")
d.panel("Prompt tokens served from cache", [(f'sum(rate(moe_cached_prompt_tokens_total{{{R}}}{RI})) / sum(rate(moe_prompt_tokens_total{{{R}}}{RI}))',"cached / prompt")], unit="percentunit")
d.panel("Prefix-cache lookups / s by tier", [(f'sum by (tier) (rate(moe_prefix_cache_queries_total{{{RN}}}{RI}))',"{{tier}} queries"),(f'sum by (tier) (rate(moe_prefix_cache_hits_total{{{RN}}}{RI}))',"{{tier}} hits")], unit="short")
d.row("Errors")
d.panel("Router finish reasons / s", [(f'sum by (finish_reason) (rate(moe_requests_total{{{R}}}{RI}))',"{{finish_reason}}")], unit="reqps")
d.panel("Gateway rejections / s by reason", [(f'sum by (reason) (rate(moe_gateway_rejected_total{{job="gateway",{NS}}}{RI}))',"{{reason}}")], unit="reqps", desc="429 (rate limit), 503 (in-flight bound, draining, no router), 4xx input errors.")
d.panel("HTTP 5xx ratio", [(f'sum(rate(moe_gateway_http_responses_total{{job="gateway",{NS},code=~"5.."}}{RI})) / sum(rate(moe_gateway_http_responses_total{{job="gateway",{NS}}}{RI}))',"5xx / all")], unit="percentunit")
V=[D.var("namespace",'label_values(moe_requests_total{job="gateway"}, namespace)',"Namespace"),
   D.var("model",'label_values(moe_requests_total{job="gateway",namespace=~"$namespace"}, model)',"Model"),
   D.var("layer",'label_values(moe_expert_balancedness{job="router",namespace=~"$namespace"}, layer)',"Layer")]
main=dashboard("moe-cluster","MoE cluster: slow-response diagnosis","Follows the slow-response tree of deploy/RUNBOOK.md: overview, then 1. network (gateway vs router), 2. routing (queues, experts), 3. cache (KV tiers).",d,V,["moe","inference"])

k=D()
k.row("kv-store: L2 (host memory) and L3 (SSD)")
k.panel("Op latency p99 by tier and op", [(f'histogram_quantile(0.99, sum by (tier, op, le) (rate(moe_kv_store_op_seconds_bucket{{job="kv-store",{NS}}}{RI})))',"{{tier}} {{op}}")], unit="s")
k.panel("Bytes / s by tier and op", [(f'sum by (tier, op) (rate(moe_kv_store_bytes_total{{job="kv-store",{NS}}}{RI}))',"{{tier}} {{op}}")], unit="Bps")
k.panel("Evictions / s", [(f'sum by (tier, reason) (rate(moe_kv_evictions_total{{job="kv-store",{NS}}}{RI}))',"{{tier}} {{reason}}")], unit="short")
k.panel("Corrupt blocks discarded / s", [(f'sum(rate(moe_kv_corrupt_blocks_total{{job="kv-store",{NS}}}{RI}))',"corrupt")], unit="short")
k.panel("Response cache hits / s", [(f'sum(rate(moe_response_cache_hits_total{{{NS}}}{RI}))',"hits")], unit="short")
k.panel("KV usage by tier", [(f'max by (tier) (moe_kv_usage_ratio{{{NS}}})',"{{tier}}")], unit="percentunit")
k.row("Voice: asr and tts")
k.panel("ASR finalize p99 (end of speech -> final transcript)", [(f'histogram_quantile(0.99, sum by (le) (rate(moe_asr_finalize_seconds_bucket{{job="asr",{NS}}}{RI})))',"p99")], unit="s")
k.panel("ASR realtime factor", [(f'max(moe_asr_realtime_factor{{job="asr",{NS}}})',"max")], unit="short", desc="processing time / audio time; above 1 the ASR falls behind.")
k.panel("TTS first chunk p50 / p99", [(f'histogram_quantile(0.99, sum by (le) (rate(moe_tts_first_chunk_seconds_bucket{{job="tts",{NS}}}{RI})))',"p99"),(f'histogram_quantile(0.5, sum by (le) (rate(moe_tts_first_chunk_seconds_bucket{{job="tts",{NS}}}{RI})))',"p50")], unit="s")
KV=[D.var("namespace",'label_values(up{job=~"kv-store|asr|tts"}, namespace)',"Namespace")]
kvd=dashboard("moe-kv-voice","MoE cluster: kv-store and voice","The kv-store's L2/L3 tiers and the asr/tts services (rendered when they are enabled).",k,KV,["moe","inference"])
out=sys.argv[1]
for name, d in (("moe-cluster.json", main), ("moe-kv-voice.json", kvd)):
    with open(out + "/" + name, "w") as f:
        json.dump(d, f, indent=2)
        f.write("\n")
