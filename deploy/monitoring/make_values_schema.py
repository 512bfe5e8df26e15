# Writes deploy/k8s/values.schema.json (strict: an unknown or wrong value fails helm install).
#   python3 deploy/monitoring/make_values_schema.py deploy/k8s/values.schema.json
# (the deploy test checks that the committed schema is this script's output).
import json, sys
def obj(props, required=(), desc=None, extra=True):
    o = {"type": "object", "additionalProperties": False, "properties": props}
    if required: o["required"] = list(required)
    if desc: o["description"] = desc
    return o
def s(desc=None, **kw):
    o = {"type": "string", **kw}
    if desc: o["description"] = desc
    return o
def i(minimum=None, maximum=None, desc=None):
    o = {"type": "integer"}
    if minimum is not None: o["minimum"] = minimum
    if maximum is not None: o["maximum"] = maximum
    if desc: o["description"] = desc
    return o
def n(minimum=None, maximum=None, desc=None, exclusiveMinimum=None):
    o = {"type": "number"}
    if minimum is not None: o["minimum"] = minimum
    if maximum is not None: o["maximum"] = maximum
    if exclusiveMinimum is not None: o["exclusiveMinimum"] = exclusiveMinimum
    if desc: o["description"] = desc
    return o
b = {"type": "boolean"}
anyobj = {"type": "object"}
QTY = "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$"
quantity = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": QTY}]}
resources = obj({"requests": {"type": "object", "additionalProperties": quantity},
                 "limits": {"type": "object", "additionalProperties": quantity},
                 "claims": {"type": "array"}}, desc="Kubernetes ResourceRequirements of the container")
strmap = {"type": "object", "additionalProperties": {"type": "string"}}
tolerations = {"type": "array", "items": obj({"key": s(), "operator": s(enum=["Exists", "Equal"]), "value": s(),
    "effect": s(enum=["NoSchedule", "PreferNoSchedule", "NoExecute", ""]), "tolerationSeconds": i()})}
