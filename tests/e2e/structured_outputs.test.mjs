// End-to-end: structured outputs and tool calling through the official `openai` npm SDK against a
// real local cluster (a `router` and a `gateway` process on loopback) serving the default model
// (the `small` preset, random weights). Outputs are checked with a real JSON Schema validator
// (`ajv`, pinned in tests/js).
//
//   MOE_BIN_DIR=build/bin node --test tests/e2e/structured_outputs.test.mjs
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
const Ajv = require('ajv');

const binDir = process.env.MOE_BIN_DIR ?? path.join(here, '..', '..', 'build', 'bin');
const procs = [];
let workDir;
let client;
let base;
const modelId = 'small';

const startService = (name, args) => startServiceIn(binDir, procs, name, args);

before(async () => {
  workDir = mkdtempSync(path.join(tmpdir(), 'moe-e2e-so-'));
  const modelDir = path.join(workDir, modelId);
  execFileSync(path.join(binDir, 'moe'), ['make-model', '--preset', 'small', '--out', modelDir],
    { stdio: ['ignore', 'ignore', 'inherit'] });
  const router = await startService('router', [
    '--set', `core.model_dir=${modelDir}`, '--set', 'grpc.host=127.0.0.1', '--set', 'grpc.port=0',
    '--set', 'metrics.host=127.0.0.1', '--set', 'metrics.port=0']);
  const gateway = await startService('gateway', [
    '--set', `model_dir=${modelDir}`, '--set', 'http.host=127.0.0.1', '--set', 'http.port=0',
    '--set', `routing.routers=127.0.0.1:${router.grpc}`]);
  base = `http://127.0.0.1:${gateway.http}`;
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

// A nested schema in OpenAI's strict subset: objects in objects, arrays of objects, enums, a
// pattern, bounded numbers, anyOf with null, a $ref into $defs.
const personSchema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    role: { type: 'string', enum: ['admin', 'user', 'guest'] },
    address: { $ref: '#/$defs/address' },
    tags: { type: 'array', items: { type: 'string', maxLength: 6 }, maxItems: 3 },
    scores: {
      type: 'array',
      minItems: 1,
      maxItems: 2,
      items: {
        type: 'object',
        properties: { k: { type: 'string', maxLength: 4 }, v: { type: 'number', minimum: 0, maximum: 1 } },
        required: ['k', 'v'],
        additionalProperties: false,
      },
    },
    active: { type: 'boolean' },
    note: { anyOf: [{ type: 'string', maxLength: 8 }, { type: 'null' }] },
  },
  required: ['name', 'age', 'role', 'address', 'tags', 'scores', 'active', 'note'],
  additionalProperties: false,
  $defs: {
    address: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 10 }, zip: { type: 'string', pattern: '^[0-9]{5}$' } },
      required: ['city', 'zip'],
      additionalProperties: false,
    },
  },
};
const ajv = new Ajv({ strict: false });
const validatePerson = ajv.compile(personSchema);
const responseFormat = {
  type: 'json_schema', json_schema: { name: 'person', strict: true, schema: personSchema },
};

const weatherParams = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 16 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['city', 'unit', 'days'],
  additionalProperties: false,
};
const validateWeather = ajv.compile(weatherParams);
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather forecast', parameters: weatherParams } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['tz'], additionalProperties: false } } },
];

function personRequest(i, sampled) {
  return {
    model: modelId,
    messages: [{ role: 'user', content: `Describe person number ${i} as JSON.` }],
    response_format: responseFormat,
    max_tokens: 1024,
    ...(sampled ? { temperature: 1, seed: 1000 + i } : { temperature: 0 }),
  };
}

// Runs `fn` over 0..n-1 with at most `width` in flight.
async function pool(n, width, fn) {
  const out = new Array(n);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) {
      const i = next++;
      out[i] = await fn(i);
    }
  }));
  return out;
}

// Under a sanitizer build (MOE_SANITIZED, set by CMake; ASan code runs several times slower) the
// same checks over fewer requests.
const kRequests = process.env.MOE_SANITIZED ? 24 : 100;

test(`${kRequests} greedy and ${kRequests} sampled requests with a nested schema all validate`, async () => {
  for (const sampled of [false, true]) {
    const results = await pool(kRequests, 32, (i) => client.chat.completions.create(personRequest(i, sampled)));
    const texts = new Set();
    for (const [i, r] of results.entries()) {
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', `request ${i} (sampled=${sampled}): ${c.message.content}`);
      const value = JSON.parse(c.message.content);
      assert.ok(validatePerson(value),
        `request ${i} (sampled=${sampled}): ${c.message.content}\n${JSON.stringify(validatePerson.errors)}`);
      texts.add(c.message.content);
    }
    // Not one canned answer: the prompts (and seeds) differ, so do the objects.
    assert.ok(texts.size > 10, `only ${texts.size} distinct outputs`);
  }
});

test('chat.completions.parse returns the parsed object', async () => {
  const r = await client.chat.completions.parse(personRequest(7, false));
  const m = r.choices[0].message;
  assert.equal(typeof m.parsed, 'object');
  assert.ok(validatePerson(m.parsed), JSON.stringify(validatePerson.errors));
  assert.deepEqual(m.parsed, JSON.parse(m.content));
});

