// The monitoring against a real local cluster: two expert workers, a kv-store, a router, asr, tts and a gateway
// started from the chart's own rendered configs (addresses and ports overridden for loopback),
// some traffic, then
//   - `promtool check metrics` on every service's /metrics;
//   - every metric the rules and the dashboard read is exported by the job they select;
//   - a real Prometheus (Debian's) scrapes the cluster with deploy/monitoring/prometheus.yaml's
//     relabelling (kubernetes_sd replaced by static targets that carry the same __meta labels a
//     pod would), the chart's rules loaded: targets up with job = role, every recording rule
//     produces series, the prometheus-adapter queries answer;
//   - the gateway takes the client's x-request-id (or makes one), returns it, and the router's log
//     line for the request carries it;
//   - SIGTERM stops every service with status 0.
// Run: node --test deploy/test/scrape.test.mjs (needs build/bin, promtool, prometheus).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { binDir, deploy, metricNames, render, sleep, startService, until } from './common.mjs';

const work = mkdtempSync(path.join(tmpdir(), 'moe-scrape-'));
const procs = [];
after(() => {
  for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
  rmSync(work, { recursive: true, force: true });
});

function freePort() {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

const start = (name, binary, args) => startService(procs, name, binary, args);

const have = ['router', 'gateway', 'expert-worker', 'kv-store', 'asr', 'tts', 'moe'].every((b) => existsSync(path.join(binDir, b)));
const skip = have ? false : `${binDir} lacks the service binaries`;

// The chart's configs for a tiny two-pool cluster.
const model = path.join(work, 'tiny');
let cfg, rulesText, gw, router, workers, kvStore, asr, tts, prom, promUrl;
const exported = {};  // job -> Set of metric names

test('local cluster from the chart\'s rendered configs', { skip }, async () => {
  const r = spawnSync(path.join(binDir, 'moe'), ['make-model', '--preset', 'tiny', '--out', model], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const objs = render('helm3', ['--set', 'model.name=tiny', '--set-json',
    'expertPools=[{"name":"lo","replicas":1,"experts":["*:0-3"]},{"name":"hi","replicas":1,"experts":["*:4-7"]}]']);
  const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'));
  cfg = Object.fromEntries(Object.entries(cm.data).map(([k, v]) => {
    writeFileSync(path.join(work, k), v);
    return [k, YAML.parse(v)];
  }));
  rulesText = objs.find((o) => o.metadata.name.endsWith('-prometheus-rules')).data['moe-rules.yaml'];
  const loopback = ['--set', 'grpc.host=127.0.0.1', '--set', 'grpc.port=0', '--set', 'metrics.host=127.0.0.1',
    '--set', 'metrics.port=0'];
  workers = await Promise.all(['lo', 'hi'].map((pool) => start(`expert-worker-${pool}`, 'expert-worker',
    ['--config', path.join(work, `expert-worker-${pool}.yaml`), '--set', `core.model_dir=${model}`, ...loopback])));
  // The kv-store (on by default) with its L3 in the work directory.
  kvStore = await start('kv-store', 'kv-store', ['--config', path.join(work, 'kv-store.yaml'),
    '--set', `core.l3_dir=${path.join(work, 'l3')}`, ...loopback]);
  // experts.workers in the chart's order (pool order), the chart's placement kept.
  assert.deepEqual(cfg['router.yaml'].experts.placement, ['*:0-3=0', '*:4-7=1']);
  assert.equal(cfg['router.yaml'].kv_store.targets.length, 1);
  router = await start('router', 'router', ['--config', path.join(work, 'router.yaml'), '--set', `core.model_dir=${model}`,
    '--set', `experts.workers=${workers.map((w) => `127.0.0.1:${w.ports.grpc}`).join(',')}`, '--set', 'router_id=router-0',
    '--set', `kv_store.targets=127.0.0.1:${kvStore.ports.grpc}`, '--set', 'core.micro_batches=1', ...loopback]);
  // asr and tts (on by default): the chart points the gateway at their Services.
  assert.deepEqual(Object.keys(cfg['gateway.yaml'].voice), ['asr', 'tts']);
  [asr, tts] = await Promise.all(['asr', 'tts'].map((role) => start(role, role,
    ['--config', path.join(work, `${role}.yaml`), ...loopback])));
  gw = await start('gateway', 'gateway', ['--config', path.join(work, 'gateway.yaml'), '--set', `model_dir=${model}`,
    '--set', 'http.host=127.0.0.1', '--set', 'http.port=0', '--set', `routing.routers=127.0.0.1:${router.ports.grpc}`,
    '--set', `voice.asr=127.0.0.1:${asr.ports.grpc}`, '--set', `voice.tts=127.0.0.1:${tts.ports.grpc}`]);
  await until('gateway ready', async () => (await fetch(`http://127.0.0.1:${gw.ports.http}/readyz`)).status === 200);
});

const api = (p) => `http://127.0.0.1:${gw.ports.http}${p}`;
async function traffic() {
  const prompts = ['Hello there, this is a shared prefix of a few blocks of tokens', 'Hello there, this is a shared prefix of a few blocks of tokens',
    'Something else entirely', 'Hello there, this is a shared prefix of a few blocks of tokens, and more'];
  for (const prompt of prompts) {
    const r = await fetch(api('/v1/completions'), { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', prompt, max_tokens: 4, temperature: 0 }) });
    assert.equal(r.status, 200, await r.text());
  }
  const s = await fetch(api('/v1/chat/completions'), { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, stream: true }) });
  assert.equal(s.status, 200);
  await s.text();
  // a refused request (bad parameter): rejection and 4xx series
  const bad = await fetch(api('/v1/completions'), { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt: 'x', max_tokens: -1 }) });
  assert.equal(bad.status, 400);
  await bad.text();
  // voice: speech (tts first-chunk series) and a transcription of it (asr finalize, realtime factor)
  const speech = await fetch(api('/v1/audio/speech'), { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'tts-1', voice: 'alloy', input: 'Testing one two three.', response_format: 'wav' }) });
  assert.equal(speech.status, 200);
  const form = new FormData();
  form.append('model', 'whisper-1');
  form.append('file', new Blob([await speech.arrayBuffer()], { type: 'audio/wav' }), 'speech.wav');
  const heard = await fetch(api('/v1/audio/transcriptions'), { method: 'POST', body: form });
  assert.equal(heard.status, 200, await heard.clone().text());
  await heard.text();
}

