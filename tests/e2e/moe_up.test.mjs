// End-to-end: `moe up` starts the local cluster (router, asr, tts and gateway processes), prints the URL and
// a ready line, serves requests, and stops every process cleanly on Ctrl-C (SIGINT).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { waitForUpReady } from './services.mjs';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const binDir = process.env.MOE_BIN_DIR ?? path.join(here, '..', '..', 'build', 'bin');

test('moe up serves the OpenAI API and stops cleanly on SIGINT', async () => {
  const work = mkdtempSync(path.join(tmpdir(), 'moe-up-'));
  try {
    const model = path.join(work, 'tiny');
    execFileSync(path.join(binDir, 'moe'), ['make-model', '--preset', 'tiny', '--out', model],
      { stdio: ['ignore', 'ignore', 'inherit'] });
    const up = spawn(path.join(binDir, 'moe'), ['up', '--model', model, '--port', '0'],
      { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise((resolve) => up.on('exit', (code, signal) => resolve({ code, signal })));
    const lines = [];
    const ready = await waitForUpReady(up, lines);
    assert.ok(lines.some((l) => l.includes('curl ')), lines.join('\n'));
    assert.equal(ready.model, 'tiny');
    const models = await (await fetch(`${ready.url}/v1/models`)).json();
    assert.equal(models.data[0].id, 'tiny');
    const r = await fetch(`${ready.url}/v1/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', prompt: 'Hi', max_tokens: 3, temperature: 0 }),
    });
    assert.equal(r.status, 200);
    up.kill('SIGINT');
    const { code } = await exited;
    assert.equal(code, 0);
    // Everything it started is gone: the URL no longer answers.
    await assert.rejects(fetch(`${ready.url}/healthz`));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});
