// Starting the cluster's binaries for the e2e tests: one copy for every test file.
import { spawn } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';

// Sanitizer builds (MOE_SANITIZED, set by CMake) start and answer several times slower.
const kScale = process.env.MOE_SANITIZED ? 3 : 1;

// Starts `binDir/name args`, records the child in `procs` (the caller kills them in after()),
// and resolves with its {"event":"listening",...} line; rejects if it exits or stays silent 60 s (x3 in a sanitizer build).
export function startService(binDir, procs, name, args) {
  const child = spawn(path.join(binDir, name), args, { stdio: ['ignore', 'pipe', 'inherit'] });
  procs.push(child);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name}: no listening line`)), 60000 * kScale);
    child.on('exit', (code) => reject(new Error(`${name} exited with ${code}`)));
    readline.createInterface({ input: child.stdout }).on('line', (line) => {
      try {
        const j = JSON.parse(line);
        if (j.event === 'listening') {
          clearTimeout(timer);
          resolve(j);
        }
      } catch { /* not JSON */ }
    });
  });
}

// Polls `url` until it answers 200 (60 s at most, x3 in a sanitizer build).
export async function waitReady(url) {
  const deadline = Date.now() + 60000 * kScale;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(url)).status === 200) return;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} never became ready`);
}

// Resolves with `moe up`'s {"event":"ready",...} line from `up` (a spawned `moe up` whose stdout
// is a pipe); every stdout line is pushed to `lines` (the caller may share it with stderr's).
// Rejects if moe up exits first (with what it printed) or stays silent 120 s (x3 in a sanitizer build).
export function waitForUpReady(up, lines = []) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('moe up: no ready line')), 120000 * kScale);
    up.on('exit', () => reject(new Error(`moe up exited early:\n${lines.join('\n')}`)));
    readline.createInterface({ input: up.stdout }).on('line', (line) => {
      lines.push(line);
      try {
        const j = JSON.parse(line);
        if (j.event === 'ready') {
          clearTimeout(timer);
          resolve(j);
        }
      } catch { /* the human-readable lines */ }
    });
  });
}
