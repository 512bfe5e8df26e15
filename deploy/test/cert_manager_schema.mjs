// cert-manager.io/v1 Certificate and Issuer, checked offline (no cert-manager package is pinned
// here): the fields of cert-manager's v1 API reference (CertificateSpec, IssuerSpec) the chart
// may use, each with its type, unknown fields refused as `kubectl apply --validate=strict`
// does, and cert-manager's own admission rules the chart could break (a Certificate needs an
// identity: commonName, dnsNames, uris, ipAddresses or emailAddresses; usages from its list;
// ECDSA sizes 256/384/521).
const str = 'string', bool = 'boolean', strs = 'string[]', obj = 'object', int = 'integer';
const USAGES = new Set(['signing', 'digital signature', 'content commitment', 'key encipherment', 'key agreement',
  'data encipherment', 'cert sign', 'crl sign', 'encipher only', 'decipher only', 'any', 'server auth',
  'client auth', 'code signing', 'email protection', 's/mime', 'ipsec end system', 'ipsec tunnel', 'ipsec user',
  'timestamping', 'ocsp signing', 'microsoft sgc', 'netscape sgc']);
const META = { name: str, namespace: str, labels: obj, annotations: obj };
const ISSUER_REF = { name: str, kind: str, group: str };
const CERT_SPEC = {
  secretName: str, commonName: str, dnsNames: strs, uris: strs, ipAddresses: strs, emailAddresses: strs,
  duration: str, renewBefore: str, isCA: bool, usages: strs, issuerRef: ISSUER_REF, revisionHistoryLimit: int,
  privateKey: { algorithm: str, size: int, encoding: str, rotationPolicy: str },
  subject: { organizations: strs, countries: strs, organizationalUnits: strs, localities: strs, provinces: strs,
    streetAddresses: strs, postalCodes: strs, serialNumber: str },
  secretTemplate: { labels: obj, annotations: obj },
};
const ISSUER_SPEC = {
  selfSigned: { crlDistributionPoints: strs },
  ca: { secretName: str, crlDistributionPoints: strs, ocspServers: strs },
};
const KINDS = { Certificate: CERT_SPEC, Issuer: ISSUER_SPEC, ClusterIssuer: ISSUER_SPEC };

function check(value, shape, at, errors) {
  if (typeof shape === 'object') {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return errors.push(`${at}: want an object`);
    for (const [k, v] of Object.entries(value)) {
      if (!(k in shape)) errors.push(`${at}.${k}: unknown field`);
      else check(v, shape[k], `${at}.${k}`, errors);
    }
  } else if (shape === strs) {
    if (!Array.isArray(value) || !value.every((x) => typeof x === 'string')) errors.push(`${at}: want a list of strings`);
  } else if (shape === obj) {
    if (value === null || typeof value !== 'object') errors.push(`${at}: want an object`);
  } else if (shape === int) {
    if (!Number.isInteger(value)) errors.push(`${at}: want an integer`);
  } else if (typeof value !== shape) errors.push(`${at}: want a ${shape}`);
}

export function isCertManager(o) { return o?.apiVersion?.startsWith('cert-manager.io/'); }

export function validateCertManager(o) {
  const errors = [];
  const spec = KINDS[o.kind];
  if (o.apiVersion !== 'cert-manager.io/v1' || !spec) return [`${o.apiVersion}/${o.kind}: not a cert-manager.io/v1 kind`];
  check(o, { apiVersion: str, kind: str, metadata: META, spec }, '', errors);
  if (!o.metadata?.name) errors.push('.metadata.name: required');
  const s = o.spec ?? {};
  if (o.kind === 'Certificate') {
    if (!s.secretName) errors.push('.spec.secretName: required');
    if (!s.issuerRef?.name) errors.push('.spec.issuerRef.name: required');
    if (![s.commonName, ...(s.dnsNames ?? []), ...(s.uris ?? []), ...(s.ipAddresses ?? []), ...(s.emailAddresses ?? [])].some(Boolean)) {
      errors.push('.spec: at least one of commonName, dnsNames, uris, ipAddresses, emailAddresses');
    }
    for (const u of s.usages ?? []) if (!USAGES.has(u)) errors.push(`.spec.usages: ${u} is not a key usage`);
    const pk = s.privateKey ?? {};
    if (pk.algorithm && !['RSA', 'ECDSA', 'Ed25519'].includes(pk.algorithm)) errors.push(`.spec.privateKey.algorithm: ${pk.algorithm}`);
    if (pk.algorithm === 'ECDSA' && pk.size && ![256, 384, 521].includes(pk.size)) errors.push(`.spec.privateKey.size: ${pk.size}`);
    if (pk.rotationPolicy && !['Never', 'Always'].includes(pk.rotationPolicy)) errors.push(`.spec.privateKey.rotationPolicy`);
    for (const d of ['duration', 'renewBefore']) if (s[d] && !/^([0-9]+(\.[0-9]+)?(h|m|s))+$/.test(s[d])) errors.push(`.spec.${d}: ${s[d]}`);
    if (s.issuerRef?.kind && !['Issuer', 'ClusterIssuer'].includes(s.issuerRef.kind) && s.issuerRef.group === 'cert-manager.io') {
      errors.push(`.spec.issuerRef.kind: ${s.issuerRef.kind}`);
    }
  } else if (Object.keys(s).length !== 1) {
    errors.push('.spec: exactly one issuer type (selfSigned, ca)');
  }
  return errors;
}