const targets = () => [
  { job: 'gateway', container: 'gateway', port: 'http', addr: gw.ports.http, pod: 'moe-gateway-0' },
  { job: 'router', container: 'router', port: 'metrics', addr: router.ports.metrics, pod: 'moe-router-0' },
  { job: 'expert-worker', container: 'expert-worker', port: 'metrics', addr: workers[0].ports.metrics, pod: 'moe-experts-lo-0' },
  { job: 'expert-worker', container: 'expert-worker', port: 'metrics', addr: workers[1].ports.metrics, pod: 'moe-experts-hi-0' },
  { job: 'kv-store', container: 'kv-store', port: 'metrics', addr: kvStore.ports.metrics, pod: 'moe-kv-store-0' },
  { job: 'asr', container: 'asr', port: 'metrics', addr: asr.ports.metrics, pod: 'moe-asr-0' },
  { job: 'tts', container: 'tts', port: 'metrics', addr: tts.ports.metrics, pod: 'moe-tts-0' },
];

test('promtool check metrics passes on every service\'s /metrics', { skip }, async () => {
  await traffic();
  // The router refreshes its expert-load gauges on its probe interval (experts.probe_interval).
  await until('the router\'s expert gauges', async () => {
    const text = await (await fetch(`http://127.0.0.1:${router.ports.metrics}/metrics`)).text();
    return ['moe_expert_balancedness{', 'moe_expert_hot_share{', 'moe_expert_tokens_total{'].every((m) => text.includes(m));
  }, 10000);
  const problems = [];
  for (const t of targets()) {
    const text = await (await fetch(`http://127.0.0.1:${t.addr}/metrics`)).text();
    const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    if (r.status !== 0) problems.push(`${t.pod}: ${r.stdout}${r.stderr}`);
    const names = exported[t.job] ??= new Set();
    for (const line of text.split('\n')) {
      const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/);
      if (m) names.add(m[1]);
    }
  }
  assert.deepEqual(problems, []);
  assert.ok(!exported.router.has('vllm:num_requests_waiting'), 'the vllm: aliases are off by default');
});

// name{...job="X"...} -> [name, X or null] for every selector of an expression.
function selections(expr) {
  const out = [];
  const cleaned = expr.replace(/\[[^\]]*\]/g, '[]');
  for (const name of metricNames(cleaned)) {
    for (const m of cleaned.matchAll(new RegExp(`(?<![\\w:])${name.replace(/[:$]/g, '\\$&')}(\\{[^}]*\\})?`, 'g'))) {
      const job = m[1]?.match(/job=~?"([^"]+)"/)?.[1];
      out.push([name, job ?? null]);
    }
  }
  return out;
}

