// End-to-end voice: `moe up` (router, asr, tts, gateway as separate processes on loopback, the
// tiny preset) driven by the official `openai` npm SDK (tests/js, pinned):
//   - audio.speech.create (mp3 by default, wav, an unsupported aac),
//   - audio.transcriptions.create on real recorded speech (pocketsphinx-testdata librivox),
//   - the SDK's realtime WebSocket client (openai/realtime/ws) streaming that recording paced in
//     real time: transcript, text deltas, audio deltas that decode to PCM; and a barge-in that
//     cancels the reply.
//
//   MOE_BIN_DIR=build/bin node --test tests/e2e/voice.test.mjs
// Run by ctest through run_e2e.mjs (skipped, 77, without tests/js/node_modules).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { waitForUpReady } from './services.mjs';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'js', 'package.json'));
const OpenAI = require('openai');
const { toFile } = require('openai');
const { OpenAIRealtimeWS } = require('openai/realtime/ws');

const binDir = process.env.MOE_BIN_DIR ?? path.join(here, '..', '..', 'build', 'bin');
// "he was not an ill disposed young man", 2.99 s, 16 kHz mono (real recorded speech).
const kSpeech =
  '/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav';

let up;
let upExited;
let workDir;
let client;
let baseUrl;

before(async () => {
  if (process.env.MOE_GATEWAY_URL) {  // a cluster already running (debugging)
    baseUrl = process.env.MOE_GATEWAY_URL;
    client = new OpenAI({ apiKey: 'unused', baseURL: `${baseUrl}/v1`, maxRetries: 0 });
    return;
  }
  workDir = mkdtempSync(path.join(tmpdir(), 'moe-voice-'));
  const model = path.join(workDir, 'tiny');
  execFileSync(path.join(binDir, 'moe'), ['make-model', '--preset', 'tiny', '--out', model],
    { stdio: ['ignore', 'ignore', 'inherit'] });
  up = spawn(path.join(binDir, 'moe'), ['up', '--model', model, '--port', '0'],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  upExited = new Promise((resolve) => up.on('exit', (code) => resolve(code)));
  const lines = [];
  const ready = await waitForUpReady(up, lines);
  baseUrl = ready.url;
  client = new OpenAI({ apiKey: 'unused', baseURL: `${baseUrl}/v1`, maxRetries: 0 });
});

after(async () => {
  if (up && up.exitCode === null) {
    up.kill('SIGINT');
    assert.equal(await upExited, 0);
  }
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

// The samples of a PCM16 mono WAV (the testdata's layout: a 44-byte canonical header).
function wavSamples(file) {
  const b = readFileSync(file);
  assert.equal(b.toString('ascii', 0, 4), 'RIFF');
  let off = 12;
  while (off + 8 <= b.length) {
    const id = b.toString('ascii', off, off + 4);
    const size = b.readUInt32LE(off + 4);
    if (id === 'data') return { rate: 16000, pcm: b.subarray(off + 8, off + 8 + size) };
    off += 8 + size;
  }
  throw new Error(`${file}: no data chunk`);
}

// 16 kHz -> 24 kHz s16le (linear interpolation; the test's own, the server resamples properly).
function to24k(pcm16k) {
  const n = pcm16k.length / 2;
  const m = Math.floor((n * 3) / 2);
  const out = Buffer.alloc(m * 2);
  for (let i = 0; i < m; ++i) {
    const x = (i * 2) / 3;
    const i0 = Math.floor(x);
    const i1 = Math.min(n - 1, i0 + 1);
    const f = x - i0;
    const v = pcm16k.readInt16LE(i0 * 2) * (1 - f) + pcm16k.readInt16LE(i1 * 2) * f;
    out.writeInt16LE(Math.round(v), i * 2);
  }
  return out;
}

test('audio.speech.create streams mp3 by default, wav on request, and refuses aac', async () => {
  const mp3 = Buffer.from(await (await client.audio.speech.create(
    { model: 'tts-1', voice: 'alloy', input: 'Hello there. How are you today?' })).arrayBuffer());
  assert.ok(mp3.length > 1000, `mp3 of ${mp3.length} bytes`);
  // An MPEG audio frame sync (or an ID3 tag) starts the stream.
  assert.ok((mp3[0] === 0xff && (mp3[1] & 0xe0) === 0xe0) || mp3.toString('ascii', 0, 3) === 'ID3');

  const wav = Buffer.from(await (await client.audio.speech.create({
    model: 'gpt-4o-mini-tts', voice: 'nova', input: 'One two three.', response_format: 'wav',
    speed: 1.5,
  })).arrayBuffer());
  assert.equal(wav.toString('ascii', 0, 4), 'RIFF');
  assert.equal(wav.toString('ascii', 8, 12), 'WAVE');
  assert.ok(wav.length > 44 + 4800, `wav of ${wav.length} bytes`);

  await assert.rejects(
    client.audio.speech.create(
      { model: 'tts-1', voice: 'alloy', input: 'x', response_format: 'aac' }),
    (e) => e.status === 400 && /aac/.test(e.message));
});

test('audio.transcriptions.create transcribes recorded speech as json, text and verbose_json',
  async () => {
    const file = () => toFile(readFileSync(kSpeech), 'speech.wav', { type: 'audio/wav' });
    const json = await client.audio.transcriptions.create(
      { model: 'whisper-1', file: await file(), language: 'en', prompt: 'ignored' });
    // pocketsphinx's general LM gets most of this sentence (WER is tested in the asr service).
    assert.match(json.text, /young man/, json.text);
    const text = await client.audio.transcriptions.create(
      { model: 'gpt-4o-mini-transcribe', file: await file(), response_format: 'text' });
    assert.match(String(text), /young man/);
    const verbose = await client.audio.transcriptions.create(
      { model: 'pocketsphinx', file: await file(), response_format: 'verbose_json' });
    assert.ok(verbose.segments.length >= 1, JSON.stringify(verbose));
    assert.ok(verbose.duration > 2.9 && verbose.duration < 3.1, JSON.stringify(verbose));
    await assert.rejects(
      client.audio.transcriptions.create({
        model: 'whisper-1',
        file: await toFile(Buffer.from('RIFF\x10\x00\x00\x00WAVEfmt '), 'cut.wav'),
      }),
      (e) => e.status === 400);
  });

// A mono s16 WAV header for `dataBytes` of samples at `rate`.
function wavHeader(rate, dataBytes) {
  const h = Buffer.alloc(44);
  h.write('RIFF', 0, 'ascii');
  h.writeUInt32LE(36 + dataBytes, 4);
  h.write('WAVEfmt ', 8, 'ascii');
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20);
  h.writeUInt16LE(1, 22);
  h.writeUInt32LE(rate, 24);
  h.writeUInt32LE(rate * 2, 28);
  h.writeUInt16LE(2, 32);
  h.writeUInt16LE(16, 34);
  h.write('data', 36, 'ascii');
  h.writeUInt32LE(dataBytes, 40);
  return h;
}

test('bad audio gets a clear error or an empty transcript, and the service goes on', async () => {
  const transcribe = async (bytes) => {
    const form = new FormData();
    form.append('model', 'whisper-1');
    form.append('file', new Blob([bytes], { type: 'audio/wav' }), 'x.wav');
    const r = await fetch(`${baseUrl}/v1/audio/transcriptions`, { method: 'POST', body: form });
    return { status: r.status, body: await r.json() };
  };
  // A truncated header, garbage, a rate no WAV has: 400 naming the file.
  for (const bytes of [wavHeader(16000, 32000).subarray(0, 30), Buffer.from('not audio at all, not RIFF'),
    Buffer.concat([wavHeader(100, 200), Buffer.alloc(200)])]) {
    const r = await transcribe(bytes);
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.error.param, 'file');
  }
  // An odd byte count (half a sample at the end) and an 8 kHz rate: decoded, resampled.
  const odd = await transcribe(Buffer.concat([wavHeader(8000, 16001), Buffer.alloc(16001)]));
  assert.equal(odd.status, 200, JSON.stringify(odd.body));
  assert.equal(odd.body.text, '');
  // Ten minutes of silence (19 MB): an empty transcript.
  const long = await transcribe(Buffer.concat([wavHeader(16000, 16000 * 2 * 600), Buffer.alloc(16000 * 2 * 600)]));
  assert.equal(long.status, 200, JSON.stringify(long.body));
  assert.equal(long.body.text, '');
  // A 100 MB upload is refused from its Content-Length, before the body is read.
  const { request } = await import('node:http');
  const refused = await new Promise((resolve, reject) => {
    const u = new URL(`${baseUrl}/v1/audio/transcriptions`);
    const req = request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST',
      headers: { 'Content-Type': 'multipart/form-data; boundary=b', 'Content-Length': 100 << 20 } });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.write('--b\r\n');
  });
  assert.equal(refused.status, 413, refused.body);
  // Still serving.
  const ok = await transcribe(readFileSync(kSpeech));
  assert.equal(ok.status, 200);
});

