// The Helm chart (deploy/k8s) with Helm 3 (v3.17.2) and Helm 4 (v4.1.4): lint and template
// clean for the default, CPU and GPU values (and the sidecar, every-role and operator
// variants); every rendered object valid against the Kubernetes schemas (kubernetes-models,
// strict about unknown fields; the MoECluster against its CRD); the pod-security and
// network invariants the issue asks for; wrong values refused at install time; each rendered
// service config accepted by the real binary; generated files up to date.
// Run: node --test deploy/test/helm.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { HELMS, binDir, chart, deploy, helm, parseAll, readYaml, render } from './common.mjs';
import { validateObject, KUBERNETES_SCHEMA_VERSION } from './k8s_schema.mjs';
import { validateCustomResource } from './crd_schema.mjs';
import { isCertManager, validateCertManager } from './cert_manager_schema.mjs';

const f = (name) => ['-f', path.join(chart, name)];
const EVERYTHING = [...f('values-gpu.yaml'), '--set', 'kvStore.enabled=true', '--set', 'asr.enabled=true',
  '--set', 'tts.enabled=true', '--set', 'asr.autoscaling.enabled=true', '--set', 'tts.autoscaling.enabled=true',
  '--set', 'monitoring.serviceMonitor.enabled=true', '--set', 'monitoring.rulesConfigMap.enabled=true'];
const MTLS = ['--set', 'security.mtls.enabled=true'];
const SCENARIOS = {
  default: [],
  cpu: f('values-cpu.yaml'),
  gpu: f('values-gpu.yaml'),
  'cpu-sidecars': [...f('values-cpu.yaml'), '--set', 'routers.sidecarExperts=true'],
  'gpu-every-role': EVERYTHING,
  'no-experts': ['--set-json', 'expertPools=[]'],
  operator: ['--set', 'operator.enabled=true'],
  // security.mtls: every service's grpc.tls + grpc.auth, every client's channel, a certificate per role
  mtls: MTLS,
  'mtls-every-role': [...EVERYTHING, ...MTLS],
  'mtls-sidecars': [...f('values-cpu.yaml'), '--set', 'routers.sidecarExperts=true', ...MTLS],
  'mtls-operator': ['--set', 'operator.enabled=true', ...MTLS],
};
const isMtls = (name) => name.startsWith('mtls');
const LINTED = { default: [], cpu: f('values-cpu.yaml'), gpu: f('values-gpu.yaml') };

const crds = ['moecluster.yaml', 'expertpool.yaml', 'routercalibration.yaml']
  .flatMap((n) => readYaml(path.join(deploy, 'crds', n)));

let validated = 0;
const rendered = {};  // scenario -> helm -> objects