placing = {"nodeSelector": strmap, "tolerations": tolerations, "affinity": anyobj}
pdb = obj({"enabled": b, "maxUnavailable": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9]+%$"}]}}, required=["enabled", "maxUnavailable"])
grace = i(0, 3600, "seconds between SIGTERM and SIGKILL; longer than the service's drain timeout")
port = i(1, 65535)
probe = obj({"periodSeconds": i(1, 300), "failureThreshold": i(1, 10000), "timeoutSeconds": i(1, 300)}, required=["periodSeconds", "failureThreshold", "timeoutSeconds"])
DNS = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
EXPERT = "^(\\*|[0-9]+):[0-9]+(-[0-9]+)?$"
peers = {"type": "array", "items": anyobj, "description": "NetworkPolicy peers (podSelector / namespaceSelector / ipBlock)"}
hpa_base = {"enabled": b, "minReplicas": i(1, 1024), "maxReplicas": i(1, 1024)}
def hpa(extra):
    o = obj({**hpa_base, **extra}, required=["enabled", "minReplicas", "maxReplicas"])
    return o
config = {"type": "object", "description": "extra service config merged over the chart's (keys as `<service> --help` lists them)"}
voice = lambda name, target: obj({"enabled": b, "replicas": i(0, 1024), "resources": resources, "config": config,
    "terminationGracePeriodSeconds": grace, "pdb": pdb, "autoscaling": hpa(target), **placing},
    required=["enabled", "replicas"], desc=name + " (not built yet: disabled by default)")
ROLES = ["gateway", "router", "expert-worker", "kv-store", "asr", "tts", "admin"]
schema = {
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "moe-cluster chart values",
  "type": "object", "additionalProperties": False,
  "properties": {
    "global": anyobj,
    "image": obj({"repository": s(minLength=1), "tag": {"type": ["string", "number"]},
                  "pullPolicy": s(enum=["Always", "IfNotPresent", "Never"]),
                  "pullSecrets": {"type": "array", "items": obj({"name": s(minLength=1)}, required=["name"])}},
                 required=["repository", "tag", "pullPolicy"]),
    "nameOverride": s(maxLength=40), "fullnameOverride": s(maxLength=40),
    "commonLabels": strmap,
    "operator": obj({"enabled": b, "install": b, "replicas": i(0, 16), "leaderElection": b,
                     "prometheusUrl": {"type": "string", "anyOf": [{"const": ""}, {"pattern": "^https?://"}]},
                     "chartValues": anyobj, "resources": resources, **{k: placing[k] for k in ("nodeSelector", "tolerations")}},
                    required=["enabled"]),
    "model": obj({
        "name": s("model id", minLength=1, maxLength=128, pattern="^[A-Za-z0-9][A-Za-z0-9._-]*$"),
        "maxModelLen": i(0, 1048576),
        "source": s(enum=["preset", "pvc", "hostPath", "image"]),
        "preset": obj({"name": s(enum=["tiny", "small", "bench"]), "arch": s(enum=["mixtral", "qwen2_moe", "qwen3_moe", "olmoe"]), "dtype": s(enum=["f32", "bf16", "f16"])}, required=["name", "arch", "dtype"]),
        "pvc": obj({"claimName": s(maxLength=253), "subPath": s()}),
        "hostPath": obj({"path": {"type": "string", "anyOf": [{"const": ""}, {"pattern": "^/"}]}}),
        "image": obj({"path": {"type": "string", "anyOf": [{"const": ""}, {"pattern": "^/"}]}}),
        "mountPath": s(pattern="^/"),
      }, required=["name", "source"],
      ),
    "numerics": obj({"device": s(enum=["cpu", "gpu"]), "activations": s(enum=["f32", "bf16"]), "weights": s(enum=["checkpoint", "q8_0"]), "lossyKv": b}, required=["device", "activations"]),
    "logLevel": s(enum=["trace", "debug", "info", "warn", "error", "off"]),
    "ports": obj({k: port for k in ["gatewayHttp", "routerGrpc", "expertGrpc", "kvStoreGrpc", "asrGrpc", "ttsGrpc", "metrics"]}),
    "podSecurityContext": anyobj, "containerSecurityContext": anyobj,
    "serviceAccount": obj({"create": b, "annotations": strmap}),
    **placing, "podAnnotations": strmap, "tmpSizeLimit": quantity,
    "probes": obj({"startup": probe, "readiness": probe, "liveness": probe}),
    "gateway": obj({
        "replicas": i(0, 1024), "resources": resources,
        "service": obj({"type": s(enum=["ClusterIP", "NodePort", "LoadBalancer"]), "port": port, "nodePort": i(0, 32767), "annotations": strmap}),
        "apiKeysSecret": s(maxLength=253), "config": config, "terminationGracePeriodSeconds": grace, "pdb": pdb,
        "autoscaling": hpa({"targetRequestsRunning": n(exclusiveMinimum=0), "targetCPUUtilizationPercentage": i(0, 1000)}),
        "allowFrom": peers, **placing}, required=["replicas"]),
    "routers": obj({
        "replicas": i(1, 1024), "resources": resources, "gpus": i(0, 16), "config": config,
        "terminationGracePeriodSeconds": grace, "sidecarExperts": b, "shmSizeLimit": quantity, "pdb": pdb,
        "autoscaling": hpa({"targetQueueDepth": n(exclusiveMinimum=0), "targetTtftP99Seconds": n(minimum=0)}),
        **placing}, required=["replicas"]),
    "expertPools": {"type": "array", "maxItems": 64, "items": obj({
        "name": s(minLength=1, maxLength=30, pattern=DNS),
        "replicas": i(0, 1024),
        "experts": {"type": "array", "minItems": 1, "items": s(pattern=EXPERT)},
        "resources": resources, "gpus": i(0, 16), "config": config, **placing}, required=["name", "replicas", "experts"])},
    "placement": obj({"policy": s(enum=["pools", "static"]),
                      "table": {"type": "array", "items": s(pattern="^(\\*|[0-9]+):[0-9]+(-[0-9]+)?=[0-9]+(,[0-9]+)*$")},
                      "utilisationThreshold": n(0, 1), "pdb": pdb}, required=["policy"]),
    "kvStore": obj({"enabled": b, "replicas": i(0, 64), "resources": resources, "l2Bytes": i(0),
                    "l3Bytes": i(0), "responseCache": b,
                    "l3": obj({"size": quantity, "storageClassName": s(), "mountPath": s(pattern="^/")}),
                    "config": config, "terminationGracePeriodSeconds": grace, "pdb": pdb, **placing},
                   required=["enabled"], desc="kv-store: the shared L2 (memory) and L3 (disk) KV tiers"),
    "asr": voice("asr", {"targetRealtimeFactor": n(exclusiveMinimum=0)}),
    "tts": voice("tts", {"targetFirstChunkP99Seconds": n(exclusiveMinimum=0)}),
    "security": obj({"mtls": obj({
        "enabled": b,
        "trustDomain": s("SPIFFE trust domain of the role identities", pattern="^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
        "certManager": {"type": "boolean", "description": "true: cert-manager Certificates per role; false: bring your own Secrets"},
        "issuerRef": obj({"name": s(maxLength=253), "kind": s(enum=["Issuer", "ClusterIssuer"]), "group": s(minLength=1)}),
        "duration": s(pattern="^[0-9]+(m|h)$"), "renewBefore": s(pattern="^[0-9]+(m|h)$"),
        "reloadInterval": s(pattern="^[0-9]+(ms|s|m|h)$"),
        "secrets": obj({r: s(maxLength=253) for r in ROLES}, desc="Secret of each role (tls.crt, tls.key, ca.crt); empty = <fullname>-tls-<role>"),
        "adminIdentities": {"type": "array", "items": s(minLength=1), "description": "more certificate SANs holding the admin role"},
      }, required=["enabled"], desc="mTLS and per-role auth of every gRPC call (SECURITY.md)")}),
    "networkPolicy": obj({"enabled": b, "metricsFrom": peers, "controlPlaneFrom": peers}),
    "monitoring": obj({
        "podAnnotations": b,
        "podMonitor": obj({"enabled": b, "interval": s(pattern="^[0-9]+(ms|s|m|h)$"), "labels": strmap}),
        "serviceMonitor": obj({"enabled": b, "interval": s(pattern="^[0-9]+(ms|s|m|h)$"), "labels": strmap}),
        "prometheusRule": obj({"enabled": b, "labels": strmap}),
        "rulesConfigMap": obj({"enabled": b}),
        "rulesForDisabledRoles": b,
        "alerts": obj({"runbookBaseUrl": s(pattern="^https?://"), "balancednessMin": n(0, 1), "l2HitRateMin": n(0, 1),
                       "ttftP99Seconds": n(exclusiveMinimum=0), "ttsFirstChunkP99Seconds": n(exclusiveMinimum=0),
                       "errorRatio": n(0, 1), "queueDepth": n(minimum=0)}),
        "dashboards": obj({"enabled": b, "label": s(minLength=1), "labelValue": s(), "annotations": strmap}),
        "prometheusAdapter": obj({"rulesConfigMap": b})}),
  },
  "required": ["image", "model", "numerics", "ports", "gateway", "routers", "expertPools", "placement"],
  # Cross-field rules a wrong combination fails on at install time.
  "allOf": [
    {"if": {"properties": {"model": {"properties": {"source": {"const": "pvc"}}}}},
     "then": {"properties": {"model": {"properties": {"pvc": {"properties": {"claimName": {"minLength": 1}}, "required": ["claimName"]}}, "required": ["pvc"]}}},
     "description": "model.source pvc needs model.pvc.claimName"},
    {"if": {"properties": {"model": {"properties": {"source": {"const": "hostPath"}}}}},
     "then": {"properties": {"model": {"properties": {"hostPath": {"properties": {"path": {"minLength": 1}}, "required": ["path"]}}, "required": ["hostPath"]}}}},
    {"if": {"properties": {"model": {"properties": {"source": {"const": "image"}}}}},
     "then": {"properties": {"model": {"properties": {"image": {"properties": {"path": {"minLength": 1}}, "required": ["path"]}}, "required": ["image"]}}}},
    {"if": {"properties": {"numerics": {"properties": {"device": {"const": "cpu"}}}}},
     "then": {"properties": {"routers": {"properties": {"gpus": {"const": 0}}},
                             "expertPools": {"items": {"properties": {"gpus": {"const": 0}}}}}},
     "description": "GPU requests need numerics.device gpu"},
    {"if": {"properties": {"placement": {"properties": {"policy": {"const": "static"}}}}},
     "then": {"properties": {"placement": {"properties": {"table": {"minItems": 1}}, "required": ["table"]}}}},
  ],
}
json.dump(schema, open(sys.argv[1], "w"), indent=2); open(sys.argv[1], "a").write("\n")
