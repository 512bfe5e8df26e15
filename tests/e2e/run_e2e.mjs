// ctest entry: runs the OpenAI SDK end-to-end test. Without the pinned npm packages
// (tests/js/node_modules; `scripts/setup` installs them) it FAILS, unless MOE_ALLOW_MISSING_ORACLES=1,
// which makes it a loud skip (exit 77).
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
if (!existsSync(path.join(here, '..', 'js', 'node_modules', 'openai'))) {
  if (process.env.MOE_ALLOW_MISSING_ORACLES === '1') {
    console.log('WARNING: SKIPPED because MOE_ALLOW_MISSING_ORACLES=1: ' +
                'tests/js/node_modules/openai is missing (run scripts/setup)');
    process.exit(77);
  }
  console.log('FAIL: tests/js/node_modules/openai is missing (run scripts/setup, or set ' +
              'MOE_ALLOW_MISSING_ORACLES=1 to skip)');
  process.exit(1);
}
// The test files to run: the arguments, or the default set.
const files = process.argv.length > 2 ? process.argv.slice(2)
  : ['openai_sdk.test.mjs', 'moe_up.test.mjs', 'voice.test.mjs'];
const r = spawnSync(process.execPath, ['--test', ...files.map((f) => path.join(here, f))],
  { stdio: 'inherit' });
process.exit(r.status ?? 1);
