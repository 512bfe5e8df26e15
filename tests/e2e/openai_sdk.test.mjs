// End-to-end: the official `openai` npm SDK (tests/js, pinned) against a real local cluster
// started here: a `router` and a `gateway` process on loopback serving the tiny preset.
//
//   MOE_BIN_DIR=build/bin node --test tests/e2e/openai_sdk.test.mjs
// Run by ctest through run_e2e.mjs, which skips (exit 77) when tests/js/node_modules is missing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startService as startServiceIn, waitReady } from './services.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'js', 'package.json'));
const OpenAI = require('openai');

const binDir = process.env.MOE_BIN_DIR ?? path.join(here, '..', '..', 'build', 'bin');
const procs = [];
let workDir;
let client;
let modelId;

const startService = (name, args) => startServiceIn(binDir, procs, name, args);

before(async () => {
  workDir = mkdtempSync(path.join(tmpdir(), 'moe-e2e-'));
  const modelDir = path.join(workDir, 'tiny');
  execFileSync(path.join(binDir, 'moe'), ['make-model', '--preset', 'tiny', '--out', modelDir],
    { stdio: ['ignore', 'ignore', 'inherit'] });
  modelId = 'tiny';
  const router = await startService('router', [
    '--set', `core.model_dir=${modelDir}`, '--set', 'grpc.host=127.0.0.1', '--set', 'grpc.port=0',
    '--set', 'metrics.host=127.0.0.1', '--set', 'metrics.port=0']);
  const gateway = await startService('gateway', [
    '--set', `model_dir=${modelDir}`, '--set', 'http.host=127.0.0.1', '--set', 'http.port=0',
    '--set', `routing.routers=127.0.0.1:${router.grpc}`]);
  const base = `http://127.0.0.1:${gateway.http}`;
  await waitReady(`${base}/readyz`);
  client = new OpenAI({ apiKey: 'unused', baseURL: `${base}/v1`, maxRetries: 0 });
});

after(async () => {
  for (const p of procs.reverse()) {
    if (p.exitCode === null) {
      const exited = new Promise((r) => p.once('exit', r));
      p.kill('SIGTERM');
      await exited;
    }
  }
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

const chatRequest = {
  messages: [{ role: 'user', content: 'Tell me a story about a small robot.' }],
  max_tokens: 24,
  temperature: 0,
};

test('models list shows the served model with its context length', async () => {
  const page = await client.models.list();
  assert.equal(page.data.length, 1);
  assert.equal(page.data[0].id, modelId);
  assert.equal(page.data[0].object, 'model');
  assert.equal(page.data[0].max_model_len, 4096);
});

test('chat completion (non-stream) with usage fields', async () => {
  const r = await client.chat.completions.create({ model: modelId, ...chatRequest });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, modelId);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 24);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat stream reassembles to the non-stream greedy text', async () => {
  const full = await client.chat.completions.create({ model: modelId, ...chatRequest });
  const stream = await client.chat.completions.create({
    model: modelId, ...chatRequest, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
    chunks++;
  }
  assert.ok(chunks >= 3);
  assert.equal(text, full.choices[0].message.content);
  assert.equal(finish, full.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, full.usage.completion_tokens);
  assert.equal(usage.prompt_tokens, full.usage.prompt_tokens);
});

test('completions, plain and streamed, agree', async () => {
  const req = { model: modelId, prompt: 'Once upon a time', max_tokens: 12, temperature: 0 };
  const full = await client.completions.create(req);
  assert.equal(full.object, 'text_completion');
  assert.equal(typeof full.choices[0].text, 'string');
  assert.ok(full.usage.completion_tokens > 0);
  let text = '';
  for await (const chunk of await client.completions.create({ ...req, stream: true })) {
    text += chunk.choices[0]?.text ?? '';
  }
  assert.equal(text, full.choices[0].text);
});

test('a repeated prompt is served from the prefix cache', async () => {
  const long = { model: modelId, prompt: 'abcdefghij '.repeat(12), max_tokens: 2, temperature: 0 };
  await client.completions.create(long);
  const again = await client.completions.create(long);
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0,
    JSON.stringify(again.usage));
});

test('errors: unknown model is 404 model_not_found, negative max_tokens is 400', async () => {
  await assert.rejects(
    client.chat.completions.create({ ...chatRequest, model: 'no-such-model' }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found');
  await assert.rejects(
    client.chat.completions.create({ model: modelId, ...chatRequest, max_tokens: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'max_tokens');
  await assert.rejects(
    client.chat.completions.create({ model: modelId, ...chatRequest, n: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  // Still serving.
  const ok = await client.completions.create({ model: modelId, prompt: 'x', max_tokens: 1 });
  assert.equal(ok.choices.length, 1);
});
