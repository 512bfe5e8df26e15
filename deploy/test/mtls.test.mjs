// security.mtls against real processes: the chart rendered with mTLS on, each role's
// certificate issued by a CA made now (openssl) with exactly the SANs of the chart's own
// Certificate for that role, the certificate Secret's files laid out per role (tls.crt, tls.key,
// ca.crt), and a cluster (two expert workers, a kv-store, a router, asr, a gateway) started from
// the rendered configs on loopback. Each client verifies the name the chart makes it dial (the
// pod or Service DNS name, given as tls.server_name_override since everything here is 127.0.0.1),
// so a SAN missing from a Certificate fails here as it would in the cluster. Then:
//   - a completion and a transcription through the gateway (gateway -> router -> workers and
//     kv-store; gateway -> asr), every hop mTLS with role checks, nothing refused;
//   - `moe admin stats` with the admin certificate is served; with the router's certificate
//     (an identity the router grants no role) it is refused (UNAUTHENTICATED) and counted in
//     moe_rpc_refused_total; with a certificate of a foreign CA, or none, the handshake fails.
// Run: node --test deploy/test/mtls.test.mjs (needs build/bin and openssl).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { binDir, render, startService, until } from './common.mjs';

const work = mkdtempSync(path.join(tmpdir(), 'moe-mtls-'));
const procs = [];
after(() => {
  for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
  rmSync(work, { recursive: true, force: true });
});
const start = (name, binary, args) => startService(procs, name, binary, args);