// A realtime session through the SDK's ws client. The SDK always dials wss://; the gateway
// speaks plain ws on loopback (TLS is the ingress's job), so the socket is a plain TCP one.
function connect() {
  const rt = new OpenAIRealtimeWS({
    model: 'gpt-realtime',
    options: { createConnection: (o) => net.connect({ host: o.host, port: o.port }) },
  }, client);
  const events = [];
  const waiters = [];
  rt.on('event', (e) => {
    events.push(e);
    for (const w of [...waiters]) {
      if (w.match(e)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(e);
      }
    }
  });
  rt.on('error', (e) => events.push({ type: 'sdk_error', message: String(e.message) }));
  const waitFor = (type, ms = 60000, pred = () => true) => {
    const seen = events.find((e) => e.type === type && pred(e));
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(
        `no ${type}; got ${events.map((e) => e.type).join(' ')}`)), ms);
      waiters.push({ match: (e) => e.type === type && pred(e),
        resolve: (e) => { clearTimeout(timer); resolve(e); } });
    });
  };
  return { rt, events, waitFor };
}

// Streams `pcm24k` in 40 ms appends at the speed it plays.
async function streamPaced(rt, pcm24k) {
  const chunk = 24000 * 2 * 0.04;
  const t0 = Date.now();
  for (let off = 0, i = 0; off < pcm24k.length; off += chunk, ++i) {
    rt.send({ type: 'input_audio_buffer.append',
      audio: pcm24k.subarray(off, off + chunk).toString('base64') });
    const due = t0 + (i + 1) * 40;
    await new Promise((r) => setTimeout(r, Math.max(0, due - Date.now())));
  }
}

