#!/usr/bin/env bash
# Side by side with NATIVE llama.cpp (build-native.sh: its own llama-bench / llama-batched-bench /
# llama-quantize, GGML_NATIVE, OpenMP off), on the same weights, same machine, alternating runs:
#   moe bench engine --model DIR --threads T            (checkpoint weights and q8_0, one JSON line)
#   llama-bench -m MODEL.gguf -t T -p 512 -n 128 -r 3  (pp512, tg128; bf16 weights)
#   llama-bench on MODEL-q8_0.gguf (llama-quantize Q8_0 of the same GGUF, made once)
#   llama-batched-bench -m MODEL.gguf -t T -c 8192 -b 512 -npp 16 -ntg 64 -npl 32 (S_TG)
# Prints, per run, each side's figures and the ratios the engine-speed goals name, then the
# median ratio over runs. Raw JSON and the load average before each step go to RAW_LOG (default
# compare-native-raw.log in the current directory).
#
#   bench/llamacpp/compare-native.sh MOE_BIN MODEL_DIR MODEL.gguf [RUNS=3] [THREADS=2]
set -euo pipefail
moe=$1 dir=$2 gguf=$3 runs=${4:-3} threads=${5:-2}
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/.native/bin"
raw=${RAW_LOG:-compare-native-raw.log}
for t in llama-bench llama-batched-bench llama-quantize; do
  [[ -x "$bin/$t" ]] || { echo "compare-native.sh: $bin/$t missing; run build-native.sh" >&2; exit 1; }
done
q8=${gguf%.gguf}-q8_0.gguf
if [[ ! -f "$q8" || "$gguf" -nt "$q8" ]]; then
  "$bin/llama-quantize" "$gguf" "$q8" Q8_0 "$threads" >>"$raw" 2>&1
fi
load() { echo "# $1 load: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$raw"; }
results=$(mktemp)
for i in $(seq 1 "$runs"); do
  load "run $i moe"
  "$moe" bench engine --model "$dir" --threads "$threads" 2>/dev/null | tee -a "$raw" |
    sed 's/^/moe /' >>"$results"
  load "run $i llama-bench bf16"
  "$bin/llama-bench" -m "$gguf" -t "$threads" -p 512 -n 128 -r 3 -o jsonl 2>/dev/null |
    tee -a "$raw" | sed 's/^/llb_bf16 /' >>"$results"
  load "run $i llama-bench q8_0"
  "$bin/llama-bench" -m "$q8" -t "$threads" -p 512 -n 128 -r 3 -o jsonl 2>/dev/null |
    tee -a "$raw" | sed 's/^/llb_q8 /' >>"$results"
  load "run $i llama-batched-bench bf16"
  "$bin/llama-batched-bench" -m "$gguf" -t "$threads" -c 8192 -b 512 -npp 16 -ntg 64 -npl 32 \
    --output-format jsonl 2>/dev/null | grep '^{' | tee -a "$raw" | sed 's/^/lbb_bf16 /' >>"$results"
  echo "# run $i done" >>"$results"
done
python3 - "$results" <<'EOF'
import json, statistics, sys
runs, cur = [], {}
for line in open(sys.argv[1]):
    if line.startswith("# run"):
        runs.append(cur); cur = {}
        continue
    tag, _, js = line.partition(" ")
    r = json.loads(js)
    if tag == "moe":
        cur["moe"] = {x["name"]: x["value"] for x in r["results"]}
    elif tag.startswith("llb"):
        key = "pp512" if r["n_prompt"] > 0 and r["n_gen"] == 0 else "tg128"
        cur.setdefault(tag, {})[key] = r["avg_ts"]
    elif tag == "lbb_bf16":
        cur["lbb_bf16"] = r["speed_tg"]
rows = []
for i, c in enumerate(runs, 1):
    m = c["moe"]
    ratio = {
        "decode_b1_vs_llama_tg128": m["decode_tok_s_b1"] / c["llb_bf16"]["tg128"],
        "decode_b32_vs_llama_batched_s_tg": m["decode_tok_s_b32"] / c["lbb_bf16"],
        "prefill_vs_llama_pp512": m["prefill_tok_s"] / c["llb_bf16"]["pp512"],
        "prefill_bf16_act_vs_llama_pp512": m.get("prefill_tok_s_bf16_act", float("nan")) / c["llb_bf16"]["pp512"],
        "q8_0_decode_b1_vs_llama_q8_0_tg128": m.get("decode_tok_s_b1_q8_0", float("nan")) / c["llb_q8"]["tg128"],
        "q8_0_decode_b1_vs_own_bf16": m.get("decode_q8_0_speedup_b1", float("nan")),
    }
    print(f"run {i}: moe prefill {m['prefill_tok_s']:.1f} bf16-act {m.get('prefill_tok_s_bf16_act', 0):.1f} "
          f"q8_0 {m.get('prefill_tok_s_q8_0', 0):.1f} | decode b1 {m['decode_tok_s_b1']:.1f} "
          f"q8_0 {m.get('decode_tok_s_b1_q8_0', 0):.1f} b32 {m['decode_tok_s_b32']:.1f} "
          f"q8_0 {m.get('decode_tok_s_b32_q8_0', 0):.1f}")
    print(f"       llama.cpp pp512 {c['llb_bf16']['pp512']:.1f} tg128 {c['llb_bf16']['tg128']:.1f} "
          f"Q8_0 pp512 {c['llb_q8']['pp512']:.1f} tg128 {c['llb_q8']['tg128']:.1f} | "
          f"batched S_TG npl32 {c['lbb_bf16']:.1f}")
    print("       " + "  ".join(f"{k} {v:.3f}" for k, v in ratio.items()))
    rows.append(ratio)
print("median: " + json.dumps({k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}))
EOF
rm -f "$results"