function openssl(args) {
  const r = spawnSync('openssl', args, { encoding: 'utf8' });
  assert.equal(r.status, 0, `openssl ${args.join(' ')}: ${r.stderr}`);
}
const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
// A CA in dir/<name>-ca.{crt,key}.
function makeCa(name) {
  const crt = path.join(work, `${name}-ca.crt`), key = path.join(work, `${name}-ca.key`);
  openssl(['req', '-x509', ...EC, '-keyout', key, '-out', crt, '-subj', `/CN=${name}`, '-days', '1',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
  return { crt, key };
}
let serial = 1;
// A role's Secret as files: dir/tls.crt, tls.key, ca.crt, the SANs of its Certificate.
function issue(ca, dir, cert) {
  mkdirSync(dir, { recursive: true });
  const sans = [...(cert.spec.uris ?? []).map((u) => `URI:${u}`), ...(cert.spec.dnsNames ?? []).map((d) => `DNS:${d}`)];
  const ext = path.join(dir, 'ext.cnf');
  writeFileSync(ext, `basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n` +
    `extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=${sans.join(',')}\n`);
  openssl(['req', '-new', ...EC, '-keyout', path.join(dir, 'tls.key'), '-out', path.join(dir, 'req.csr'),
    '-subj', `/CN=${cert.spec.commonName}`]);
  openssl(['x509', '-req', '-in', path.join(dir, 'req.csr'), '-CA', ca.crt, '-CAkey', ca.key, '-set_serial', String(serial++),
    '-days', '1', '-extfile', ext, '-out', path.join(dir, 'tls.crt')]);
  writeFileSync(path.join(dir, 'ca.crt'), spawnSync('cat', [ca.crt], { encoding: 'utf8' }).stdout);
  return dir;
}

const have = ['router', 'gateway', 'expert-worker', 'kv-store', 'asr', 'moe'].every((b) => existsSync(path.join(binDir, b)));
const skip = have ? (spawnSync('openssl', ['version']).status === 0 ? false : 'no openssl') : `${binDir} lacks the service binaries`;

const model = path.join(work, 'tiny');
let objs, cfg, certs, gw, router, admin;
const dir = (role) => path.join(work, 'secrets', role);
const hostOf = (target) => target.replace(/:\d+$/, '');

test('a cluster from the chart\'s configs with security.mtls on, certificates with the chart\'s SANs', { skip }, async () => {
  const r = spawnSync(path.join(binDir, 'moe'), ['make-model', '--preset', 'tiny', '--out', model], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  objs = render('helm3', ['--set', 'security.mtls.enabled=true', '--set', 'model.name=tiny', '--set', 'tts.enabled=false',
    '--set-json', 'expertPools=[{"name":"lo","replicas":1,"experts":["*:0-3"]},{"name":"hi","replicas":1,"experts":["*:4-7"]}]']);
  const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-config'));
  certs = Object.fromEntries(objs.filter((o) => o.kind === 'Certificate' && !o.spec.isCA).map((c) => [c.spec.commonName, c]));
  const ca = makeCa('cluster');
  for (const [role, cert] of Object.entries(certs)) issue(ca, dir(role), cert);
  // Each container reads its role's Secret at /etc/moe-tls; here, that role's folder.
  cfg = {};
  for (const [key, text] of Object.entries(cm.data)) {
    const role = key.replace(/\.yaml$/, '').replace(/^expert-worker-.*/, 'expert-worker');
    const local = text.replaceAll('/etc/moe-tls/', `${dir(role)}/`);
    writeFileSync(path.join(work, key), local);
    cfg[key] = YAML.parse(local);
  }
  const loopback = ['--set', 'grpc.host=127.0.0.1', '--set', 'grpc.port=0', '--set', 'metrics.host=127.0.0.1', '--set', 'metrics.port=0'];
  // A sanitizer build (MOE_SANITIZED) answers slower than the kv-store client's 50-200 ms
  // budgets: one Lookup past its deadline is an RPC error that says nothing about mTLS.
  const sanitizedKvTimeouts = process.env.MOE_SANITIZED
    ? ['--set', 'kv_store.fetch_timeout=10s', '--set', 'kv_store.response_timeout=10s', '--set', 'kv_store.put_timeout=30s']
    : [];
  const workers = await Promise.all(['lo', 'hi'].map((pool) => start(`expert-worker-${pool}`, 'expert-worker',
    ['--config', path.join(work, `expert-worker-${pool}.yaml`), '--set', `core.model_dir=${model}`, ...loopback])));
  const kvStore = await start('kv-store', 'kv-store', ['--config', path.join(work, 'kv-store.yaml'),
    '--set', `core.l3_dir=${path.join(work, 'l3')}`, ...loopback]);
  // Every client verifies the name the chart makes it dial (the pods' and Services' DNS names).
  const routerCfg = cfg['router.yaml'];
  router = await start('router', 'router', ['--config', path.join(work, 'router.yaml'), '--set', `core.model_dir=${model}`,
    '--set', `experts.workers=${workers.map((w) => `127.0.0.1:${w.ports.grpc}`).join(',')}`, '--set', 'router_id=router-0',
    '--set', `experts.channel.tls.server_name_override=${hostOf(routerCfg.experts.workers[1])}`,
    '--set', `kv_store.targets=127.0.0.1:${kvStore.ports.grpc}`,
    '--set', `kv_store.channel.tls.server_name_override=${hostOf(routerCfg.kv_store.targets[0])}`,
    '--set', 'core.micro_batches=1', ...sanitizedKvTimeouts, ...loopback]);
  const asr = await start('asr', 'asr', ['--config', path.join(work, 'asr.yaml'), ...loopback]);
  const gwCfg = cfg['gateway.yaml'];
  gw = await start('gateway', 'gateway', ['--config', path.join(work, 'gateway.yaml'), '--set', `model_dir=${model}`,
    '--set', 'http.host=127.0.0.1', '--set', 'http.port=0', '--set', `routing.routers=127.0.0.1:${router.ports.grpc}`,
    '--set', `routing.channel.tls.server_name_override=${hostOf(gwCfg.routing.routers[0])}`,
    '--set', `voice.asr=127.0.0.1:${asr.ports.grpc}`, '--set', `voice.channel.tls.server_name_override=${hostOf(gwCfg.voice.asr[0])}`]);
  await until('gateway ready', async () => (await fetch(`http://127.0.0.1:${gw.ports.http}/readyz`)).status === 200);
  admin = (secret, extra = []) => spawnSync(path.join(binDir, 'moe'), ['admin', 'stats', '--routers', `127.0.0.1:${router.ports.grpc}`,
    '--tls-server-name', hostOf(gwCfg.routing.routers[0]), '--timeout', '10s',
    ...(secret ? ['--tls-ca', path.join(secret, 'ca.crt'), '--tls-cert', path.join(secret, 'tls.crt'), '--tls-key', path.join(secret, 'tls.key')] : []),
    ...extra], { encoding: 'utf8' });
});

test('a completion and a transcription through the gateway, every hop over mTLS', { skip }, async () => {
  for (const prompt of ['Hello there, this is a shared prefix of a few blocks of tokens', 'Hello there, this is a shared prefix of a few blocks of tokens']) {
    const r = await fetch(`http://127.0.0.1:${gw.ports.http}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', prompt, max_tokens: 4, temperature: 0 }) });
    const body = await r.text();
    assert.equal(r.status, 200, body);
  }
  // 0.5 s of silence, 16 kHz PCM16 WAV: the gateway -> asr stream
  const samples = 8000, wav = Buffer.alloc(44 + samples * 2);
  wav.write('RIFF', 0); wav.writeUInt32LE(36 + samples * 2, 4); wav.write('WAVEfmt ', 8); wav.writeUInt32LE(16, 16);
  wav.writeUInt16LE(1, 20); wav.writeUInt16LE(1, 22); wav.writeUInt32LE(16000, 24); wav.writeUInt32LE(32000, 28);
  wav.writeUInt16LE(2, 32); wav.writeUInt16LE(16, 34); wav.write('data', 36); wav.writeUInt32LE(samples * 2, 40);
  const form = new FormData();
  form.append('model', 'whisper-1');
  form.append('file', new Blob([wav], { type: 'audio/wav' }), 'silence.wav');
  const heard = await fetch(`http://127.0.0.1:${gw.ports.http}/v1/audio/transcriptions`, { method: 'POST', body: form });
  const text = await heard.text();
  assert.equal(heard.status, 200, text);
  const metrics = await (await fetch(`http://127.0.0.1:${router.ports.metrics}/metrics`)).text();
  assert.doesNotMatch(metrics, /^moe_rpc_refused_total\{/m, 'nothing the chart wires is refused');
  // the router's kv-store calls went through (blocks put, no RPC errors)
  const series = (name) => [...metrics.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))].map((m) => Number(m[1]));
  assert.ok(series('moe_kv_store_client_blocks_total').some((v) => v > 0), 'blocks sent to the kv-store');
  assert.ok(series('moe_kv_store_client_rpc_errors_total').every((v) => v === 0),
    `no kv-store RPC errors: ${metrics.split('\n').filter((l) => l.startsWith('moe_kv_store_client_rpc_errors_total')).join('; ')}\n` +
    router.log.split('\n').filter((l) => l.includes('kv-store')).join('\n'));
});

test('moe admin: the admin certificate is served; other roles are refused and counted; foreign or no certificates fail the handshake', { skip }, async () => {
  const ok = admin(dir('admin'));
  assert.equal(ok.status, 0, ok.stderr);
  // the router's certificate is valid but names no role the router serves (gateway, admin)
  const denied = admin(dir('router'));
  assert.notEqual(denied.status, 0);
  assert.match(denied.stderr, /UNAUTHENTICATED/);
  const metrics = await (await fetch(`http://127.0.0.1:${router.ports.metrics}/metrics`)).text();
  assert.match(metrics, /^moe_rpc_refused_total\{(?=[^}]*code="UNAUTHENTICATED")(?=[^}]*method="GetStats")[^}]*\} 1$/m);
  // a certificate with the admin identity from another CA: no handshake
  const foreign = makeCa('foreign');
  const forged = issue(foreign, path.join(work, 'forged'), certs.admin);
  writeFileSync(path.join(forged, 'ca.crt'), spawnSync('cat', [path.join(dir('admin'), 'ca.crt')], { encoding: 'utf8' }).stdout);
  assert.notEqual(admin(forged).status, 0, 'a foreign CA\'s certificate is refused');
  assert.notEqual(admin(null, ['--tls-ca', path.join(dir('admin'), 'ca.crt')]).status, 0, 'no client certificate is refused');
  assert.notEqual(admin(null).status, 0, 'plaintext is refused');
});