for (const h of Object.keys(HELMS)) {
  test(`${h} is ${HELMS[h].version}`, () => {
    assert.match(helm(h, ['version', '--short']).stdout, new RegExp(`^${HELMS[h].version.replace(/\./g, '\\.')}`));
  });
  for (const [name, args] of Object.entries(LINTED)) {
    test(`${h} lint --strict (${name} values)`, () => {
      const r = helm(h, ['lint', '--strict', chart, ...args]);
      assert.equal(r.status, 0, r.out);
      assert.match(r.out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
      assert.doesNotMatch(r.out, /\[(WARNING|ERROR)\]/, r.out);
    });
  }
  for (const [name, args] of Object.entries(SCENARIOS)) {
    test(`${h} template (${name}): every object valid against ${KUBERNETES_SCHEMA_VERSION}`, () => {
      const objs = render(h, args);
      (rendered[name] ??= {})[h] = objs;
      assert.ok(objs.length > 0);
      for (const o of objs) {
        const crd = crds.find((c) => c.spec.group === o.apiVersion.split('/')[0] && c.spec.names.kind === o.kind);
        const errors = crd ? validateCustomResource(crd, structuredClone(o))
          : isCertManager(o) ? validateCertManager(o) : validateObject(o);
        assert.deepEqual(errors, [], `${name}: ${o.kind} ${o.metadata?.name}`);
        validated++;
      }
      const names = objs.map((o) => `${o.kind}/${o.metadata.name}`);
      assert.equal(new Set(names).size, names.length, 'names unique per kind');
    });
  }
}

test('Helm 3 and Helm 4 render the same objects', () => {
  for (const name of Object.keys(SCENARIOS)) assert.deepEqual(rendered[name].helm4, rendered[name].helm3, name);
});

const podTemplates = (objs) => objs.filter((o) => ['Deployment', 'StatefulSet'].includes(o.kind))
  .map((o) => ({ owner: `${o.kind}/${o.metadata.name}`, spec: o.spec.template.spec, meta: o.spec.template.metadata, obj: o }));

test('every pod: non-root, read-only root, no escalation, no capabilities, seccomp, own SA, no token', () => {
  for (const [name, byHelm] of Object.entries(rendered)) {
    const objs = byHelm.helm3;
    const sas = new Set(objs.filter((o) => o.kind === 'ServiceAccount').map((o) => o.metadata.name));
    const cms = new Set(objs.filter((o) => o.kind === 'ConfigMap').map((o) => o.metadata.name));
    for (const { owner, spec } of podTemplates(objs)) {
      const at = `${name} ${owner}`;
      assert.equal(spec.securityContext.runAsNonRoot, true, at);
      assert.equal(spec.securityContext.seccompProfile.type, 'RuntimeDefault', at);
      // Only the operator calls the Kubernetes API: its pod alone mounts a token, bound to its Role.
      const isOperator = spec.containers.some((c) => c.name === 'operator');
      assert.equal(spec.automountServiceAccountToken, isOperator, at);
      if (isOperator) {
        const binding = objs.find((o) => o.kind === 'RoleBinding' && o.subjects.some((x) => x.name === spec.serviceAccountName));
        assert.ok(binding && objs.some((o) => o.kind === 'Role' && o.metadata.name === binding.roleRef.name), `${at}: Role bound`);
      }
      assert.ok(sas.has(spec.serviceAccountName), `${at}: ServiceAccount ${spec.serviceAccountName} rendered`);
      for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
        const sc = c.securityContext;
        assert.equal(sc.readOnlyRootFilesystem, true, `${at} ${c.name}`);
        assert.equal(sc.allowPrivilegeEscalation, false, `${at} ${c.name}`);
        assert.deepEqual(sc.capabilities.drop, ['ALL'], `${at} ${c.name}`);
        assert.ok(c.resources?.requests && c.resources?.limits?.memory, `${at} ${c.name}: requests and a memory limit`);
        assert.ok(c.volumeMounts.some((m) => m.mountPath === '/tmp'), `${at} ${c.name}: writable /tmp volume`);
      }
      for (const c of spec.containers) {
        for (const p of ['startupProbe', 'readinessProbe', 'livenessProbe']) assert.ok(c[p], `${at} ${c.name}: ${p}`);
        if (c.name !== 'gateway' && c.name !== 'operator') {
          const metrics = c.ports.find((p) => p.name.startsWith('metrics')).containerPort;
          for (const p of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
            // the kubelet's gRPC probes speak no TLS: under mTLS, /healthz on the metrics port
            if (isMtls(name)) assert.deepEqual(c[p].httpGet, { path: '/healthz', port: metrics }, `${at} ${c.name}: ${p}`);
            else assert.ok(c[p].grpc, `${at} ${c.name}: gRPC health ${p}`);
          }
        }
      }
      for (const v of spec.volumes) {
        if (v.configMap) assert.ok(cms.has(v.configMap.name), `${at}: ConfigMap ${v.configMap.name} rendered`);
      }
    }
  }
});

test('NetworkPolicies: only the gateway is open; each service only to its callers', () => {
  const objs = rendered['gpu-every-role'].helm3;
  const nps = objs.filter((o) => o.kind === 'NetworkPolicy');
  const byRole = Object.fromEntries(nps.map((n) => [n.spec.podSelector.matchLabels['app.kubernetes.io/component'] ?? 'all', n]));
  assert.deepEqual(byRole.all.spec.policyTypes, ['Ingress']);
  assert.equal(byRole.all.spec.ingress, undefined, 'default deny');
  assert.equal(byRole.gateway.spec.ingress[0].from, undefined, 'the gateway: from anyone');
  const callers = (role) => byRole[role].spec.ingress[0].from
    .map((p) => p.podSelector?.matchLabels?.['app.kubernetes.io/component']).filter(Boolean).sort();
  assert.deepEqual(callers('router'), ['gateway']);
  assert.deepEqual(callers('expert-worker'), ['router']);
  assert.deepEqual(callers('kv-store'), ['router']);
  assert.deepEqual(callers('asr'), ['gateway']);
  assert.deepEqual(callers('tts'), ['gateway']);
  for (const role of ['router', 'expert-worker', 'kv-store', 'asr', 'tts']) {
    for (const rule of byRole[role].spec.ingress) assert.ok(rule.from?.length, `${role}: no rule open to everyone`);
  }
  // SECURITY.md's table: admin (moe admin, the operator: networkPolicy.controlPlaneFrom) calls
  // routers (GetStats, SetPlacement) and workers (LoadExperts, UnloadExperts), nothing else.
  const control = (role) => byRole[role].spec.ingress[0].from.some((p) => p.podSelector?.matchLabels?.['moe-cluster.io/control-plane']);
  assert.deepEqual(['router', 'expert-worker', 'kv-store', 'asr', 'tts'].filter(control), ['router', 'expert-worker']);
  // the gRPC rule opens the gRPC port only; the metrics rule the metrics port(s) only
  for (const role of ['router', 'expert-worker', 'kv-store', 'asr', 'tts']) {
    assert.deepEqual(byRole[role].spec.ingress[0].ports, [{ port: 'grpc', protocol: 'TCP' }], role);
    assert.deepEqual(byRole[role].spec.ingress[1].ports, [{ port: 'metrics', protocol: 'TCP' }], role);
  }
});

