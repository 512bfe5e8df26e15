#include "common/tokenizer/preset_tokenizer.h"

#include <cstdio>
#include <filesystem>

#include "absl/time/clock.h"
#include "common/testing/free_port.h"
#include "common/testing/oracle.h"
#include "common/testing/status_matchers.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/oracle_util.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::tokenizer {
namespace {

using ::moe::common::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::unique_ptr<Tokenizer> Build(int64_t vocab) {
  auto files = BuildPresetTokenizer(vocab, "mixtral");
  EXPECT_OK(files.status());
  if (!files.ok()) return nullptr;
  auto tok = Tokenizer::FromJson(files->tokenizer_json, files->tokenizer_config_json);
  EXPECT_OK(tok.status());
  return tok.ok() ? std::move(tok).value() : nullptr;
}

class PresetTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(PresetTest, HasExactVocabAndLayout) {
  auto tok = Build(GetParam());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), GetParam());
  EXPECT_EQ(tok->IdToToken(0), "<unk>");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->IdToToken(3), "<0x00>");
  EXPECT_EQ(tok->IdToToken(258), "<0xFF>");
  EXPECT_THAT(tok->chat_template(), HasSubstr("[INST]"));
  const auto ids = tok->Encode("The quick brown fox.", true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  for (int32_t id : ids) EXPECT_LT(id, GetParam());
  // Learned merges: common words are single tokens, so text is much shorter than its characters.
  EXPECT_LT(ids.size(), GetParam() >= 1024 ? 12u : 16u);
}

TEST_P(PresetTest, DecodeInvertsEncodeIncludingByteFallback) {
  auto tok = Build(GetParam());
  ASSERT_NE(tok, nullptr);
  for (const std::string text :
       {"Hello, world! The experts are busy.", "  two  spaces\tand\nnewlines\n",
        "Grüße aus München, 你好世界, Привет, 😀👍🏽👨‍👩‍👧",
        "x = f(a[1], b{2}) // code"}) {
    const auto ids = tok->Encode(text, false);
    EXPECT_EQ(tok->Decode(ids), text);
    IncrementalDetokenizer detok(*tok, true);
    std::string streamed;
    for (int32_t id : ids) streamed += detok.Add(id);
    streamed += detok.Finish();
    EXPECT_EQ(streamed, text);
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, PresetTest, ::testing::Values(512, 1024, 32000));

TEST(PresetTokenizerTest, DeterministicAndFast) {
  const auto start = absl::Now();
  ASSERT_OK_AND_ASSIGN(auto a, BuildPresetTokenizer(32000, "mixtral"));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("built the 32000-token preset tokenizer in %.3f s\n", seconds);
  EXPECT_LT(seconds, 5.0);
  ASSERT_OK_AND_ASSIGN(auto b, BuildPresetTokenizer(32000, "mixtral"));
  EXPECT_EQ(a.tokenizer_json, b.tokenizer_json);
  EXPECT_EQ(a.tokenizer_config_json, b.tokenizer_config_json);
  // Smaller vocabularies are prefixes of larger ones while the corpus has pairs to merge.
  ASSERT_OK_AND_ASSIGN(auto tiny, BuildPresetTokenizer(512, "mixtral"));
  EXPECT_NE(tiny.tokenizer_json, a.tokenizer_json);
}

TEST(PresetTokenizerTest, RejectsBadArguments) {
  EXPECT_THAT(BuildPresetTokenizer(100, "mixtral").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab_size")));
  EXPECT_THAT(BuildPresetTokenizer(512, "gpt2").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("arch")));
}

// The generated files load in HF's JS tokenizer and encode exactly as the C++ tokenizer does.
TEST(PresetTokenizerTest, MatchesHfOracle) {
  if (auto reason = testing::OracleUnavailableReason()) MOE_MISSING_ORACLE(*reason);
  const std::string root = common::testing::MakeTempDir("preset_tok");
  for (int64_t vocab : {512, 1024, 32000}) {
    SCOPED_TRACE(vocab);
    const std::string dir = root + "/" + std::to_string(vocab);
    ASSERT_OK(WritePresetTokenizer(dir, vocab, "qwen3_moe", 8192));
    ASSERT_OK_AND_ASSIGN(auto tok, Tokenizer::FromFile(dir));
    ASSERT_OK_AND_ASSIGN(
        auto oracle,
        testing::RunOracle({"--tokenizer", dir, "--corpus",
                            testing::SourceDir() + "/common/tokenizer/testdata/oracle_corpus.json",
                            "--decode-random", "100", "--seed", "3"}));
    EXPECT_EQ(oracle["vocab_size"].get<int64_t>(), vocab);
    for (const auto& c : oracle["cases"]) {
      const std::string text = c["text"].get<std::string>();
      EXPECT_THAT(tok->Encode(text, true), ElementsAreArray(c["ids"].get<std::vector<int32_t>>()))
          << text;
      EXPECT_THAT(tok->Encode(text, false),
                  ElementsAreArray(c["ids_no_special"].get<std::vector<int32_t>>()))
          << text;
      EXPECT_EQ(tok->Decode(c["ids"].get<std::vector<int32_t>>(), true),
                c["decoded_skip"].get<std::string>());
    }
    for (const auto& c : oracle["random_decodes"]) {
      EXPECT_EQ(tok->Decode(c["ids"].get<std::vector<int32_t>>(), false),
                c["decoded"].get<std::string>());
    }
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace moe::tokenizer
