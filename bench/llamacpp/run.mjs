// Native llama.cpp (node-llama-cpp's prebuilt CPU binaries) on a GGUF written by
// `moe export-gguf`: the same measurements as `moe bench engine`, on token ids (no text
// tokenization), printed as one JSON line.
//
//   node run.mjs --model FILE.gguf [--threads 2] --bench
//       prefill: 512 prompt ids drawn as moe bench engine draws them (std::mt19937(1) % vocab),
//       a warm-up pass then the best of 2 timed passes; decode b1: a 32-token prompt, then 32
//       greedy steps, tok/s over the 32 steps.
//   node run.mjs --model FILE.gguf [--threads 2] --prompt-ids 1,2,3 --max-tokens N
//       greedy-decodes N tokens after the given prompt (for checking against `moe generate`).
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

function parseArgs(argv) {
  const a = {threads: 2, maxTokens: 16, bench: false};
  for (let i = 0; i < argv.length; ++i) {
    const k = argv[i];
    if (k === "--model") a.model = argv[++i];
    else if (k === "--threads") a.threads = Number(argv[++i]);
    else if (k === "--prompt-ids") a.promptIds = argv[++i].split(",").map(Number);
    else if (k === "--max-tokens") a.maxTokens = Number(argv[++i]);
    else if (k === "--bench") a.bench = true;
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.model) throw new Error("--model FILE.gguf is required");
  return a;
}

// std::mt19937 (32-bit Mersenne Twister), as the C++ benchmark draws its prompts.
function mt19937(seed) {
  const mt = new Uint32Array(624);
  mt[0] = seed >>> 0;
  for (let i = 1; i < 624; ++i) {
    const p = mt[i - 1] ^ (mt[i - 1] >>> 30);
    mt[i] = (Math.imul(1812433253, p) + i) >>> 0;
  }
  let idx = 624;
  return () => {
    if (idx >= 624) {
      for (let i = 0; i < 624; ++i) {
        const y = (mt[i] & 0x80000000) | (mt[(i + 1) % 624] & 0x7fffffff);
        mt[i] = mt[(i + 397) % 624] ^ (y >>> 1) ^ (y & 1 ? 0x9908b0df : 0);
      }
      idx = 0;
    }
    let y = mt[idx++];
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  };
}

// Evaluates `prompt` then greedy-samples `n` tokens. Returns the tokens, the seconds until the
// first sampled token (the prefill), the seconds of the remaining n - 1 steps and each step's ms.
async function greedy(seq, prompt, n) {
  await seq.clearHistory();
  const out = [];
  const stepsMs = [];
  const t0 = performance.now();
  let tFirst = 0;
  let tPrev = 0;
  for await (const tok of seq.evaluate(prompt, {temperature: 0, yieldEogToken: true})) {
    const now = performance.now();
    out.push(tok);
    if (out.length === 1) tFirst = now;
    else stepsMs.push(now - tPrev);
    tPrev = now;
    if (out.length >= n) break;
  }
  return {tokens: out, prefillS: (tFirst - t0) / 1e3, decodeS: (tPrev - tFirst) / 1e3, stepsMs};
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

const args = parseArgs(process.argv.slice(2));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const tLoad = performance.now();
const model = await llama.loadModel({modelPath: args.model, gpuLayers: 0});
const context = await model.createContext({
  contextSize: 1024,
  batchSize: 512,
  threads: args.threads,
  sequences: 1,
});
const loadS = (performance.now() - tLoad) / 1e3;
const seq = context.getSequence();
const result = {
  engine: "llama.cpp",
  llama_cpp_release: llama.llamaCppRelease.release,
  node_llama_cpp: "3.22.1",
  build_type: llama.buildType,
  threads: args.threads,
  context_threads: context.currentThreads,
  model: args.model,
  model_load_s: loadS,
};

if (args.bench) {
  const vocab = model.fileInsights.metadata?.llama?.vocab_size ?? model.tokens.vocabSize ?? 32000;
  const rng = mt19937(1);
  const draw = (n) => Array.from({length: n}, () => rng() % vocab);
  const prefillLen = 512;
  let best = Infinity;
  let firstPrompt = null;
  for (let pass = 0; pass < 3; ++pass) {
    const prompt = draw(prefillLen);
    if (pass === 0) firstPrompt = prompt;
    const r = await greedy(seq, prompt, 1);
    if (pass > 0) best = Math.min(best, r.prefillS);
  }
  result.prefill_tok_s = prefillLen / best;
  result.prefill_prompt_tokens = prefillLen;
  result.prefill_first_prompt_head = firstPrompt.slice(0, 8);
  // moe bench engine draws 3 more prefill prompts (its bf16-activation engine) before decode.
  draw(3 * prefillLen);
  const decodeSteps = 32;
  const decodePrompt = draw(32);
  const r = await greedy(seq, decodePrompt, decodeSteps + 1);
  result.decode_tok_s_b1 = decodeSteps / r.decodeS;  // as moe bench engine: steps / total time
  // Diagnostic: the median step (a step stalled by another process's CPU use counts once).
  result.decode_step_ms_median = median(r.stepsMs);
  result.decode_step_ms_max = Math.max(...r.stepsMs);
  result.decode_prompt_tokens = 32;
  result.decode_steps = decodeSteps;
  result.decode_prompt_ids = decodePrompt;
  result.decode_tokens = r.tokens;
} else {
  if (!args.promptIds) throw new Error("give --bench or --prompt-ids");
  const r = await greedy(seq, args.promptIds, args.maxTokens);
  result.prompt_ids = args.promptIds;
  result.tokens = r.tokens;
  result.prefill_s = r.prefillS;
  result.decode_s = r.decodeS;
}
console.log(JSON.stringify(result));
await context.dispose();
await model.dispose();
await llama.dispose();