test('every metric the rules and the dashboard read is exported by the job they select', { skip }, () => {
  const groups = YAML.parse(rulesText).groups;
  const rules = groups.flatMap((g) => g.rules);
  assert.deepEqual(groups.map((g) => g.name), ['moe.recording', 'moe.alerts', 'moe.kv-store', 'moe.voice'],
    'the kv-store, asr and tts are on by default');
  const recorded = new Set(rules.filter((r) => r.record).map((r) => r.record));
  const synthetic = new Set(['up']);
  const dash = JSON.parse(readFileSync(path.join(deploy, 'k8s', 'files', 'dashboards', 'moe-cluster.json'), 'utf8'));
  const exprs = [
    ...rules.map((r) => [`rule ${r.record ?? r.alert}`, r.expr]),
    ...dash.panels.flatMap((p) => (p.targets ?? []).map((t) => [`panel "${p.title}"`, t.expr])),
    ...dash.templating.list.filter((v) => v.query?.query).map((v) => [`variable ${v.name}`, v.query.query.replace(/^label_values\((.*),\s*\w+\)$/, '$1')]),
    ...dash.annotations.list.filter((a) => a.expr).map((a) => [`annotation ${a.name}`, a.expr]),
  ];
  let checked = 0;
  for (const [where, expr] of exprs) {
    for (const [name, job] of selections(expr)) {
      if (recorded.has(name) || synthetic.has(name)) continue;
      const jobs = job ? job.split('|').filter((j) => exported[j]) : Object.keys(exported);
      // a job="a|b|kv-store|..." selector may name roles that are not running here
      assert.ok(jobs.length, `${where}: ${name} selects no running job (${job})`);
      assert.ok(jobs.some((j) => exported[j].has(name)), `${where}: ${name} is not exported by ${jobs.join(' or ')}`);
      checked++;
    }
  }
  console.log(`${checked} metric selections checked against the running services`);
});

test('a real Prometheus scrapes the cluster with the annotation-implied config; recording rules produce series', { skip }, async () => {
  const port = await freePort();
  promUrl = `http://127.0.0.1:${port}`;
  const base = YAML.parse(readFileSync(path.join(deploy, 'monitoring', 'prometheus.yaml'), 'utf8'));
  const job = base.scrape_configs[0];
  // What kubernetes_sd would discover for these pods: one target per container port.
  const meta = (t, portName, addr) => ({
    targets: [`127.0.0.1:${addr}`],
    labels: {
      __meta_kubernetes_namespace: 'moe-test',
      __meta_kubernetes_pod_name: t.pod,
      __meta_kubernetes_pod_container_name: t.container,
      __meta_kubernetes_pod_container_port_name: portName,
      __meta_kubernetes_pod_phase: 'Running',
      __meta_kubernetes_pod_annotation_prometheus_io_scrape: 'true',
      __meta_kubernetes_pod_annotation_prometheus_io_path: '/metrics',
      ...(t.pod.includes('experts') ? { __meta_kubernetes_pod_label_moe_cluster_io_pool: t.pod.split('-')[2] } : {}),
    },
  });
  const statics = targets().map((t) => meta(t, t.port, t.addr));
  statics.push(meta(targets()[1], 'grpc', router.ports.grpc));  // a gRPC port: must not be scraped
  delete job.kubernetes_sd_configs;
  job.static_configs = statics;
  job.scrape_interval = '1s';
  base.global = { scrape_interval: '1s', evaluation_interval: '1s' };
  base.rule_files = [path.join(work, 'moe-rules.yaml')];
  writeFileSync(path.join(work, 'moe-rules.yaml'), rulesText);
  writeFileSync(path.join(work, 'prometheus.yaml'), YAML.stringify(base));
  const check = spawnSync('promtool', ['check', 'config', path.join(work, 'prometheus.yaml')], { encoding: 'utf8' });
  assert.equal(check.status, 0, check.stdout + check.stderr);
  prom = spawn('prometheus', [`--config.file=${path.join(work, 'prometheus.yaml')}`, `--storage.tsdb.path=${path.join(work, 'tsdb')}`,
    `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], { stdio: ['ignore', 'ignore', 'pipe'] });
  prom.log = '';
  prom.stderr.on('data', (d) => { prom.log += d; });
  procs.push(prom);
  await until('prometheus ready', async () => (await fetch(`${promUrl}/-/ready`)).ok, 30000);
  const active = await until('7 targets up', async () => {
    const t = (await (await fetch(`${promUrl}/api/v1/targets`)).json()).data;
    return t.activeTargets.length === 7 && t.activeTargets.every((x) => x.health === 'up') ? t : null;
  }, 45000);
  assert.deepEqual(active.activeTargets.map((t) => t.labels.job).sort(),
    ['asr', 'expert-worker', 'expert-worker', 'gateway', 'kv-store', 'router', 'tts']);
  assert.ok(active.activeTargets.every((t) => t.labels.namespace === 'moe-test' && t.labels.pod));
  assert.ok(active.droppedTargets.some((t) => t.discoveredLabels.__meta_kubernetes_pod_container_port_name === 'grpc'));
  // traffic inside the scrape window, so that rates are non-zero
  await traffic();
  await sleep(2500);
  await traffic();
  const query = async (q) => (await (await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(q)}`)).json()).data.result;
  const recordings = YAML.parse(rulesText).groups.flatMap((g) => g.rules).filter((r) => r.record).map((r) => r.record);
  const empty = await until('every recording rule to produce series', async () => {
    const missing = [];
    for (const rec of recordings) if ((await query(rec)).length === 0) missing.push(rec);
    return missing.length === 0 ? missing : null;
  }, 30000).catch(async () => {
    const missing = [];
    for (const rec of recordings) if ((await query(rec)).length === 0) missing.push(rec);
    return missing;
  });
  assert.deepEqual(empty, [], 'recording rules without series');
  const ttft = await query('job_model:moe_request_ttft_seconds:p99_5m');
  assert.deepEqual(ttft.map((s) => s.metric.job).sort(), ['gateway', 'router']);
  const hit = await query('tier:moe_prefix_cache_hit_ratio:rate5m{tier="l1"}');
  assert.ok(Number(hit[0].value[1]) > 0, 'repeated prompts hit L1');
  console.log(`${recordings.length} recording rules produce series`);
});