test('GPU values: nvidia.com/gpu, tolerations and node selectors on routers and expert pools', () => {
  for (const { owner, spec } of podTemplates(rendered.gpu.helm3)) {
    if (/gateway|kv-store|asr|tts/.test(owner)) continue;  // CPU services
    const c = spec.containers[0];
    assert.equal(c.resources.limits['nvidia.com/gpu'], 1, owner);
    assert.ok(spec.tolerations.some((t) => t.key === 'nvidia.com/gpu'), owner);
    assert.ok(spec.nodeSelector['nvidia.com/gpu.product'], owner);
  }
});

test('sidecar experts: workers in the router pod, sharing an emptyDir in memory at /dev/shm', () => {
  const objs = rendered['cpu-sidecars'].helm3;
  const sets = objs.filter((o) => o.kind === 'StatefulSet' && !o.metadata.name.endsWith('kv-store'));
  assert.equal(sets.length, 1, 'no expert pool StatefulSets');
  const [router] = podTemplates(objs).filter((p) => p.owner.includes('router'));
  const names = router.spec.containers.map((c) => c.name);
  assert.deepEqual(names, ['router', 'expert-worker-lo', 'expert-worker-hi']);
  const shm = router.spec.volumes.find((v) => v.name === 'shm');
  assert.equal(shm.emptyDir.medium, 'Memory');
  for (const c of router.spec.containers) assert.ok(c.volumeMounts.some((m) => m.name === 'shm' && m.mountPath === '/dev/shm'), c.name);
  const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'));
  const routerCfg = YAML.parse(cm.data['router.yaml']);
  assert.deepEqual(routerCfg.experts.workers, ['127.0.0.1:50052', '127.0.0.1:50053']);
  assert.deepEqual(routerCfg.experts.placement, ['*:0-3=0', '*:4-7=1']);
  assert.equal(YAML.parse(cm.data['expert-worker-hi.yaml']).grpc.port, 50053);
  // the shared-memory transport: required by the router, offered by the sidecars at /dev/shm
  assert.equal(routerCfg.experts.transport, 'shm');
  assert.deepEqual(YAML.parse(cm.data['expert-worker-hi.yaml']).shm, { enabled: true, dir: '/dev/shm' });
  // kubelet's probes dial the pod IP; the NetworkPolicy keeps the worker ports closed to other pods
  const np = objs.find((o) => o.kind === 'NetworkPolicy' && o.spec.podSelector.matchLabels['app.kubernetes.io/component'] === 'router');
  const open = np.spec.ingress.flatMap((r) => r.ports.map((p) => p.port));
  assert.deepEqual(open, ['grpc', 'metrics', 'metrics-w0', 'metrics-w1']);
});

test('the kv-store is on by default, shared by every router; lossy K/V is one cluster-wide switch', () => {
  const configs = (objs) => {
    const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'));
    return [YAML.parse(cm.data['router.yaml']), YAML.parse(cm.data['kv-store.yaml'])];
  };
  const objs = rendered.default.helm3;
  assert.ok(objs.some((o) => o.kind === 'StatefulSet' && o.metadata.name.endsWith('kv-store')));
  const [router, store] = configs(objs);
  assert.equal(router.kv_store.targets.length, 1);
  assert.match(router.kv_store.targets[0], /kv-store-0\..*:50053$/);
  assert.equal(router.kv_store.lossy_int8, false);
  assert.equal(router.kv_store.response_cache, false);
  assert.equal(store.core.compression, 'zstd');
  assert.equal(store.core.l3_dir, '/var/lib/moe/l3');
  assert.equal(store.core.l3_bytes, 8589934592);
  const [lossyRouter, lossyStore] = configs(render('helm3', ['--set', 'numerics.lossyKv=true',
    '--set', 'kvStore.responseCache=true', '--set', 'kvStore.replicas=2']));
  assert.equal(lossyRouter.kv_store.lossy_int8, true);
  assert.equal(lossyRouter.kv_store.response_cache, true);
  assert.equal(lossyRouter.kv_store.targets.length, 2);
  assert.equal(lossyStore.core.compression, 'int8');
  const off = render('helm3', ['--set', 'kvStore.enabled=false']);
  const cm = off.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'));
  assert.equal(cm.data['kv-store.yaml'], undefined);
  assert.equal(YAML.parse(cm.data['router.yaml']).kv_store, undefined);
  assert.ok(!off.some((o) => o.kind === 'StatefulSet' && o.metadata.name.endsWith('kv-store')));
});

