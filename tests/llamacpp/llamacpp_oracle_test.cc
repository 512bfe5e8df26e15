// The llama.cpp logits oracle (ctest label llamacpp, outside the default run; scripts/test-llamacpp
// installs node-llama-cpp and runs it). For each architecture a tiny checkpoint is made
// (`moe make-model`), exported (`moe export-gguf`), and the next-token logits at every position of
// a fixed 24-id sequence are taken from llama.cpp (bench/llamacpp/logits.mjs: node-llama-cpp
// 3.22.1's prebuilt CPU build, f32 KV cache, no flash attention) and from the engine (`moe
// generate --logits all --logits-out`), then compared: max |diff| over all positions and the
// whole vocabulary, and the argmax at every position. Token ids go in directly, so tokenizers
// play no part.
//
// Tolerances, from the measured figures (tests/llamacpp/README.md; logits have |max| ~23-27):
//  - F32 weights: both sides compute in f32 and differ only in summation order; measured max
//    |diff| 0.8e-5-1.6e-5, bound 2e-4 (>10x margin). A wrong export is far off: q/k rows in the
//    wrong rotary layout gave 20-24 (argmax agreeing at 4-9 of 24 positions).
//  - BF16 weights: llama.cpp's CPU BF16 matmul rounds each activation row to bf16 before the dot
//    product, as the engine's opt-in --activations bf16 does, at nearly but not exactly the same
//    points; measured 0.037-0.046, bound 0.15. (The default f32-activation engine differs from
//    llama.cpp by the bf16 rounding itself, ~0.2 on qwen3_moe, so it is not the one compared.)
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/process/child_process.h"
#include "common/testing/free_port.h"
#include "common/testing/oracle.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

namespace fs = std::filesystem;

