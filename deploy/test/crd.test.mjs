// The CRDs (deploy/crds): valid apiextensions.k8s.io/v1 objects with structural schemas; every
// example CR accepted (after defaulting, schema and CEL rules); every case in crd-cases/
// refused with the expected message. Run: node --test deploy/test/crd.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { deploy, here, readYaml } from './common.mjs';
import { validateObject, KUBERNETES_SCHEMA_VERSION } from './k8s_schema.mjs';
import { checkCrd, validateCustomResource } from './crd_schema.mjs';

const crdDir = path.join(deploy, 'crds');
const crds = readdirSync(crdDir).filter((f) => f.endsWith('.yaml')).flatMap((f) => readYaml(path.join(crdDir, f)));
const crdOf = (cr) => {
  const [group] = cr.apiVersion.split('/');
  const crd = crds.find((c) => c.spec.group === group && c.spec.names.kind === cr.kind);
  assert.ok(crd, `no CRD for ${cr.apiVersion} ${cr.kind}`);
  return crd;
};

test('three CRDs, each a valid CustomResourceDefinition with a structural schema', () => {
  assert.deepEqual(crds.map((c) => c.spec.names.kind).sort(), ['ExpertPool', 'MoECluster', 'RouterCalibration']);
  for (const crd of crds) {
    assert.deepEqual(validateObject(crd), [], `${crd.metadata.name} against ${KUBERNETES_SCHEMA_VERSION}`);
    assert.deepEqual(checkCrd(crd), [], crd.metadata.name);
    assert.equal(crd.metadata.name, `${crd.spec.names.plural}.${crd.spec.group}`);
  }
});

test('only ExpertPool has a scale subresource (one replicas path)', () => {
  for (const crd of crds) {
    const scale = crd.spec.versions[0].subresources.scale;
    assert.equal(!!scale, crd.spec.names.kind === 'ExpertPool', crd.metadata.name);
  }
});

const examples = readdirSync(path.join(crdDir, 'examples')).filter((f) => f.endsWith('.yaml'));
let counted = 0;
for (const f of examples) {
  test(`example ${f} is accepted`, () => {
    for (const cr of readYaml(path.join(crdDir, 'examples', f))) {
      assert.deepEqual(validateCustomResource(crdOf(cr), cr), [], `${f}: ${cr.kind} ${cr.metadata.name}`);
      counted++;
    }
  });
}

test('defaults are applied as the API server would', () => {
  const [cr] = readYaml(path.join(crdDir, 'examples', 'laptop-cpu.yaml'));
  assert.deepEqual(validateCustomResource(crdOf(cr), cr), []);
  assert.equal(cr.spec.numerics.activations, 'f32');
  assert.equal(cr.spec.placement.utilisationThreshold, 0.85);
  assert.equal(cr.spec.recalibration.mode, 'OnDemand');
  assert.equal(cr.spec.expertPools[0].gpusPerReplica, 0);
  assert.equal(cr.spec.kvStore.enabled, false);
});

for (const cr of readYaml(path.join(here, 'crd-cases', 'invalid.yaml'))) {
  const expect = cr.metadata.annotations['test.moe-cluster.io/expect'];
  test(`${cr.kind} ${cr.metadata.name} is refused: ${expect}`, () => {
    const errors = validateCustomResource(crdOf(cr), cr);
    assert.ok(errors.some((e) => e.includes(expect)), `expected "${expect}", got ${JSON.stringify(errors)}`);
  });
}

for (const u of readYaml(path.join(here, 'crd-cases', 'updates.yaml'))) {
  test(`update of ${u.from.kind} refused: ${u.expect}`, () => {
    const crd = crdOf(u.from);
    assert.deepEqual(validateCustomResource(crd, u.from), []);
    assert.deepEqual(validateCustomResource(crd, structuredClone(u.from), structuredClone(u.from)), [],
      'an update that changes nothing passes the transition rules');
    const errors = validateCustomResource(crd, u.to, u.from);
    assert.ok(errors.some((e) => e.includes(u.expect)), JSON.stringify(errors));
  });
}

test('summary', () => { console.log(`${counted} example CRs accepted; ${crds.length} CRDs checked`); });