test('numerics.weights reaches every router and expert worker as core.weights', () => {
  const cmOf = (objs) => objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'));
  const workerConfigs = (cm) => Object.keys(cm.data).filter((k) => k.startsWith('expert-worker'))
    .map((k) => YAML.parse(cm.data[k]));
  const def = cmOf(rendered.default.helm3);
  assert.equal(YAML.parse(def.data['router.yaml']).core.weights, 'checkpoint');
  const q8 = cmOf(render('helm3', ['--set', 'numerics.weights=q8_0']));
  assert.equal(YAML.parse(q8.data['router.yaml']).core.weights, 'q8_0');
  const workers = workerConfigs(q8);
  assert.ok(workers.length >= 1);
  for (const w of workers) assert.equal(w.core.weights, 'q8_0');
});

test('placement: worker ids in pool order, one entry per pool and expert spec', () => {
  const cm = rendered.gpu.helm3.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'));
  const cfg = YAML.parse(cm.data['router.yaml']);
  assert.equal(cfg.experts.workers.length, 6);
  assert.match(cfg.experts.workers[4], /^moe-moe-cluster-experts-cold-0\.moe-moe-cluster-experts-cold\.moe\.svc:50052$/);
  assert.deepEqual(cfg.experts.placement, ['*:0-63=0,1,2,3', '*:64-127=4,5']);
  assert.equal(cfg.experts.transport, 'grpc');  // pools in their own pods
  assert.equal(YAML.parse(cm.data['expert-worker-cold.yaml']).shm.enabled, false);
  assert.deepEqual(YAML.parse(cm.data['placement.yaml']).placement, cfg.experts.placement);
  // the gateway lists routers up to the HPA's maximum and routes around the absent ones
  assert.equal(YAML.parse(cm.data['gateway.yaml']).routing.routers.length, 16);
});

test('HPAs use the custom metrics the prometheus-adapter rules serve', () => {
  const objs = rendered['gpu-every-role'].helm3;
  const adapter = YAML.parse(objs.find((o) => o.metadata.name.endsWith('-prometheus-adapter')).data['config.yaml']);
  const served = new Set(adapter.rules.map((r) => r.name.as));
  const hpas = objs.filter((o) => o.kind === 'HorizontalPodAutoscaler');
  assert.deepEqual(hpas.map((h) => h.spec.scaleTargetRef.name.replace('moe-moe-cluster-', '')).sort(), ['asr', 'gateway', 'router', 'tts']);
  for (const h of hpas) {
    for (const m of h.spec.metrics.filter((x) => x.type === 'Pods')) assert.ok(served.has(m.pods.metric.name), m.pods.metric.name);
    const target = objs.find((o) => o.kind === h.spec.scaleTargetRef.kind && o.metadata.name === h.spec.scaleTargetRef.name);
    assert.ok(target, `${h.metadata.name}: target exists`);
    assert.equal(target.spec.replicas, undefined, `${h.metadata.name}: the HPA owns replicas`);
  }
});

test('scrape annotations and monitor objects give every role its job', () => {
  for (const { owner, meta } of podTemplates(rendered['gpu-every-role'].helm3)) {
    assert.equal(meta.annotations['prometheus.io/scrape'], 'true', owner);
    assert.equal(meta.annotations['prometheus.io/path'], '/metrics', owner);
  }
  const objs = rendered.gpu.helm3;
  const pm = objs.find((o) => o.kind === 'PodMonitor');
  assert.equal(pm.spec.jobLabel, 'app.kubernetes.io/component');
  assert.ok(objs.find((o) => o.kind === 'PrometheusRule').spec.groups.length >= 2);
});