test('json_object mode returns a JSON object', async () => {
  const r = await client.chat.completions.create({
    model: modelId, messages: [{ role: 'user', content: 'JSON please' }],
    response_format: { type: 'json_object' }, max_tokens: 512, temperature: 0,
  });
  const c = r.choices[0];
  if (c.finish_reason === 'stop') {
    const v = JSON.parse(c.message.content);
    assert.equal(typeof v, 'object');
    assert.ok(!Array.isArray(v) && v !== null);
  } else {
    assert.equal(c.finish_reason, 'length');  // an unbounded object may run out of tokens
  }
});

test('a constrained greedy request alone equals itself under mixed load', async () => {
  const req = personRequest(3, false);
  const alone = await client.chat.completions.create(req);
  const load = [];
  for (let i = 0; i < 12; i++) {
    load.push(client.chat.completions.create(personRequest(100 + i, i % 2 === 1)));
    load.push(client.chat.completions.create({
      model: modelId, messages: [{ role: 'user', content: `free text ${i}` }], max_tokens: 64,
      temperature: i % 2 ? 1 : 0, seed: i,
    }));
  }
  const again = client.chat.completions.create(req);
  const [under] = await Promise.all([again, ...load]);
  assert.equal(under.choices[0].message.content, alone.choices[0].message.content);
  assert.equal(under.usage.completion_tokens, alone.usage.completion_tokens);
});

test('tool_choice required: non-streamed and streamed calls match the schema', async () => {
  const req = {
    model: modelId,
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
    tools, tool_choice: 'required', max_tokens: 512, temperature: 0,
  };
  const r = await client.chat.completions.create(req);
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.ok(c.message.tool_calls.length >= 1);
  for (const call of c.message.tool_calls) {
    assert.equal(call.type, 'function');
    assert.match(call.id, /^call_/);
    assert.ok(['get_weather', 'get_time'].includes(call.function.name));
    const args = JSON.parse(call.function.arguments);
    if (call.function.name === 'get_weather') assert.ok(validateWeather(args), call.function.arguments);
  }

  // Streamed: the SDK reassembles the deltas into the same message.
  const stream = client.chat.completions.stream(req);
  let deltas = 0;
  stream.on('chunk', (chunk) => {
    if (chunk.choices[0]?.delta?.tool_calls) deltas++;
  });
  const final = await stream.finalChatCompletion();
  const fc = final.choices[0];
  assert.equal(fc.finish_reason, 'tool_calls');
  assert.ok(deltas > 1, `arguments came in ${deltas} chunk(s)`);
  assert.equal(fc.message.tool_calls.length, c.message.tool_calls.length);
  for (const [i, call] of fc.message.tool_calls.entries()) {
    assert.equal(call.function.name, c.message.tool_calls[i].function.name);
    assert.equal(call.function.arguments, c.message.tool_calls[i].function.arguments);
  }

  // Sampled requests: still valid calls.
  for (let seed = 0; seed < 10; seed++) {
    const s = await client.chat.completions.create({ ...req, temperature: 1, seed });
    for (const call of s.choices[0].message.tool_calls) {
      const args = JSON.parse(call.function.arguments);
      if (call.function.name === 'get_weather') assert.ok(validateWeather(args), call.function.arguments);
    }
  }
});

test('a named tool_choice calls that function; a multi-turn exchange with a tool message', async () => {
  const messages = [{ role: 'user', content: 'Weather in Oslo for 3 days?' }];
  const r = await client.chat.completions.create({
    model: modelId, messages, tools, max_tokens: 256, temperature: 0,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  const m = r.choices[0].message;
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.ok(validateWeather(JSON.parse(m.tool_calls[0].function.arguments)));

  // Send the call back with its result: the chat template renders both.
  messages.push(m);
  messages.push({ role: 'tool', tool_call_id: m.tool_calls[0].id, content: '{"forecast": "sunny"}' });
  const next = await client.chat.completions.create({
    model: modelId, messages, tools, max_tokens: 8, temperature: 0,
  });
  assert.equal(next.choices[0].message.role, 'assistant');
  assert.ok(next.usage.prompt_tokens > r.usage.prompt_tokens + 10,
    `${next.usage.prompt_tokens} vs ${r.usage.prompt_tokens}`);
  // The rendered prompt holds the call and the result (the preset's Mistral tool format).
  const tok = await (await fetch(`${base}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: modelId, messages, tools }),
  })).json();
  const text = await (await fetch(`${base}/detokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: modelId, tokens: tok.tokens }),
  })).json();
  assert.match(text.prompt, /\[AVAILABLE_TOOLS\]/);
  assert.match(text.prompt, /\[TOOL_CALLS\] \[\{"name": "get_weather"/);
  assert.match(text.prompt, /\[TOOL_RESULTS\].*sunny/);
});

test('bad schemas and tools get a 400 naming the problem', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: modelId, messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { not: { type: 'string' } } } } } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format' && /not/.test(e.message));
  await assert.rejects(
    client.chat.completions.create({
      model: modelId, messages: [{ role: 'user', content: 'x' }], tools, tool_choice: { type: 'function', function: { name: 'nope' } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
});
