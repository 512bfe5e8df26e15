// Offline checks of the project's CRDs (deploy/crds) and of custom resources against them, the
// way an API server would treat a create (or an update, with `old`):
//   1. defaulting (the schema's `default`s, applied top-down as the API server does),
//   2. the OpenAPI v3 schema (types, ranges, enums, patterns, required fields) with unknown
//      fields rejected (kubectl's strict field validation),
//   3. x-kubernetes-list-type: map keys unique,
//   4. every x-kubernetes-validations CEL rule, evaluated with @bufbuild/cel on the defaulted
//      object (transition rules, which use oldSelf, only on an update).
// Kubernetes-only CEL functions (quantity(), url(), ...) are not available here; the CRDs use
// only standard CEL (has, size, all, filter, matches, duration), so every rule is evaluated.
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { run, parse } from '@bufbuild/cel';

const ajv = new Ajv({ allErrors: true, useDefaults: true, strict: false });
addFormats(ajv);
ajv.addFormat('int32', { type: 'number', validate: (n) => Number.isInteger(n) && Math.abs(n) < 2 ** 31 });
ajv.addFormat('int64', { type: 'number', validate: (n) => Number.isInteger(n) });

// The CRD's OpenAPI schema as a JSON schema ajv understands: int-or-string as anyOf, objects
// with `properties` closed (no additionalProperties, no x-kubernetes-preserve-unknown-fields).
function toJsonSchema(s) {
  if (Array.isArray(s)) return s.map(toJsonSchema);
  if (!s || typeof s !== 'object') return s;
  const out = {};
  for (const [k, v] of Object.entries(s)) {
    if (k.startsWith('x-kubernetes-')) continue;
    out[k] = ['properties', 'patternProperties'].includes(k)
      ? Object.fromEntries(Object.entries(v).map(([p, ps]) => [p, toJsonSchema(ps)]))
      : toJsonSchema(v);
  }
  if (s['x-kubernetes-int-or-string'] && !s.anyOf) {
    out.anyOf = [{ type: 'integer' }, { type: 'string' }];
  }
  if (s.type === 'object' && s.properties && !('additionalProperties' in s) &&
      !s['x-kubernetes-preserve-unknown-fields']) {
    out.additionalProperties = false;
  }
  return out;
}

// Walks schema and data together, calling fn(schemaNode, value, path, parent, key) on every
// value present.
function walk(schema, value, at, fn) {
  if (!schema || value === undefined) return;
  fn(schema, value, at);
  if (Array.isArray(value) && schema.items) {
    value.forEach((v, i) => walk(schema.items, v, `${at}[${i}]`, fn));
  } else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      const child = schema.properties?.[k] ??
        (typeof schema.additionalProperties === 'object' ? schema.additionalProperties : null);
      walk(child, v, `${at}.${k}`, fn);
    }
  }
}

// JSON value -> CEL input: objects as Maps, integers (by schema) as int (bigint).
function toCel(schema, value) {
  if (Array.isArray(value)) return value.map((v) => toCel(schema?.items, v));
  if (value && typeof value === 'object') {
    return new Map(Object.entries(value).map(([k, v]) => {
      const child = schema?.properties?.[k] ??
        (typeof schema?.additionalProperties === 'object' ? schema.additionalProperties : undefined);
      return [k, toCel(child, v)];
    }));
  }
  if (typeof value === 'number' && (schema?.type === 'integer' ||
      (schema?.['x-kubernetes-int-or-string'] && Number.isInteger(value)))) {
    return BigInt(value);
  }
  return value;
}

function lookup(obj, pathParts) {
  let v = obj;
  for (const p of pathParts) v = v?.[p];
  return v;
}

function versionSchema(crd, apiVersion) {
  const version = apiVersion.split('/')[1];
  const v = crd.spec.versions.find((x) => x.name === version);
  if (!v) throw new Error(`${crd.metadata.name}: no version ${version}`);
  return v.schema.openAPIV3Schema;
}

const compiled = new WeakMap();