test('the dashboard ConfigMap carries the Grafana sidecar label', () => {
  const cms = rendered.default.helm3.filter((o) => o.kind === 'ConfigMap' && o.metadata.labels.grafana_dashboard === '1');
  // The kv-store, asr and tts are on by default, so their dashboard (kv-store and voice) comes with them.
  assert.deepEqual(cms.map((c) => Object.keys(c.data)[0]), ['moe-cluster.json', 'moe-kv-voice.json']);
  const every = rendered['gpu-every-role'].helm3.filter((o) => o.metadata.labels?.grafana_dashboard === '1');
  assert.equal(every.length, 2, 'kv-store/voice dashboard once those roles are enabled');
});

// ---- security.mtls ----
const configMap = (objs) => objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'));
const configsOf = (objs) => Object.fromEntries(Object.entries(configMap(objs)?.data ?? {})
  .filter(([k]) => k !== 'placement.yaml').map(([k, v]) => [k, YAML.parse(v)]));
// SECURITY.md's table: the roles that call each gRPC server.
const CALLERS = { router: ['admin', 'gateway'], 'expert-worker': ['admin', 'router'], 'kv-store': ['admin', 'router'],
  asr: ['gateway'], tts: ['gateway'] };
const roleOfConfig = (key) => key.replace(/\.yaml$/, '').replace(/^expert-worker-.*/, 'expert-worker');
const hostOf = (target) => target.replace(/:\d+$/, '');
// A DNS SAN matches a name exactly, or as a wildcard for its first label only (RFC 6125).
const sanMatches = (san, name) => san === name || (san.startsWith('*.') && name.slice(name.indexOf('.') + 1) === san.slice(2) && !name.slice(0, name.indexOf('.')).includes('*'));
// The files of a client channel or a server's grpc.tls.
const tlsFiles = (tls) => [tls.ca_file, tls.cert_file, tls.key_file, tls.client_ca_file].filter(Boolean);

test('security.mtls off: no TLS, auth, channel, certificate or mount anywhere (the default renders as before)', () => {
  for (const name of Object.keys(SCENARIOS).filter((n) => !isMtls(n))) {
    const objs = rendered[name].helm3;
    assert.ok(!objs.some(isCertManager), name);
    for (const [key, cfg] of Object.entries(configsOf(objs))) {
      assert.equal(cfg.grpc?.tls, undefined, `${name} ${key}`);
      assert.equal(cfg.grpc?.auth, undefined, `${name} ${key}`);
      for (const c of [cfg.routing, cfg.voice, cfg.experts, cfg.kv_store]) assert.equal(c?.channel, undefined, `${name} ${key}`);
    }
    for (const { spec } of podTemplates(objs)) {
      assert.ok(!spec.volumes.some((v) => v.secret?.secretName?.includes('-tls-')), name);
      assert.ok(!spec.containers.some((c) => c.args.some((a) => String(a).startsWith('channel.'))), name);
    }
  }
  // the other security.mtls values do nothing while it is off
  const quiet = render('helm3', ['--set', 'security.mtls.trustDomain=example.org', '--set', 'security.mtls.certManager=false',
    '--set', 'security.mtls.secrets.router=mine', '--set-json', 'security.mtls.adminIdentities=["spiffe://x/admin"]']);
  assert.deepEqual(quiet, rendered.default.helm3);
});

