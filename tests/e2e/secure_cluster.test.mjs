// End-to-end: a whole local cluster under mTLS and per-role auth, and no secret in any log or
// metric (issue 17). `moe up --set security.mtls=true --set security.auth=true
// --set security.tokens=true` (the tiny preset: kv-store, two expert workers over shared memory,
// router, asr, tts, gateway) makes a throwaway CA, one certificate per service kind, a bearer
// token per role and a gateway API key; then, with the official `openai` SDK (tests/js, pinned):
//   - a request without the API key, or with a wrong one, is refused (401);
//   - chat completions, streamed and not, and an audio speech -> transcription round trip;
//   - `moe admin stats` with the admin certificate is served; a plaintext client and a client
//     holding another role (the router's certificate) are refused at the router, and the router
//     counts the refusal (moe_rpc_refused_total);
//   - after the run, every line any service wrote (moe up's stdout and stderr, which carry all
//     of them) and every /metrics page hold none of the API key, the bearer tokens or the
//     private keys (PEM bodies) the run used.
//
//   MOE_BIN_DIR=build/bin node --test tests/e2e/secure_cluster.test.mjs
// Run by ctest through run_e2e.mjs (moe_e2e_secure_cluster).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { waitForUpReady } from './services.mjs';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'js', 'package.json'));
const OpenAI = require('openai');
const { toFile } = require('openai');

const binDir = process.env.MOE_BIN_DIR ?? path.join(here, '..', '..', 'build', 'bin');
const moe = path.join(binDir, 'moe');

let up;
let upExited;
let workDir;
let ready;
let client;
let apiKey;
const output = [];  // every line moe up and the services wrote, stdout and stderr
const metricsPages = [];

// The secrets of this run, read from the files moe up made (before it stops).
function secretsOf(security) {
  const secrets = [];
  secrets.push({ what: 'API key', value: readFileSync(security.api_key_file, 'utf8').trim() });
  for (const [role, file] of Object.entries(security.token_files ?? {})) {
    secrets.push({ what: `${role} bearer token`, value: readFileSync(file, 'utf8').trim() });
  }
  for (const name of readdirSync(security.dir).filter((f) => f.endsWith('.key'))) {
    // Each base64 line of the PEM body (a log that printed the key would hold them whole).
    const body = readFileSync(path.join(security.dir, name), 'utf8').split('\n')
      .filter((l) => l.length >= 16 && !l.startsWith('-----'));
    assert.ok(body.length > 0, name);
    body.forEach((line, i) => secrets.push({ what: `${name} line ${i + 1}`, value: line }));
  }
  return secrets;
}

// The secrets that appear in `text`, by name (never the secret itself, in case of a failure).
function leaked(secrets, text) {
  return secrets.filter((s) => text.includes(s.value)).map((s) => s.what);
}

function admin(args) {
  return spawnSync(moe, ['admin', 'stats', '--routers', routerAddress(), ...args],
    { encoding: 'utf8', timeout: 60000 });
}

function routerAddress() {
  const r = ready.services.find((s) => s.service === 'router');
  return `127.0.0.1:${r.grpc}`;
}

function adminTls(kind) {
  const { ca, certs } = ready.security;
  return ['--tls-ca', ca, '--tls-cert', certs[kind].cert, '--tls-key', certs[kind].key,
    '--tls-server-name', 'localhost'];
}

async function scrape(url) {
  const r = await fetch(url);
  assert.equal(r.status, 200, url);
  return r.text();
}

before(async () => {
  workDir = mkdtempSync(path.join(tmpdir(), 'moe-secure-'));
  const model = path.join(workDir, 'tiny');
  execFileSync(moe, ['make-model', '--preset', 'tiny', '--out', model],
    { stdio: ['ignore', 'ignore', 'inherit'] });
  up = spawn(moe, ['up', '--model', model, '--port', '0', '--set', `data_dir=${workDir}/data`,
    '--set', 'security.mtls=true', '--set', 'security.auth=true', '--set', 'security.tokens=true'],
  { stdio: ['ignore', 'pipe', 'pipe'] });
  upExited = new Promise((resolve) => up.on('exit', (code) => resolve(code)));
  readline.createInterface({ input: up.stderr }).on('line', (line) => {
    output.push(line);
    if (process.env.MOE_E2E_VERBOSE) console.error(line);
  });
  ready = await waitForUpReady(up, output);
  assert.ok(ready.security?.mtls && ready.security?.auth, JSON.stringify(ready));
  apiKey = readFileSync(ready.security.api_key_file, 'utf8').trim();
  client = new OpenAI({ apiKey, baseURL: `${ready.url}/v1`, maxRetries: 0 });
});