const sessionUpdate = {
  type: 'session.update',
  session: {
    type: 'realtime',
    output_modalities: ['audio'],
    instructions: 'Answer briefly.',
    max_output_tokens: 24,  // the reply's audio is paced at playback speed: keep it short
    audio: {
      input: {
        format: { type: 'audio/pcm', rate: 24000 },
        transcription: { model: 'whisper-1' },
        turn_detection: { type: 'server_vad', silence_duration_ms: 300, create_response: true },
      },
      output: { format: { type: 'audio/pcm', rate: 24000 }, voice: 'alloy' },
    },
  },
};

test('realtime: a spoken turn streamed in real time gets a transcript, text and audio',
  async () => {
    const { rt, events, waitFor } = connect();
    await waitFor('session.created', 10000);
    rt.send(sessionUpdate);
    await waitFor('session.updated', 10000);
    const speech = to24k(wavSamples(kSpeech).pcm);
    await streamPaced(rt, Buffer.concat([speech, Buffer.alloc(24000 * 2)]));  // + 1 s of silence
    await waitFor('input_audio_buffer.speech_started');
    await waitFor('input_audio_buffer.speech_stopped');
    await waitFor('input_audio_buffer.committed');
    const done = await waitFor('conversation.item.input_audio_transcription.completed');
    assert.match(done.transcript, /young man/, done.transcript);
    const response = await waitFor('response.done', 120000);
    assert.equal(response.response.status, 'completed', JSON.stringify(response));
    const types = events.map((e) => e.type);
    // GA names only (the client did not ask for the beta protocol): never both.
    assert.ok(types.includes('response.output_audio.delta'), types.join(' '));
    assert.ok(types.includes('response.output_audio_transcript.delta'), types.join(' '));
    assert.ok(!types.includes('response.audio.delta'));
    assert.ok(!types.some((t) => t === 'error' || t === 'sdk_error'), JSON.stringify(events));
    const audio = Buffer.concat(events.filter((e) => e.type === 'response.output_audio.delta')
      .map((e) => Buffer.from(e.delta, 'base64')));
    assert.equal(audio.length % 2, 0);
    assert.ok(audio.length >= 24000 * 2 * 0.1, `${audio.length} bytes of reply audio`);
    let peak = 0;
    for (let i = 0; i < audio.length; i += 2) peak = Math.max(peak, Math.abs(audio.readInt16LE(i)));
    assert.ok(peak > 1000, `reply audio peak ${peak}`);  // speech, not silence
    rt.close();
  });

