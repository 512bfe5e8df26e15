#!/usr/bin/env bash
# The device run of issue 19, on a GPU machine (H200 here), from a bundle made by pack.sh:
# runs the gpu-labelled tests (kernels against the CPU oracle, bitwise batch invariance, the
# CUDA expert executor) and moe_gpu_bench, then prints ONE JSON line (DESIGN.md §6 schema):
# the benchmark's results plus one result per test binary (tests passed, failed, skipped; on a
# device a skip is a failure). Exit status: 0 when every test passed and the bench ran.
# Needs only the bundle, the CUDA driver, cuBLAS and python3. Finishes well under 5 minutes
# (the bench preset checkpoint is generated once, ~1.3 GB in $MOE_BENCH_CACHE or /tmp).
#
# Usage: device_check.sh [BUNDLE_DIR] [OUT_DIR]   (defaults: this script's folder, a temp dir)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=${1:-$here}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
[[ -x $bundle/moe_kernels_cuda_test ]] || { echo "device_check: no bundle in $bundle (tests/gpu/pack.sh)" >&2; exit 2; }
nvidia-smi -L > "$out/gpu.txt" 2>&1 || echo "nvidia-smi unavailable" > "$out/gpu.txt"
status=0
for t in moe_kernels_cuda_test moe_cuda_expert_executor_test; do
  timeout 120 "$bundle/$t" --gtest_output="json:$out/$t.json" > "$out/$t.log" 2>&1 || status=1
done
preset=${MOE_GPU_BENCH_PRESET:-bench}
timeout 200 "$bundle/moe_gpu_bench" --preset "$preset" --out "$out/bench.json" \
  > "$out/bench.log" 2>&1 || status=1
python3 - "$out" "$status" <<'PY'
import datetime, json, os, sys
out, status = sys.argv[1], int(sys.argv[2])
report = {"suite": "gpu_device_check",
          "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
          "machine": {"cpus": os.cpu_count()}, "results": []}
bench = os.path.join(out, "bench.json")
if os.path.exists(bench) and os.path.getsize(bench) > 0:
    b = json.load(open(bench))
    report.update(started=b["started"], machine=b["machine"])
    report["results"] += b["results"]
else:
    report["results"].append({"name": "bench_error", "value": 1, "unit": "error",
                              "params": {"log_tail": open(os.path.join(out, "bench.log")).read()[-2000:]}})
report["machine"]["gpu"] = open(os.path.join(out, "gpu.txt")).read().strip()
for t in ("moe_kernels_cuda_test", "moe_cuda_expert_executor_test"):
    path = os.path.join(out, t + ".json")
    passed = failed = skipped = 0
    names = []
    if os.path.exists(path):
        for suite in json.load(open(path)).get("testsuites", []):
            for case in suite.get("testsuite", []):
                name = suite["name"] + "." + case["name"]
                if case.get("failures"):
                    failed += 1; names.append("FAILED " + name)
                elif case.get("result") == "SKIPPED" or case.get("status") == "NOTRUN":
                    skipped += 1; names.append("SKIPPED " + name)
                else:
                    passed += 1
    else:
        failed = 1; names.append("no output (crashed or timed out): see " + t + ".log")
    # NoDevice tests skip on a device by design; every other skip means the device was missed.
    bad_skips = [n for n in names if n.startswith("SKIPPED") and "NoDevice" not in n]
    if failed or bad_skips:
        status = 1
    report["results"].append({"name": t + "_passed", "value": passed, "unit": "tests",
                              "params": {"failed": failed, "skipped": skipped, "not_passed": names}})
    invariance = [n for n in names if "Invariant" in n or "Independent" in n or "Bitwise" in n]
    report["results"].append({"name": t + "_batch_invariance_ok", "value": 0 if invariance else 1,
                              "unit": "bool", "params": {"not_passed": invariance}})
report["results"].append({"name": "device_check_passed", "value": 1 if status == 0 else 0, "unit": "bool"})
print(json.dumps(report))
sys.exit(status)
PY