// Errors (strings; empty = accepted) of creating `cr` (or updating `old` to it). `cr` is
// defaulted in place.
export function validateCustomResource(crd, cr, old = undefined) {
  const schema = versionSchema(crd, cr.apiVersion);
  if (cr.kind !== crd.spec.names.kind) return [`kind ${cr.kind} is not ${crd.spec.names.kind}`];
  let validate = compiled.get(schema);
  if (!validate) {
    validate = ajv.compile(toJsonSchema(schema));
    compiled.set(schema, validate);
  }
  const errors = [];
  if (!validate(cr)) {
    for (const e of validate.errors) {
      errors.push(`${e.instancePath || '/'} ${e.message}${e.params?.additionalProperty ? `: ${e.params.additionalProperty}` : ''}`);
    }
    return errors;
  }
  walk(schema, cr, '', (s, value, at) => {
    if (s['x-kubernetes-list-type'] === 'map' && Array.isArray(value)) {
      const keys = s['x-kubernetes-list-map-keys'];
      const seen = new Set();
      for (const item of value) {
        const key = JSON.stringify(keys.map((k) => item[k]));
        if (seen.has(key)) errors.push(`${at}: duplicate entry with key ${key}`);
        seen.add(key);
      }
    }
    for (const rule of s['x-kubernetes-validations'] ?? []) {
      const transition = /\boldSelf\b/.test(rule.rule);
      const oldValue = old === undefined ? undefined
        : lookup(old, at.split(/[.[\]]+/).filter(Boolean));
      if (transition && oldValue === undefined) continue;  // a create: transition rules do not apply
      const vars = { self: toCel(s, value) };
      if (transition) vars.oldSelf = toCel(s, oldValue);
      let ok;
      try {
        ok = run(rule.rule, vars);
      } catch (e) {
        errors.push(`${at || '/'}: rule ${JSON.stringify(rule.rule)} failed to evaluate: ${e.message}`);
        continue;
      }
      if (ok !== true) errors.push(`${at || '/'}: ${rule.message ?? rule.rule}`);
    }
  });
  return errors;
}

// Problems of the CRD itself that an API server would refuse (or that make it useless):
// structural schema (every node typed), defaults valid against their own schema, list-map keys
// required or defaulted, CEL rules that parse, printer columns and scale paths that exist.
export function checkCrd(crd) {
  const problems = [];
  for (const v of crd.spec.versions) {
    const root = v.schema.openAPIV3Schema;
    const visit = (s, at) => {
      if (!s || typeof s !== 'object') return;
      const typed = s.type || s['x-kubernetes-int-or-string'] || s['x-kubernetes-preserve-unknown-fields'];
      if (!typed) problems.push(`${v.name}${at}: no type (not a structural schema)`);
      if ('default' in s) {
        const check = new Ajv({ strict: false, useDefaults: true });
        addFormats(check);
        check.addFormat('int32', () => true).addFormat('int64', () => true);
        const copy = structuredClone(s.default);
        if (!check.validate(toJsonSchema(s), copy)) {
          problems.push(`${v.name}${at}: default ${JSON.stringify(s.default)} is invalid: ${check.errorsText()}`);
        }
      }
      for (const rule of s['x-kubernetes-validations'] ?? []) {
        try { parse(rule.rule); } catch (e) { problems.push(`${v.name}${at}: rule does not parse: ${e.message}`); }
        if (!rule.message) problems.push(`${v.name}${at}: rule without a message`);
      }
      if (s['x-kubernetes-list-type'] === 'map') {
        for (const k of s['x-kubernetes-list-map-keys'] ?? []) {
          const required = s.items?.required?.includes(k) || 'default' in (s.items?.properties?.[k] ?? {});
          if (!required) problems.push(`${v.name}${at}: list-map key ${k} is neither required nor defaulted`);
        }
      }
      for (const [k, child] of Object.entries(s.properties ?? {})) visit(child, `${at}.${k}`);
      if (s.items) visit(s.items, `${at}[]`);
      if (typeof s.additionalProperties === 'object') visit(s.additionalProperties, `${at}.*`);
      for (const alt of s.anyOf ?? []) if (alt.properties || alt.items) visit(alt, at);
    };
    visit(root, '');
    const exists = (p) => {
      if (p.startsWith('.metadata.')) return true;  // ObjectMeta
      let s = root;
      for (const part of p.replace(/\[[^\]]*\]/g, '[]').replace(/^\./, '').split('.')) {
        const name = part.replace(/\[.*$/, '');
        s = s?.properties?.[name];
        if (part.includes('[')) s = s?.items;
      }
      return !!s;
    };
    for (const c of v.additionalPrinterColumns ?? []) {
      if (!exists(c.jsonPath)) problems.push(`${v.name}: printer column ${c.name}: ${c.jsonPath} is not in the schema`);
    }
    const scale = v.subresources?.scale;
    if (scale) {
      for (const k of ['specReplicasPath', 'statusReplicasPath', 'labelSelectorPath']) {
        if (scale[k] && !exists(scale[k])) problems.push(`${v.name}: scale ${k} ${scale[k]} is not in the schema`);
      }
    }
    if (!v.subresources?.status) problems.push(`${v.name}: no status subresource`);
    const status = root.properties?.status?.properties ?? {};
    if (!status.observedGeneration) problems.push(`${v.name}: status has no observedGeneration`);
    if (status.conditions?.['x-kubernetes-list-type'] !== 'map') problems.push(`${v.name}: status.conditions is not a list-map by type`);
  }
  return problems;
}
