// Shared helpers of the deploy tests: paths, the two pinned Helm binaries, YAML.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

export const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, '..', '..');
export const deploy = path.join(repo, 'deploy');
export const chart = path.join(deploy, 'k8s');
export const binDir = process.env.MOE_BIN_DIR ?? path.join(repo, 'build', 'bin');

// Helm 3 (v3.17.2) and Helm 4 (v4.1.4), unpacked by scripts/setup from the pinned npm packages.
export const HELMS = {
  'helm3': { bin: path.join(here, '.tools', 'helm3', 'helm'), version: 'v3.17.2' },
  'helm4': { bin: path.join(here, '.tools', 'helm4', 'helm'), version: 'v4.1.4' },
};

const helmHome = mkdtempSync(path.join(tmpdir(), 'moe-helm-'));
process.on('exit', () => rmSync(helmHome, { recursive: true, force: true }));
export function helm(which, args) {
  const r = spawnSync(HELMS[which].bin, args, {
    encoding: 'utf8', maxBuffer: 64 << 20,
    env: { ...process.env, HELM_CACHE_HOME: `${helmHome}/cache`, HELM_CONFIG_HOME: `${helmHome}/config`,
      HELM_DATA_HOME: `${helmHome}/data` },
  });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, out: r.stdout + r.stderr };
}

export function render(which, args = []) {
  const r = helm(which, ['template', 'moe', chart, '--namespace', 'moe', ...args]);
  if (r.status !== 0) throw new Error(`${which} template ${args.join(' ')}: ${r.out}`);
  return parseAll(r.stdout);
}

export function parseAll(text) {
  return YAML.parseAllDocuments(text).map((d) => {
    if (d.errors.length) throw new Error(d.errors.join('\n'));
    return d.toJS();
  }).filter((o) => o !== null && o !== undefined);
}

export function readYaml(file) { return parseAll(readFileSync(file, 'utf8')); }

export function toolsPresent() {
  return Object.values(HELMS).every((h) => existsSync(h.bin)) &&
    existsSync(path.join(here, 'node_modules', 'kubernetes-models'));
}

// The metric names of a Prometheus expression: identifiers left once label matchers, strings,
// ranges and grouping clauses are removed, other than functions and keywords.
const PROMQL_WORDS = new Set(['sum', 'min', 'max', 'avg', 'count', 'and', 'or', 'unless', 'bool',
  'offset', 'topk', 'bottomk', 'inf', 'nan']);
export function metricNames(expr) {
  const cleaned = expr.replace(/"(?:[^"\\]|\\.)*"/g, '""').replace(/\{[^}]*\}/g, '{}')
    .replace(/\[[^\]]*\]/g, '[]')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set();
  for (const m of cleaned.matchAll(/(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const w = m[0];
    if (PROMQL_WORDS.has(w.toLowerCase()) || /^\s*\(/.test(cleaned.slice(m.index + w.length))) continue;
    names.add(w);
  }
  return names;
}

// Polls fn until it returns a truthy value (thrown errors count as not yet).
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export async function until(what, fn, timeoutMs = 60000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try { const v = await fn(); if (v) return v; } catch { /* not yet */ }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

// Starts a service binary of binDir (pushed onto procs), resolves with it once it prints its
// listening line (p.ports); its stderr is kept in p.log.
export function startService(procs, name, binary, args) {
  const p = spawn(path.join(binDir, binary), args, { stdio: ['ignore', 'pipe', 'pipe'] });
  p.name = name;
  p.log = '';
  p.stderr.on('data', (d) => { p.log += d; });
  procs.push(p);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name}: no listening line\n${p.log}`)), 60000);
    p.on('exit', (code) => reject(new Error(`${name} exited (${code}):\n${p.log}`)));
    readline.createInterface({ input: p.stdout }).on('line', (line) => {
      try {
        const j = JSON.parse(line);
        if (j.event === 'listening') { clearTimeout(timer); p.ports = j; resolve(p); }
      } catch { /* other output */ }
    });
  });
}
