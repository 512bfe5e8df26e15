#!/usr/bin/env bash
# Side by side on the same weights, same machine, same session, alternating runs:
#   moe bench engine --model DIR --threads T     (f32 and opt-in bf16-activation prefill, decode b1)
#   node run.mjs --model DIR.gguf --threads T --bench   (llama.cpp, node-llama-cpp prebuilt CPU)
# Prints one summary line per run (tab-separated); the raw JSON lines and the load average before
# each run are appended to RAW_LOG (default: compare-raw.log in the current directory).
#
#   bench/llamacpp/compare.sh MOE_BIN MODEL_DIR MODEL.gguf [RUNS=3] [THREADS=2]
set -euo pipefail
moe=$1 dir=$2 gguf=$3 runs=${4:-3} threads=${5:-2}
here=$(cd "$(dirname "$0")" && pwd)
raw=${RAW_LOG:-compare-raw.log}
for i in $(seq 1 "$runs"); do
  echo "# run $i load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$raw" >&2
  "$moe" bench engine --model "$dir" --threads "$threads" 2>/dev/null | tee -a "$raw" |
    python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
m = {x["name"]: x["value"] for x in r["results"]}
print("moe\tprefill %.1f\tprefill_bf16_act %.1f\tdecode_b1 %.2f" % (
    m["prefill_tok_s"], m.get("prefill_tok_s_bf16_act", float("nan")), m["decode_tok_s_b1"]))'
  echo "# run $i load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$raw" >&2
  node "$here/run.mjs" --model "$gguf" --threads "$threads" --bench | tee -a "$raw" |
    python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
print("llama.cpp\tprefill %.1f\t\tdecode_b1 %.2f" % (r["prefill_tok_s"], r["decode_tok_s_b1"]))'
done
