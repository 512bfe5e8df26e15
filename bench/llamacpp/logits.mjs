// llama.cpp's next-token logits at every position of a token-id sequence, for the logits oracle
// (tests/llamacpp): node-llama-cpp's prebuilt CPU binding, no text tokenization.
//
//   node logits.mjs --model FILE.gguf --prompt-ids 1,2,3 --out FILE.f32 [--threads 2]
//
// Writes raw little-endian f32 [positions, vocab] (the layout of `moe generate --logits-out`)
// and prints one JSON line {"positions":T,"vocab":V,"top":[argmax per position],...}.
// Numerics: f32 KV cache (llama.cpp's default is F16) and no flash attention, so that with F32
// weights llama.cpp computes in f32 throughout, like the engine; the logits are the raw ones
// (greedy sampler: no temperature, penalties or top-k applied).
import {writeFileSync} from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

function parseArgs(argv) {
  const a = {threads: 2};
  for (let i = 0; i < argv.length; ++i) {
    const k = argv[i];
    if (k === "--model") a.model = argv[++i];
    else if (k === "--prompt-ids") a.promptIds = argv[++i].split(",").map(Number);
    else if (k === "--out") a.out = argv[++i];
    else if (k === "--threads") a.threads = Number(argv[++i]);
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.model || !a.promptIds || !a.out) {
    throw new Error("usage: node logits.mjs --model FILE.gguf --prompt-ids 1,2,3 --out FILE.f32");
  }
  return a;
}

const args = parseArgs(process.argv.slice(2));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: args.model, gpuLayers: 0});
const context = await model.createContext({
  contextSize: 256,
  batchSize: 256,
  threads: args.threads,
  sequences: 1,
  flashAttention: false,
  experimentalKvCacheKeyType: "F32",
  experimentalKvCacheValueType: "F32",
});
const arch = model.fileInfo.metadata.general.architecture;
const vocab = Number(model.fileInfo.metadata[arch].vocab_size);
const seq = context.getSequence();
const input = args.promptIds.map((t) => [t, {generateNext: {logits: true, options: {temperature: 0}}}]);
const out = await seq.controlledEvaluate(input);
const T = args.promptIds.length;
const logits = new Float32Array(T * vocab);
const top = [];
for (let p = 0; p < T; ++p) {
  const m = out[p]?.next?.logits;
  if (!m) throw new Error(`no logits at position ${p}`);
  if (m.size !== vocab) throw new Error(`position ${p}: ${m.size} logits, vocab ${vocab}`);
  for (const [tok, v] of m) logits[p * vocab + tok] = v;
  top.push(m.keys().next().value);
}
writeFileSync(args.out, Buffer.from(logits.buffer));
console.log(JSON.stringify({
  engine: "llama.cpp",
  llama_cpp_release: llama.llamaCppRelease.release,
  architecture: arch,
  positions: T,
  vocab,
  top,
}));
await context.dispose();
await model.dispose();
await llama.dispose();
