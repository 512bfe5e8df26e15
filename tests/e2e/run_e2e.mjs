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
// The test files to run: the arguments, or the default set.
const files = process.argv.length > 2 ? process.argv.slice(2)
  : ['openai_sdk.test.mjs', 'moe_up.test.mjs', 'voice.test.mjs'];
const r = spawnSync(process.execPath, ['--test', ...files.map((f) => path.join(here, f))],
  { stdio: 'inherit' });
process.exit(r.status ?? 1);
