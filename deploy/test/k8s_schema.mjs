// Offline validation of Kubernetes objects against the pinned kubernetes-models schemas
// (deploy/test/package.json): the package's JSON-schema validators (types, required fields,
// enums, formats) plus a strict check that rejects unknown fields, as `kubectl apply
// --validate=strict` does (the validators accept any extra property). The field lists come from
// the package's TypeScript declarations, which mirror the same OpenAPI document.
//
// kubernetes-models 4.5.1 carries Kubernetes 1.33's core API (e.g. Lifecycle.stopSignal; its
// README badge still says 1.27.1); @kubernetes-models/prometheus-operator 4.4.4 the
// monitoring.coreos.com/v1 kinds.
import { readFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, 'package.json'));
const modules = path.join(here, 'node_modules');

export const KUBERNETES_SCHEMA_VERSION = 'kubernetes-models 4.5.1 (Kubernetes 1.33 API)';

// apiVersion -> [package folder, group folder]
function modelFolder(apiVersion) {
  if (apiVersion.startsWith('monitoring.coreos.com/')) {
    return path.join(modules, '@kubernetes-models/prometheus-operator', apiVersion);
  }
  return path.join(modules, 'kubernetes-models', apiVersion);  // "v1", "apps/v1", ...
}

export function modelClass(apiVersion, kind) {
  const folder = modelFolder(apiVersion);
  const js = path.join(folder, `${kind}.js`);
  if (!existsSync(js)) return null;
  return require(js)[kind];
}

// ---- a small parser for the declaration files' types ----

// One declaration file: its imports (name -> file) and its interfaces (name -> type text).
const declCache = new Map();
function loadDecl(file) {
  if (declCache.has(file)) return declCache.get(file);
  const text = readFileSync(file, 'utf8').replace(/\/\*\*[\s\S]*?\*\//g, '');
  const imports = new Map();
  for (const m of text.matchAll(/import \{ ([^}]+) \} from "([^"]+)";/g)) {
    let target = m[2];
    target = target.startsWith('.') ? path.resolve(path.dirname(file), target)
                                    : path.join(modules, target);
    for (const name of m[1].split(',').map((s) => s.trim())) {
      const [orig, alias] = name.split(/\s+as\s+/);
      imports.set(alias ?? orig, target + '.d.ts');
    }
  }
  const interfaces = new Map();
  for (const m of text.matchAll(/export interface (\w+)(?: extends [\w, ]+)? \{/g)) {
    const start = m.index + m[0].length - 1;
    interfaces.set(m[1], text.slice(start, matchBrace(text, start) + 1));
  }
  // `export { IFoo as IIoK8sApi...Foo, ... }`: aliases of the file's own interfaces
  for (const m of text.matchAll(/export \{ ([^}]+) \};/g)) {
    for (const part of m[1].split(',')) {
      const [orig, alias] = part.trim().split(/\s+as\s+/);
      if (alias && interfaces.has(orig)) interfaces.set(alias, interfaces.get(orig));
    }
  }
  const decl = { file, imports, interfaces };
  declCache.set(file, decl);
  return decl;
}

function matchBrace(text, open) {
  const pairs = { '{': '}', '<': '>', '(': ')', '[': ']' };
  const stack = [];
  for (let i = open; i < text.length; ++i) {
    const c = text[i];
    if (c === '"') { i = text.indexOf('"', i + 1); continue; }
    if (pairs[c]) stack.push(pairs[c]);
    else if (c === stack[stack.length - 1]) {
      stack.pop();
      if (!stack.length) return i;
    }
  }
  throw new Error('unbalanced type text');
}

// A type: {kind: 'object', props: Map(name -> type)}, {kind: 'array', of}, {kind: 'map', of},
// {kind: 'leaf'}; `ref` types are resolved lazily through the declaration they appear in.
function parseType(text, decl) {
  text = text.trim().replace(/;$/, '').trim();
  if (text.startsWith('Array<') && matchBrace(text, 5) === text.length - 1) {
    return { kind: 'array', of: parseType(text.slice(6, -1), decl) };
  }
  if (text.startsWith('{') && matchBrace(text, 0) === text.length - 1) {
    const body = text.slice(1, -1).trim();
    // An empty interface is an opaque value (JSON, JSONSchemaPropsOrArray, RawExtension).
    if (!body) return { kind: 'leaf', text };
    const map = body.match(/^\[key: string\]: ([\s\S]*)$/);
    if (map) return { kind: 'map', of: parseType(map[1], decl) };
    return { kind: 'object', props: parseProps(body, decl) };
  }
  if (/^\w+$/.test(text) && (decl.imports.has(text) || decl.interfaces.has(text))) {
    return { kind: 'ref', name: text, decl };
  }
  return { kind: 'leaf', text };
}

function parseProps(body, decl) {
  const props = new Map();
  let i = 0;
  while (i < body.length) {
    const m = /\s*"([^"]+)"\??: /y;
    m.lastIndex = i;
    const hit = m.exec(body);
    if (!hit) break;
    let j = m.lastIndex;
    let depth = 0;
    for (; j < body.length; ++j) {
      const c = body[j];
      if (c === '"') { j = body.indexOf('"', j + 1); continue; }
      if ('{<(['.includes(c)) depth++;
      else if ('}>)]'.includes(c)) depth--;
      else if (c === ';' && depth === 0) break;
    }
    props.set(hit[1], parseType(body.slice(m.lastIndex, j), decl));
    i = j + 1;
  }
  return props;
}

function resolve(type) {
  while (type.kind === 'ref') {
    const { decl, name } = type;
    if (decl.interfaces.has(name)) {
      type = parseType(decl.interfaces.get(name), decl);
    } else {
      const other = loadDecl(decl.imports.get(name));
      const text = other.interfaces.get(name);
      if (!text) return { kind: 'leaf', text: name };  // e.g. a union alias: not checked
      type = parseType(text, other);
    }
  }
  return type;
}

// Unknown fields of `value` (paths), walking the declared type.
function unknownFields(value, type, at, out) {
  type = resolve(type);
  if (value === null || typeof value !== 'object') return;
  if (type.kind === 'array' && Array.isArray(value)) {
    value.forEach((v, i) => unknownFields(v, type.of, `${at}[${i}]`, out));
  } else if (type.kind === 'map' && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) unknownFields(v, type.of, `${at}.${k}`, out);
  } else if (type.kind === 'object' && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) {
      if (!type.props.has(k)) out.push(`${at}.${k}: unknown field`);
      else unknownFields(v, type.props.get(k), `${at}.${k}`, out);
    }
  }
}

// Errors of one Kubernetes object (empty = valid). Kinds the package does not know are an error.
export function validateObject(obj) {
  const { apiVersion, kind } = obj ?? {};
  const Model = apiVersion && kind ? modelClass(apiVersion, kind) : null;
  if (!Model) return [`${apiVersion}/${kind}: no schema for this kind`];
  const errors = [];
  try {
    new Model(obj).validate();
  } catch (e) {
    for (const d of e.errors ?? e.details ?? [{ message: e.message }]) {
      errors.push(`${d.instancePath ?? ''} ${d.message}${d.params ? ' ' + JSON.stringify(d.params) : ''}`);
    }
  }
  const decl = loadDecl(path.join(modelFolder(apiVersion), `${kind}.d.ts`));
  const iface = [...decl.interfaces.keys()].find((n) => n === `I${kind}`);
  unknownFields(obj, { kind: 'ref', name: iface, decl }, '', errors);
  return errors;
}
