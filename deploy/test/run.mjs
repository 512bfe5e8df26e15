// ctest entry: runs one deploy test file with node's test runner, or exits 77 (skipped) when the
// pinned tools are not installed (deploy/test/node_modules and .tools/; `scripts/setup`).
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const needed = ['node_modules/kubernetes-models', 'node_modules/@bufbuild/cel', '.tools/helm3/helm', '.tools/helm4/helm'];
const missing = needed.filter((p) => !existsSync(path.join(here, p)));
if (missing.length) {
  console.log(`SKIP: deploy/test/${missing.join(', ')} missing (run scripts/setup)`);
  process.exit(77);
}
const r = spawnSync(process.execPath, ['--test', path.join(here, process.argv[2])], { stdio: 'inherit' });
process.exit(r.status ?? 1);