for (const name of ['mtls', 'mtls-every-role', 'mtls-sidecars']) {
  test(`security.mtls (${name}): every server has tls + auth with its callers' identities, every client its certificate`, () => {
    const objs = rendered[name].helm3;
    const certs = Object.fromEntries(objs.filter((o) => o.kind === 'Certificate' && !o.spec.isCA)
      .map((c) => [c.spec.commonName, c]));
    const identity = (role) => {
      assert.ok(certs[role], `${name}: a Certificate for ${role}`);
      assert.equal(certs[role].spec.uris.length, 1);
      assert.match(certs[role].spec.uris[0], new RegExp(`^spiffe://cluster\\.local/ns/moe/moe-moe-cluster/${role}$`));
      return certs[role].spec.uris[0];
    };
    const configs = configsOf(objs);
    const servers = Object.keys(configs).filter((k) => k !== 'gateway.yaml');
    assert.ok(servers.length >= 4, servers.join());
    for (const key of servers) {
      const role = roleOfConfig(key);
      const { tls, auth } = configs[key].grpc;
      assert.deepEqual(tls, { cert_file: '/etc/moe-tls/tls.crt', key_file: '/etc/moe-tls/tls.key',
        client_ca_file: '/etc/moe-tls/ca.crt', require_client_cert: true, reload_interval: '60s' }, `${name} ${key}`);
      assert.equal(auth.enabled, true, key);
      const granted = ['gateway', 'router', 'admin'].filter((r) => auth[r]);
      assert.deepEqual(granted.sort(), CALLERS[role], `${name} ${key}: roles`);
      for (const r of granted) assert.deepEqual(auth[r].identities, [identity(r)], `${name} ${key}: ${r}`);
    }
    // clients: role -> [channel, targets it dials, the role it dials]
    const gw = configs['gateway.yaml'];
    const router = configs['router.yaml'];
    const dials = [[gw.routing.channel, gw.routing.routers, 'router']];
    if (gw.voice) for (const v of ['asr', 'tts']) if (gw.voice[v]) dials.push([gw.voice.channel, gw.voice[v], v]);
    if (router.experts) dials.push([router.experts.channel, router.experts.workers, 'expert-worker']);
    if (router.kv_store) dials.push([router.kv_store.channel, router.kv_store.targets, 'kv-store']);
    assert.ok(dials.length >= 3);
    for (const [channel, targets, callee] of dials) {
      assert.deepEqual(channel.tls.enabled && tlsFiles(channel.tls).sort(),
        ['/etc/moe-tls/ca.crt', '/etc/moe-tls/tls.crt', '/etc/moe-tls/tls.key'], `${name} -> ${callee}`);
      // server name verification: the name each client verifies is one of the callee's DNS SANs
      for (const t of targets) {
        const verified = channel.tls.server_name_override || hostOf(t);
        assert.ok((certs[callee].spec.dnsNames ?? []).some((san) => sanMatches(san, verified)),
          `${name}: ${callee}'s certificate lacks ${verified} (SANs ${certs[callee].spec.dnsNames})`);
      }
    }
    if (name === 'mtls-sidecars') assert.equal(router.experts.channel.tls.server_name_override, 'localhost');
  });

  test(`security.mtls (${name}): every TLS file a container's config names is in a mounted Secret of its role`, () => {
    const objs = rendered[name].helm3;
    const configs = configsOf(objs);
    const secretOf = Object.fromEntries(objs.filter((o) => o.kind === 'Certificate' && !o.spec.isCA)
      .map((c) => [c.spec.commonName, c.spec.secretName]));
    let containers = 0;
    for (const { owner, spec } of podTemplates(objs)) {
      for (const c of spec.containers) {
        const key = c.args[c.args.indexOf('--config') + 1].replace('/etc/moe/', '');
        const cfg = configs[key];
        const role = roleOfConfig(key);
        const files = [cfg.grpc?.tls, cfg.routing?.channel?.tls, cfg.voice?.channel?.tls, cfg.experts?.channel?.tls,
          cfg.kv_store?.channel?.tls].filter(Boolean).flatMap(tlsFiles);
        assert.ok(files.length >= 3, `${owner} ${c.name}: TLS files`);
        for (const file of files) {
          const mount = c.volumeMounts.find((m) => file.startsWith(`${m.mountPath}/`));
          assert.ok(mount && !mount.subPath, `${owner} ${c.name}: ${file} is mounted (no subPath: rotation)`);
          const volume = spec.volumes.find((v) => v.name === mount.name);
          assert.equal(volume.secret?.secretName, secretOf[role], `${owner} ${c.name}: ${file} from ${role}'s Secret`);
          assert.ok(volume.secret.items.some((i) => i.path === file.slice(mount.mountPath.length + 1)), `${owner}: ${file} projected`);
          assert.equal(volume.secret.defaultMode, 0o440, `${owner}: key readable by the pod's group (fsGroup) only`);
        }
        containers++;
      }
    }
    assert.ok(containers >= 4, `${containers} containers`);
  });
}

