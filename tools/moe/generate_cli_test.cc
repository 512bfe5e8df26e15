// `moe generate` end to end: runs the built binary on a tiny make-model checkpoint.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/model/checkpoint.h"
#include "common/model/make_model.h"
#include "common/model/reference/reference_forward.h"
#include "common/process/child_process.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moe::cli {
namespace {

// Runs `moe generate --model <model> <flags>`, returns its stdout; *rc gets the exit code (-1
// when it could not run). Its stderr is the test's, or discarded when `quiet`.
std::string Generate(const std::string& model, const std::vector<std::string>& flags, int* rc,
                     bool quiet = false) {
  const char* b = std::getenv("MOE_BUILD_DIR");
  std::vector<std::string> argv = {std::string(b != nullptr ? b : ".") + "/bin/moe", "generate",
                                   "--model", model};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto run = common::process::RunToExit(
      {.argv = std::move(argv), .stderr_path = quiet ? "/dev/null" : ""}, absl::Minutes(5));
  *rc = run.ok() ? run->exit_code : -1;
  return run.ok() ? run->stdout_text : std::string(run.status().message());
}

class GenerateCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(common::testing::MakeTempDir("generate_cli"));
    model::MakeModelOptions o;
    o.preset = model::Preset::kTiny;
    o.arch = model::Arch::kQwen3Moe;
    ASSERT_THAT(model::MakeModel(o, *dir_), common::testing::IsOk());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string* dir_;
};
std::string* GenerateCliTest::dir_ = nullptr;

TEST_F(GenerateCliTest, JsonGreedyTokensAndLogitsMatchTheReference) {
  int rc = 0;
  const std::string out = Generate(*dir_,
                                   {"--prompt-ids", "5,99,12,300,7", "--max-tokens", "6",
                                    "--ignore-eos", "--threads", "2", "--json", "--logits", "all"},
                                   &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["prompt_ids"], nlohmann::json({5, 99, 12, 300, 7}));
  ASSERT_OK_AND_ASSIGN(auto ckpt, model::Checkpoint::Open(*dir_));
  const std::vector<int32_t> prompt = {5, 99, 12, 300, 7};
  ASSERT_OK_AND_ASSIGN(
      auto greedy, model::reference::ReferenceGreedy(ckpt->config(), ckpt->weights(), prompt, 6));
  EXPECT_EQ(j["output_ids"].get<std::vector<int32_t>>(), greedy);
  EXPECT_EQ(j["finish_reason"], "length");
  ASSERT_OK_AND_ASSIGN(auto ref,
                       model::reference::ReferenceLogits(ckpt->config(), ckpt->weights(), prompt));
  ASSERT_EQ(j["logits"].size(), 5u);
  for (size_t p = 0; p < 5; ++p) {
    ASSERT_EQ(j["logits"][p].size(), static_cast<size_t>(ckpt->config().vocab_size));
    for (size_t v = 0; v < j["logits"][p].size(); ++v) {
      ASSERT_NEAR(j["logits"][p][v].get<double>(), ref[p][v], 1e-4) << p << "," << v;
    }
  }
}

TEST_F(GenerateCliTest, LogitsOutIsTheRawF32OfThePrintedLogits) {
  int rc = 0;
  std::vector<std::string> base = {"--prompt-ids", "1,2,3",    "--max-tokens", "0",
                                   "--json",       "--logits", "all"};
  const auto printed = nlohmann::json::parse(Generate(*dir_, base, &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_TRUE(printed["output_ids"].empty());
  const std::string file = *dir_ + "/logits.f32";
  base.insert(base.end(), {"--logits-out", file});
  const auto j = nlohmann::json::parse(Generate(*dir_, base, &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_FALSE(j.contains("logits"));
  std::ifstream in(file, std::ios::binary);
  std::vector<float> raw(3 * 512);
  in.read(reinterpret_cast<char*>(raw.data()), raw.size() * sizeof(float));
  ASSERT_EQ(in.gcount(), static_cast<std::streamsize>(raw.size() * sizeof(float)));
  EXPECT_EQ(in.peek(), EOF);
  for (size_t p = 0; p < 3; ++p) {
    for (size_t v = 0; v < 512; ++v) {
      // %.9g round-trips f32 exactly.
      const float f = static_cast<float>(printed["logits"][p][v].get<double>());
      ASSERT_EQ(std::memcmp(&f, &raw[p * 512 + v], 4), 0) << p << "," << v;
    }
  }
}

TEST_F(GenerateCliTest, StreamsTheDecodedTextOfTheJsonOutput) {
  if (!std::filesystem::exists(*dir_ + "/tokenizer.json")) {
    GTEST_SKIP() << "this make-model writes no tokenizer.json yet";
  }
  int rc = 0;
  std::vector<std::string> flags = {"--prompt", "Hello there", "--max-tokens", "8", "--ignore-eos"};
  const std::string text = Generate(*dir_, flags, &rc);
  ASSERT_EQ(rc, 0);
  flags.push_back("--json");
  const auto j = nlohmann::json::parse(Generate(*dir_, flags, &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(text, j["text"].get<std::string>() + "\n");
  ASSERT_OK_AND_ASSIGN(auto tok, tokenizer::Tokenizer::FromFile(*dir_));
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), tok->Encode("Hello there", true));
}

TEST_F(GenerateCliTest, ChatWrapsThePromptInTheModelsTemplate) {
  int rc = 0;
  const std::string out =
      Generate(*dir_, {"--prompt", "hi", "--chat", "--max-tokens", "1", "--json"}, &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  // The preset's Mistral-style template: BOS, then one [INST] turn; the template writes BOS, so
  // nothing else is added.
  ASSERT_OK_AND_ASSIGN(auto tok, tokenizer::Tokenizer::FromFile(*dir_));
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(),
            tok->Encode(tok->bos_token() + "[INST] hi [/INST]", /*add_special_tokens=*/false));
}

TEST_F(GenerateCliTest, UsageErrorsExitWithTwo) {
  int rc = 0;
  Generate(*dir_, {}, &rc, /*quiet=*/true);
  EXPECT_EQ(rc, 2);  // neither --prompt nor --prompt-ids
  Generate(*dir_, {"--prompt-ids", "1,x"}, &rc, /*quiet=*/true);
  EXPECT_EQ(rc, 2);
  Generate(*dir_, {"--prompt-ids", "1", "--logits", "some", "--json"}, &rc, /*quiet=*/true);
  EXPECT_EQ(rc, 2);
  Generate(*dir_, {"--prompt-ids", "100000"}, &rc, /*quiet=*/true);
  EXPECT_EQ(rc, 2);
  Generate("/nonexistent", {"--prompt-ids", "1"}, &rc, /*quiet=*/true);
  EXPECT_EQ(rc, 1);
  Generate(*dir_, {"--prompt-ids", "1", "--activations", "f16"}, &rc, /*quiet=*/true);
  EXPECT_EQ(rc, 2);
}

TEST_F(GenerateCliTest, AcceptsBf16Activations) {
  int rc = 0;
  const std::string out = Generate(
      *dir_, {"--prompt-ids", "1,2,3", "--max-tokens", "2", "--json", "--activations", "bf16"},
      &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"output_ids\""), std::string::npos) << out;
}

}  // namespace
}  // namespace moe::cli
