// ctest entry: runs the OpenAI SDK end-to-end test, or exits 77 (skipped) when the pinned npm
// packages are not installed (tests/js/node_modules; `scripts/setup` installs them).
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
if (!existsSync(path.join(here, '..', 'js', 'node_modules', 'openai'))) {
  console.log('SKIP: tests/js/node_modules/openai is missing (run scripts/setup)');
  process.exit(77);
}
const r = spawnSync(process.execPath,
  ['--test', path.join(here, 'openai_sdk.test.mjs'), path.join(here, 'moe_up.test.mjs'),
    path.join(here, 'voice.test.mjs')],
  { stdio: 'inherit' });
process.exit(r.status ?? 1);