test('security.mtls: the chart-made CA chain signs every role; a given issuer replaces it; own Secrets replace the Certificates', () => {
  const objs = rendered['mtls-every-role'].helm3;
  const issuers = objs.filter((o) => o.kind === 'Issuer');
  assert.deepEqual(issuers.map((i) => Object.keys(i.spec)[0]).sort(), ['ca', 'selfSigned']);
  const ca = objs.find((o) => o.kind === 'Certificate' && o.spec.isCA);
  assert.equal(ca.spec.issuerRef.name, issuers.find((i) => i.spec.selfSigned).metadata.name);
  assert.equal(issuers.find((i) => i.spec.ca).spec.ca.secretName, ca.spec.secretName);
  const roles = objs.filter((o) => o.kind === 'Certificate' && !o.spec.isCA);
  assert.deepEqual(roles.map((c) => c.spec.commonName).sort(), ['admin', 'asr', 'expert-worker', 'gateway', 'kv-store', 'router', 'tts']);
  for (const c of roles) {
    assert.equal(c.spec.issuerRef.name, issuers.find((i) => i.spec.ca).metadata.name, c.metadata.name);
    assert.ok(c.spec.usages.includes('server auth') && c.spec.usages.includes('client auth'), c.metadata.name);
  }
  // a ClusterIssuer of the cluster's
  const own = render('helm3', [...MTLS, '--set', 'security.mtls.issuerRef.name=corp', '--set', 'security.mtls.issuerRef.kind=ClusterIssuer']);
  assert.equal(own.filter((o) => o.kind === 'Issuer').length, 0);
  for (const c of own.filter((o) => o.kind === 'Certificate')) assert.deepEqual(c.spec.issuerRef, { name: 'corp', kind: 'ClusterIssuer', group: 'cert-manager.io' });
  // bring your own Secrets: no cert-manager object, the named Secrets mounted
  const byo = render('helm3', [...MTLS, '--set', 'security.mtls.certManager=false', '--set', 'security.mtls.secrets.router=my-router-tls',
    '--set-json', 'security.mtls.adminIdentities=["spiffe://corp/alice"]']);
  assert.ok(!byo.some(isCertManager));
  const routerPod = podTemplates(byo).find((p) => p.owner.endsWith('-router'));
  assert.equal(routerPod.spec.volumes.find((v) => v.name === 'tls').secret.secretName, 'my-router-tls');
  const gwPod = podTemplates(byo).find((p) => p.owner.endsWith('-gateway'));
  assert.equal(gwPod.spec.volumes.find((v) => v.name === 'tls').secret.secretName, 'moe-moe-cluster-tls-gateway');
  assert.deepEqual(YAML.parse(configMap(byo).data['router.yaml']).grpc.auth.admin.identities,
    ['spiffe://cluster.local/ns/moe/moe-moe-cluster/admin', 'spiffe://corp/alice']);
});

test('security.mtls with the operator: it dials as admin with the admin certificate', () => {
  const objs = rendered['mtls-operator'].helm3;
  assert.deepEqual(objs.filter((o) => o.kind === 'Certificate' && !o.spec.isCA).map((c) => c.spec.commonName), ['admin']);
  const [op] = podTemplates(objs);
  const c = op.spec.containers[0];
  const flags = c.args.filter((a) => a.startsWith('channel.'));
  assert.deepEqual(flags.sort(), ['channel.tls.ca_file=/etc/moe-tls/ca.crt', 'channel.tls.cert_file=/etc/moe-tls/tls.crt',
    'channel.tls.enabled=true', 'channel.tls.key_file=/etc/moe-tls/tls.key', 'channel.tls.reload_interval=60s']);
  const mount = c.volumeMounts.find((m) => m.mountPath === '/etc/moe-tls');
  assert.equal(op.spec.volumes.find((v) => v.name === mount.name).secret.secretName, 'moe-moe-cluster-tls-admin');
});

// Wrong values fail at install time (values.schema.json, or the chart's own checks).
const WRONG = [
  [['--set', 'gateway.replicass=2'], /replicass/],
  [['--set', 'routers.replicas=0'], /routers/],
  [['--set', 'numerics.activations=fp8'], /activations/],
  [['--set', 'numerics.weights=int4'], /weights/],
  [['--set', 'model.source=s3'], /source/],
  [['--set', 'model.source=pvc'], /claimName|allOf|then/],
  [['--set', 'routers.gpus=1'], /gpus|allOf|then/],
  [['--set', 'expertPools[0].name=Bad_Name', '--set', 'expertPools[0].replicas=1', '--set', 'expertPools[0].experts[0]=*:0-7'], /name/],
  [['--set', 'placement.utilisationThreshold=2'], /utilisationThreshold/],
  [['--set', 'image.pullPolicy=Sometimes'], /pullPolicy/],
  [['--set', 'gateway.service.type=Ingress'], /type/],
  [['--set', 'gateway.autoscaling.enabled=true', '--set', 'gateway.autoscaling.minReplicas=9'], /must not exceed maxReplicas/],
  [['--set', 'placement.policy=static', '--set', 'placement.table[0]=*:0-7=5'], /names worker 5, but the pools have 1 workers/],
  [['--set', 'monitoring.alerts.l2HitRateMin=85'], /l2HitRateMin/],
];
for (const h of Object.keys(HELMS)) {
  test(`${h}: ${WRONG.length} wrong values are refused`, () => {
    for (const [args, message] of WRONG) {
      const r = helm(h, ['template', 'moe', chart, ...args]);
      assert.notEqual(r.status, 0, `${args.join(' ')} was accepted`);
      assert.match(r.out, message, args.join(' '));
      assert.doesNotMatch(r.out, /Kubernetes cluster unreachable/, 'refused by the values, before any cluster is asked');
    }
  });
}