after(async () => {
  if (up && up.exitCode === null) {
    up.kill('SIGINT');
    await upExited;
  }
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

test('the gateway refuses a request without its API key or with a wrong one', async () => {
  for (const key of ['', 'sk-moe-wrong']) {
    const r = await fetch(`${ready.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...(key ? { Authorization: `Bearer ${key}` } : {}) },
      body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 }),
    });
    assert.equal(r.status, 401, `key "${key}"`);
  }
});

test('chat completions over mTLS, streamed and not', async () => {
  const request = {
    model: 'tiny', messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 8,
    temperature: 0,
  };
  const full = await client.chat.completions.create(request);
  assert.ok(['length', 'stop'].includes(full.choices[0].finish_reason), JSON.stringify(full));
  assert.ok(full.usage.completion_tokens > 0 && full.usage.completion_tokens <= 8);
  const stream = await client.chat.completions.create({ ...request, stream: true });
  let text = '';
  let finish;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, full.choices[0].finish_reason);
  // Greedy: the stream says what the whole answer said.
  assert.equal(text, full.choices[0].message.content);
});

test('audio speech and transcription round trip through tts and asr over mTLS', async () => {
  const wav = Buffer.from(await (await client.audio.speech.create({
    model: 'tts-1', voice: 'alloy', input: 'hello world', response_format: 'wav',
  })).arrayBuffer());
  assert.equal(wav.toString('ascii', 0, 4), 'RIFF');
  assert.ok(wav.length > 1000, `${wav.length} bytes`);
  const transcript = await client.audio.transcriptions.create({
    model: 'gpt-4o-mini-transcribe', file: await toFile(wav, 'speech.wav', { type: 'audio/wav' }),
  });
  assert.equal(typeof transcript.text, 'string');
});

test('moe admin stats is served with the admin certificate', () => {
  const r = admin(adminTls('admin'));
  assert.equal(r.status, 0, r.stderr);
  const stats = JSON.parse(r.stdout.split('\n')[0]);
  assert.equal(stats.router, routerAddress());
  assert.equal(stats.model, 'tiny');
});

test('a plaintext client and a client holding another role are refused at the router', async () => {
  const plaintext = admin(['--timeout', '5s']);
  assert.notEqual(plaintext.status, 0, plaintext.stdout);
  assert.equal(plaintext.stdout, '');
  // The router's certificate is valid (same CA) but names the router role, not admin/gateway.
  const wrongRole = admin([...adminTls('router'), '--timeout', '5s']);
  assert.notEqual(wrongRole.status, 0, wrongRole.stdout);
  assert.match(wrongRole.stderr, /PERMISSION_DENIED.*needs role gateway,admin; the caller holds router/);
  const r = ready.services.find((s) => s.service === 'router');
  const metrics = await scrape(`http://127.0.0.1:${r.metrics}/metrics`);
  const refused = metrics.split('\n').filter((l) => l.startsWith('moe_rpc_refused_total{') &&
    l.includes('method="GetStats"') && l.includes('code="PERMISSION_DENIED"'));
  assert.equal(refused.length, 1, metrics);
  assert.ok(Number(refused[0].split(' ').pop()) >= 1, refused[0]);
});

test('no API key, bearer token or private key appears in any log or /metrics page', async () => {
  const secrets = secretsOf(ready.security);
  assert.ok(secrets.length >= 1 + 3 + 7, secrets.map((s) => s.what).join(', '));
  // Every /metrics page of the cluster, after the traffic above.
  metricsPages.push(await scrape(`${ready.url}/metrics`));
  for (const s of ready.services.filter((x) => x.metrics)) {
    metricsPages.push(await scrape(`http://127.0.0.1:${s.metrics}/metrics`));
  }
  assert.ok(metricsPages.length >= 7, `${metricsPages.length} pages`);
  assert.ok(metricsPages.some((p) => p.includes('moe_rpc_refused_total')));
  // Stop the cluster so that every process has written its last line (drain, shutdown).
  up.kill('SIGINT');
  assert.equal(await upExited, 0);
  const logs = output.join('\n');
  // The logs are the services' real output: every process started and stopped.
  for (const s of ready.services) assert.ok(logs.includes(s.name), s.name);
  assert.deepEqual(leaked(secrets, logs), [], 'secrets in the logs');
  assert.deepEqual(leaked(secrets, metricsPages.join('\n')), [], 'secrets in /metrics');
});
