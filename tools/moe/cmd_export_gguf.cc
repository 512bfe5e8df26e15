// `moe export-gguf`: converts a checkpoint directory (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE) to a
// GGUF file for llama.cpp (its llama, qwen2moe, qwen3moe, olmoe architectures; see
// common/model/gguf_export.h), for side-by-side benchmarks on the same weights (bench/llamacpp)
// and the llama.cpp logits oracle (tests/llamacpp).
//
//   moe export-gguf --model DIR --out FILE.gguf
//
// One JSON line on stdout: {"out":"FILE.gguf","tensors":N,"bytes":N,"seconds":S}
#include <chrono>
#include <cstdio>
#include <string>

#include "common/model/gguf_export.h"
#include "common/model/gguf_reader.h"
#include "nlohmann/json.hpp"
#include "tools/moe/command.h"

namespace moe::cli {
namespace {

constexpr int kUsage = 2;
constexpr int kFailure = 1;

constexpr char kUsageText[] = "usage: moe export-gguf --model DIR --out FILE.gguf\n";

int RunExportGguf(const Args& /*unused*/, const std::vector<std::string>& argv) {
  auto parsed = Args::Parse(argv, {"help"});
  auto usage_error = [](const absl::Status& s) {
    std::fprintf(stderr, "moe export-gguf: %s\n%s", std::string(s.message()).c_str(), kUsageText);
    return kUsage;
  };
  if (!parsed.ok()) return usage_error(parsed.status());
  const Args& args = *parsed;
  if (args.Has("help")) {
    std::fputs(kUsageText, stdout);
    return 0;
  }
  if (absl::Status s = args.CheckKnown({"model", "out", "help"}); !s.ok()) return usage_error(s);
  if (!args.Has("model") || !args.Has("out")) {
    return usage_error(absl::InvalidArgumentError("--model DIR and --out FILE are required"));
  }
  const std::string out = *args.Get("out");
  const auto start = std::chrono::steady_clock::now();
  auto stats = model::gguf::ExportGguf(*args.Get("model"), out);
  if (!stats.ok()) {
    std::fprintf(stderr, "moe export-gguf: %s\n", std::string(stats.status().message()).c_str());
    return kFailure;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json j = {
      {"out", out}, {"tensors", stats->tensors}, {"bytes", stats->bytes}, {"seconds", seconds}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

MOE_REGISTER_COMMAND("export-gguf", "converts a checkpoint to GGUF for llama.cpp", RunExportGguf);

}  // namespace moe::cli