test('realtime: speaking during a reply (barge-in) cancels it', async () => {
  const { rt, events, waitFor } = connect();
  await waitFor('session.created', 10000);
  rt.send(sessionUpdate);
  await waitFor('session.updated', 10000);
  // A long text turn: the reply's audio plays for seconds (sent at most ~1 s ahead).
  rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user',
    content: [{ type: 'input_text', text: 'Tell me a long story about the sea.' }] } });
  rt.send({ type: 'response.create', response: { max_output_tokens: 200 } });
  await waitFor('response.output_audio.delta', 60000);
  const speech = to24k(wavSamples(kSpeech).pcm);
  await streamPaced(rt, speech.subarray(0, 24000 * 2));  // the user talks over the reply
  const started = await waitFor('input_audio_buffer.speech_started', 30000);
  const cancelled = await waitFor('response.done', 30000);
  assert.equal(cancelled.response.status, 'cancelled', JSON.stringify(cancelled));
  assert.ok(events.indexOf(started) < events.indexOf(cancelled));
  rt.close();
});

// The playground (served at /) in a real browser: headless Chromium (Debian's `chromium`) driven
// by puppeteer-core, its microphone fed from the recorded WAV; the transcript is shown and the
// reply audio is played.
test('playground: voice mode in headless Chromium transcribes the microphone and plays the reply',
  async (t) => {
    if (!existsSync('/usr/bin/chromium')) {
      t.skip('no /usr/bin/chromium (scripts/setup installs it)');
      return;
    }
    const puppeteer = require('puppeteer-core');
    const browser = await puppeteer.launch({
      executablePath: '/usr/bin/chromium',
      headless: true,
      args: ['--no-sandbox', '--use-fake-ui-for-media-stream', '--use-fake-device-for-media-stream',
        `--use-file-for-fake-audio-capture=${kSpeech}%noloop`,
        '--autoplay-policy=no-user-gesture-required'],
    });
    try {
      const page = await browser.newPage();
      const console = [];
      page.on('console', (m) => console.push(m.text()));
      await page.goto(`${baseUrl}/?raw=1&max_tokens=24`, { waitUntil: 'load' });
      assert.match(await page.title(), /playground/);
      await page.waitForFunction(() => !/…|\?/.test(document.getElementById('model').textContent));
      await page.click('#voice-toggle');
      await page.waitForFunction(() => window.moeVoice.transcripts.length >= 1,
        { timeout: 60000 });
      await page.waitForFunction(() => window.moeVoice.audioChunksPlayed >= 1,
        { timeout: 60000 });
      const voice = await page.evaluate(() => window.moeVoice);
      assert.ok(voice.capturedRms > 0.01, `captured level ${voice.capturedRms}`);
      assert.deepEqual(voice.errors, [], console.join('\n'));
      const shown = await page.$eval('#transcripts li', (li) => li.textContent);
      assert.match(shown, /young man/, shown);
      assert.ok(voice.audioChunksReceived >= voice.audioChunksPlayed);
    } finally {
      await browser.close();
    }
  });