struct Case {
  const char* arch;   // moe make-model --arch
  const char* dtype;  // --dtype
  const char* activations;
  double tolerance;   // max |logit diff| allowed
  const char* extra;  // more make-model flags ("" = none)
};

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// `name` on $PATH, or "" when absent.
std::string FindOnPath(const std::string& name) {
  for (absl::string_view dir : absl::StrSplit(Env("PATH", ""), ':', absl::SkipEmpty())) {
    const fs::path p = fs::path(std::string(dir)) / name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

// Runs argv to its end; returns stdout, or fails the test with stderr's path in the message.
std::string RunTool(const std::vector<std::string>& argv, const std::string& stderr_path) {
  auto r = common::process::RunToExit({.argv = argv, .stderr_path = stderr_path}, absl::Minutes(5));
  if (!r.ok()) {
    ADD_FAILURE() << absl::StrJoin(argv, " ") << ": " << r.status();
    return "";
  }
  if (r->exit_code != 0) {
    std::ifstream err(stderr_path);
    std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    ADD_FAILURE() << absl::StrJoin(argv, " ") << " exited " << r->exit_code << ":\n" << text;
  }
  return r->stdout_text;
}

std::vector<float> ReadF32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// A fixed prompt of in-vocabulary ids (tiny vocab: 512), <s> first.
const std::vector<int> kPrompt = {1,   415, 293, 306, 285, 114, 287, 454, 272, 178, 391, 17,
                                  500, 64,  333, 222, 9,   480, 120, 77,  301, 258, 199, 42};

class LlamaCppOracleTest : public ::testing::TestWithParam<Case> {};

TEST_P(LlamaCppOracleTest, LogitsMatchLlamaCpp) {
  const Case& c = GetParam();
  const std::string src = Env("MOE_SOURCE_DIR", ".");
  const std::string moe = Env("MOE_BUILD_DIR", ".") + "/bin/moe";
  const std::string script = src + "/bench/llamacpp/logits.mjs";
  const std::string node = FindOnPath("node");
  if (node.empty()) MOE_MISSING_ORACLE("node is not on PATH");
  if (!fs::exists(src + "/bench/llamacpp/node_modules/node-llama-cpp")) {
    MOE_MISSING_ORACLE(
        "bench/llamacpp/node_modules/node-llama-cpp (scripts/test-llamacpp installs it)");
  }
  const std::string dir = common::testing::MakeTempDir("llamacpp_oracle");
  const std::string name = absl::StrCat(c.arch, "-", c.dtype);
  const std::string model = dir + "/" + name, gguf = model + ".gguf", log = dir + "/stderr.txt";
  std::vector<std::string> make = {moe,    "make-model", "--preset", "tiny",  "--arch",
                                   c.arch, "--dtype",    c.dtype,    "--out", model};
  for (absl::string_view f : absl::StrSplit(c.extra, ' ', absl::SkipEmpty())) {
    make.emplace_back(f);
  }
  RunTool(make, log);
  RunTool({moe, "export-gguf", "--model", model, "--out", gguf}, log);
  const std::string ids = absl::StrJoin(kPrompt, ",");
  RunTool({moe, "generate", "--model", model, "--prompt-ids", ids, "--max-tokens", "1",
           "--ignore-eos", "--threads", "2", "--activations", c.activations, "--json", "--logits",
           "all", "--logits-out", dir + "/engine.f32"},
          log);
  const std::string line = RunTool(
      {node, script, "--model", gguf, "--prompt-ids", ids, "--out", dir + "/llama.f32"}, log);
  if (HasFailure()) return;
  const auto info = nlohmann::json::parse(line);
  const int64_t vocab = info["vocab"].get<int64_t>();
  const std::vector<float> ours = ReadF32(dir + "/engine.f32");
  const std::vector<float> theirs = ReadF32(dir + "/llama.f32");
  const size_t positions = kPrompt.size();
  ASSERT_EQ(ours.size(), positions * vocab);
  ASSERT_EQ(theirs.size(), positions * vocab);
  double max_diff = 0, max_abs = 0;
  int argmax_agree = 0;
  for (size_t p = 0; p < positions; ++p) {
    size_t a = 0, b = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const size_t i = p * vocab + v;
      max_diff = std::max(max_diff, std::abs(static_cast<double>(ours[i]) - theirs[i]));
      max_abs = std::max(max_abs, std::abs(static_cast<double>(theirs[i])));
      if (ours[i] > ours[p * vocab + a]) a = v;
      if (theirs[i] > theirs[p * vocab + b]) b = v;
    }
    argmax_agree += a == b;
  }
  std::printf("%s\n", nlohmann::json({{"arch", c.arch},
                                      {"llama_arch", info["architecture"]},
                                      {"dtype", c.dtype},
                                      {"activations", c.activations},
                                      {"positions", positions},
                                      {"vocab", vocab},
                                      {"max_abs_logit_diff", max_diff},
                                      {"max_abs_logit", max_abs},
                                      {"argmax_agree", argmax_agree},
                                      {"tolerance", c.tolerance}})
                          .dump()
                          .c_str());
  EXPECT_LE(max_diff, c.tolerance) << name;
  EXPECT_EQ(argmax_agree, static_cast<int>(positions)) << name;
  fs::remove_all(dir);
}

// OLMoE with kv heads = heads: llama.cpp's olmoe graph has no grouped-query attention.
INSTANTIATE_TEST_SUITE_P(Archs, LlamaCppOracleTest,
                         ::testing::Values(Case{"mixtral", "f32", "f32", 2e-4, ""},
                                           Case{"qwen2_moe", "f32", "f32", 2e-4, ""},
                                           Case{"qwen3_moe", "f32", "f32", 2e-4, ""},
                                           Case{"olmoe", "f32", "f32", 2e-4, "--kv-heads 4"},
                                           Case{"mixtral", "bf16", "bf16", 0.15, ""},
                                           Case{"qwen2_moe", "bf16", "bf16", 0.15, ""},
                                           Case{"qwen3_moe", "bf16", "bf16", 0.15, ""},
                                           Case{"olmoe", "bf16", "bf16", 0.15, "--kv-heads 4"}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return absl::StrCat(i.param.arch, "_", i.param.dtype);
                         });

}  // namespace
}  // namespace moe
