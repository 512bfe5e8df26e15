// `moe make-model`: writes a deterministic random HF checkpoint with tokenizer (DESIGN.md §6).
//
//   moe make-model --preset tiny|small|bench --arch mixtral|qwen2_moe|qwen3_moe|olmoe
//                  --dtype f32|bf16|f16 [--gate-skew zipf:S] [--seed N] --out DIR
//                  [--max-shard-bytes N] [--kv-heads N] [--progress]
//
// --kv-heads N overrides the preset's num_key_value_heads (it must divide the heads).
//
// Same flags -> byte-identical files. A progress bar goes to stderr for large models (or with
// --progress); one JSON line on stdout describes what was written:
//   {"out":"DIR","preset":"tiny","arch":"mixtral","dtype":"f32","params":N,"bytes":N,"seconds":S}
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/model/checkpoint_layout.h"
#include "common/model/make_model.h"
#include "nlohmann/json.hpp"
#include "tools/moe/command.h"

namespace moe::cli {
namespace {

constexpr int kUsage = 2;
constexpr int kFailure = 1;

constexpr char kUsageText[] =
    "usage: moe make-model --preset tiny|small|bench --arch mixtral|qwen2_moe|qwen3_moe|olmoe\n"
    "                      --dtype f32|bf16|f16 [--gate-skew zipf:S] [--seed N] --out DIR\n"
    "                      [--max-shard-bytes N] [--kv-heads N] [--progress]\n";

absl::StatusOr<common::DType> ParseDtype(const std::string& s) {
  if (s == "f32" || s == "float32") return common::DType::kF32;
  if (s == "bf16" || s == "bfloat16") return common::DType::kBF16;
  if (s == "f16" || s == "float16") return common::DType::kF16;
  return absl::InvalidArgumentError(absl::StrCat("--dtype: '", s, "' is not f32, bf16 or f16"));
}

absl::StatusOr<double> ParseGateSkew(const std::string& s) {
  double v = 0;
  if (s.rfind("zipf:", 0) != 0 || !absl::SimpleAtod(s.substr(5), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gate-skew: '", s, "' is not zipf:S (e.g. zipf:1.2)"));
  }
  return v;
}

// A one-line progress bar on stderr, redrawn when the percentage changes.
class ProgressBar {
 public:
  void Update(int64_t done, int64_t total) {
    const int pct = total > 0 ? static_cast<int>(done * 100 / total) : 100;
    if (pct == last_) return;
    last_ = pct;
    constexpr int kWidth = 40;
    std::string bar(kWidth, ' ');
    for (int i = 0; i < pct * kWidth / 100; ++i) bar[i] = '=';
    std::fprintf(stderr, "\rmake-model [%s] %3d%% %.2f/%.2f GB", bar.c_str(), pct, done / 1e9,
                 total / 1e9);
    if (done >= total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  int last_ = -1;
};

int RunMakeModel(const Args& /*unused*/, const std::vector<std::string>& argv) {
  auto parsed = Args::Parse(argv, {"progress", "help"});
  if (!parsed.ok()) {
    std::fprintf(stderr, "moe make-model: %s\n%s", std::string(parsed.status().message()).c_str(),
                 kUsageText);
    return kUsage;
  }
  const Args& args = *parsed;
  if (args.Has("help")) {
    std::fprintf(stderr, "%s", kUsageText);
    return 0;
  }
  auto usage_error = [](const absl::Status& s) {
    std::fprintf(stderr, "moe make-model: %s\n%s", std::string(s.message()).c_str(), kUsageText);
    return kUsage;
  };
  if (absl::Status s = args.CheckKnown({"preset", "arch", "dtype", "gate-skew", "seed", "out",
                                        "max-shard-bytes", "kv-heads", "progress", "help"});
      !s.ok()) {
    return usage_error(s);
  }
  if (!args.Has("out")) return usage_error(absl::InvalidArgumentError("--out DIR is required"));

  model::MakeModelOptions o;
  auto preset = model::ParsePreset(args.GetOr("preset", "tiny"));
  if (!preset.ok()) return usage_error(preset.status());
  o.preset = *preset;
  auto arch = model::ArchFromModelType(args.GetOr("arch", "mixtral"));
  if (!arch.ok())
    return usage_error(
        absl::InvalidArgumentError(absl::StrCat("--arch: ", arch.status().message())));
  o.arch = *arch;
  auto dtype = ParseDtype(args.GetOr("dtype", "f32"));
  if (!dtype.ok()) return usage_error(dtype.status());
  o.dtype = *dtype;
  if (args.Has("gate-skew")) {
    auto skew = ParseGateSkew(*args.Get("gate-skew"));
    if (!skew.ok()) return usage_error(skew.status());
    o.gate_skew = *skew;
  }
  auto seed = args.GetInt("seed", 0);
  if (!seed.ok()) return usage_error(seed.status());
  if (*seed < 0) return usage_error(absl::InvalidArgumentError("--seed must be >= 0"));
  o.seed = static_cast<uint64_t>(*seed);
  auto shard = args.GetInt("max-shard-bytes", o.max_shard_bytes);
  if (!shard.ok()) return usage_error(shard.status());
  o.max_shard_bytes = *shard;
  auto kv_heads = args.GetInt("kv-heads", 0);
  if (!kv_heads.ok()) return usage_error(kv_heads.status());
  o.kv_heads = *kv_heads;
  if (absl::Status s = o.Validate(); !s.ok()) return usage_error(s);

  const model::ModelConfig config = model::PresetConfig(o);
  if (absl::Status s = config.Validate(); !s.ok()) return usage_error(s);
  int64_t params = 0;
  for (const model::TensorSlot& slot : model::CheckpointTensors(config)) {
    int64_t n = 1;
    for (int64_t d : slot.shape) n *= d;
    params += n;
  }
  const int64_t bytes = params * common::DTypeSize(o.dtype);
  ProgressBar bar;
  if (args.Has("progress") || bytes >= (int64_t{64} << 20)) {
    o.progress = [&bar](int64_t done, int64_t total) { bar.Update(done, total); };
  }
  const std::string out = *args.Get("out");
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = model::MakeModel(o, out); !s.ok()) {
    std::fprintf(stderr, "moe make-model: %s\n", std::string(s.message()).c_str());
    return kFailure;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json line = {{"out", out},
                         {"preset", std::string(model::PresetName(o.preset))},
                         {"arch", std::string(model::ModelTypeName(o.arch))},
                         {"dtype", std::string(common::DTypeName(o.dtype))},
                         {"gate_skew", o.gate_skew},
                         {"seed", o.seed},
                         {"params", params},
                         {"bytes", bytes},
                         {"seconds", seconds}};
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

}  // namespace

MOE_REGISTER_COMMAND("make-model", "writes a deterministic random HF checkpoint with tokenizer",
                     RunMakeModel);

}  // namespace moe::cli