test('every rendered service config is accepted by its binary (--print_config)', (t) => {
  if (!existsSync(path.join(binDir, 'router'))) return t.skip(`${binDir} has no binaries`);
  const dir = mkdtempSync(path.join(tmpdir(), 'moe-cfg-'));
  let checked = 0;
  for (const name of ['default', 'cpu', 'gpu', 'cpu-sidecars', 'gpu-every-role', 'mtls-every-role', 'mtls-sidecars']) {
    const cm = rendered[name].helm3.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'));
    for (const [key, text] of Object.entries(cm.data)) {
      const binary = key === 'placement.yaml' ? null : key.replace(/\.yaml$/, '').replace(/^expert-worker-.*/, 'expert-worker');
      if (!binary || !existsSync(path.join(binDir, binary))) continue;  // a binary not built in this tree
      const file = path.join(dir, `${name}-${key}`);
      const config = text;
      writeFileSync(file, config);
      const r = spawnSync(path.join(binDir, binary), ['--config', file, '--print_config'], { encoding: 'utf8' });
      assert.equal(r.status, 0, `${name} ${key}: ${r.stderr}`);
      checked++;
    }
  }
  // the operator's channel flags (mTLS: it calls routers and workers as admin)
  const op = podTemplates(rendered['mtls-operator'].helm3).find((p) => p.spec.containers[0].name === 'operator');
  if (existsSync(path.join(binDir, 'operator'))) {
    const args = op.spec.containers[0].args.slice(1).map((a) => a.replace(/\$\(\w+\)/g, 'x'));
    const r = spawnSync(path.join(binDir, 'operator'), [...args, '--print_config'], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /ca_file: \/etc\/moe-tls\/ca\.crt/);
    checked++;
  }
  rmSync(dir, { recursive: true, force: true });
  assert.ok(checked >= 12, `${checked} configs checked`);
});

test('generated files are up to date', () => {
  const gen = (script, out) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'moe-gen-'));
    const target = out.endsWith('.json') ? path.join(dir, path.basename(out)) : dir;
    const r = spawnSync('python3', [path.join(deploy, 'monitoring', script), target], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
    return dir;
  };
  const schemaDir = gen('make_values_schema.py', 'values.schema.json');
  assert.equal(readFileSync(path.join(schemaDir, 'values.schema.json'), 'utf8'),
    readFileSync(path.join(chart, 'values.schema.json'), 'utf8'), 'run deploy/monitoring/make_values_schema.py');
  const dashDir = gen('make_dashboards.py', '');
  for (const d of ['moe-cluster.json', 'moe-kv-voice.json']) {
    assert.equal(readFileSync(path.join(dashDir, d), 'utf8'), readFileSync(path.join(chart, 'files', 'dashboards', d), 'utf8'),
      `run deploy/monitoring/make_dashboards.py deploy/k8s/files/dashboards`);
  }
  const r = helm('helm3', ['template', 'moe', chart, '--set', 'monitoring.rulesForDisabledRoles=true',
    '--show-only', 'templates/monitoring/rules.yaml']);
  const rules = parseAll(r.stdout)[0].data['moe-rules.yaml'];
  const committed = readFileSync(path.join(deploy, 'monitoring', 'moe-rules.yaml'), 'utf8').replace(/^#.*\n/gm, '');
  assert.equal(committed, rules, 'run deploy/monitoring/render-rules.sh');
});

test('dashboards: unique panel ids, inside the 24-column grid, every target on the datasource variable', () => {
  for (const d of ['moe-cluster.json', 'moe-kv-voice.json']) {
    const dash = JSON.parse(readFileSync(path.join(chart, 'files', 'dashboards', d), 'utf8'));
    const ids = dash.panels.map((p) => p.id);
    assert.equal(new Set(ids).size, ids.length, d);
    for (const p of dash.panels) {
      assert.ok(p.gridPos.x + p.gridPos.w <= 24, `${d} ${p.title}`);
      for (const t of p.targets ?? []) assert.equal(t.datasource.uid, '${datasource}', `${d} ${p.title}`);
    }
  }
});

test('summary', () => { console.log(`${validated} rendered objects validated (${Object.keys(SCENARIOS).length} value sets x 2 Helm versions)`); });