test('the prometheus-adapter rules answer for the running roles', { skip }, async () => {
  const objs = render('helm3', []);
  const adapter = YAML.parse(objs.find((o) => o.metadata.name.endsWith('-prometheus-adapter')).data['config.yaml']);
  const query = async (q) => (await (await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(q)}`)).json());
  for (const r of [...adapter.rules, ...adapter.externalRules]) {
    const series = r.seriesQuery.match(/^[a-z_:]+/)[0];
    const q = r.metricsQuery.replace('<<.Series>>', series).replace('<<.LabelMatchers>>', 'namespace="moe-test"')
      .replace('<<.GroupBy>>', 'pod');
    const res = await query(q);
    assert.equal(res.status, 'success', `${r.name.as}: ${JSON.stringify(res)}`);
    const running = true;  // every role's service runs in this cluster
    if (running) assert.ok(res.data.result.length > 0, `${r.name.as}: no series (${q})`);
  }
});

test('x-request-id: taken from the client, returned, and in the router\'s log line', { skip }, async () => {
  const id = 'scrape-test-0123456789';
  const r = await fetch(api('/v1/completions'), { method: 'POST',
    headers: { 'Content-Type': 'application/json', 'x-request-id': id },
    body: JSON.stringify({ model: 'tiny', prompt: 'trace me', max_tokens: 2 }) });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('x-request-id'), id);
  await r.text();
  const bad = await fetch(api('/v1/completions'), { method: 'POST',
    headers: { 'Content-Type': 'application/json', 'x-request-id': `${id}-bad` },
    body: JSON.stringify({ model: 'tiny', prompt: 'x', temperature: -3 }) });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.request_id, `${id}-bad`, 'error bodies carry the id');
  const made = await fetch(api('/v1/models'));
  assert.match(made.headers.get('x-request-id') ?? '', /^[A-Za-z0-9-]{8,}$/, 'one is made when the client sends none');
  await until('the router to log the request id', () => router.log.includes(id), 5000);
  await until('the gateway to log the request id', () => gw.log.includes(id), 5000);
});

test('SIGTERM stops every service with status 0', { skip }, async () => {
  for (const p of [gw, router, ...workers, kvStore]) {
    const exited = new Promise((resolve) => p.on('exit', (code) => resolve(code)));
    p.kill('SIGTERM');
    assert.equal(await exited, 0, `${p.name}:\n${p.log}`);
  }
  prom.kill('SIGTERM');
});
