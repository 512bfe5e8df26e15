// Unit tests of the tokenizer on small hand-made tokenizer.json files: BPE merge order, byte
// fallback, added tokens, decoders, the incremental detokenizer, and errors for malformed files.
// (tokenizer_oracle_test.cc compares real tokenizers with HF's implementation.)
#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/testing/sp_tokenizer_json.h"
#include "common/tokenizer/unicode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::tokenizer {
namespace {

using ::moe::common::testing::StatusIs;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kSp = testing::kSpacePiece;  // ▁

// A SentencePiece-style (Mistral-like) tokenizer: <unk> <s> </s>, 256 byte tokens, a few pieces.
json SpTokenizer() {
  const std::string sp = kSp;
  return testing::SentencePieceTokenizerJson(
      {sp, "a", "b", "c", "h", "i", sp + "a", "ab", "bc", sp + "ab", sp + "h", sp + "hi", sp + sp},
      {sp + " a", "a b", "b c", sp + "a b", sp + " h", sp + "h i", sp + " " + sp});
}

json SpConfig() { return testing::SentencePieceConfigJson("{{ bos_token }}[INST]"); }

std::unique_ptr<Tokenizer> Load(const json& tok, const json& config = json::object()) {
  auto t = Tokenizer::FromJson(tok.dump(), config.dump());
  EXPECT_OK(t.status());
  return t.ok() ? std::move(t).value() : nullptr;
}

int32_t Id(const Tokenizer& t, const std::string& token) {
  return t.TokenToId(token).value_or(-99);
}

TEST(Utf8Test, LossyReplacesMaximalInvalidSubsequences) {
  EXPECT_EQ(Utf8Lossy("abc"), "abc");
  EXPECT_EQ(Utf8Lossy("a\xE4\xB8z"), "a\xEF\xBF\xBDz");          // truncated 3-byte: one U+FFFD
  EXPECT_EQ(Utf8Lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // two invalid bytes
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));
}

TEST(Utf8Test, StreamingDecoderMatchesWholeForEverySplit) {
  const std::string s = "a\xF0\x9F\x98\x80\xE4\xB8\xAD\xE4\xB8z\xFF\xC3\xA9\xF0\x9F";
  for (size_t cut1 = 0; cut1 <= s.size(); ++cut1) {
    for (size_t cut2 = cut1; cut2 <= s.size(); ++cut2) {
      StreamingUtf8Decoder d;
      std::string out = d.Feed(s.substr(0, cut1));
      out += d.Feed(s.substr(cut1, cut2 - cut1));
      out += d.Feed(s.substr(cut2));
      out += d.Finish();
      ASSERT_EQ(out, Utf8Lossy(s)) << cut1 << " " << cut2;
    }
  }
}

TEST(Utf8Test, ByteLevelAlphabetRoundTrips) {
  EXPECT_EQ(ByteToUnicode(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(ByteToUnicode('\n'), "\xC4\x8A");  // Ċ
  for (int b = 0; b < 256; ++b) {
    size_t pos = 0;
    EXPECT_EQ(UnicodeToByte(NextCodePoint(ByteToUnicode(static_cast<unsigned char>(b)), &pos)), b);
  }
}

TEST(TokenizerTest, MergesByRankThenLeftmost) {
  auto t = Load(SpTokenizer(), SpConfig());
  ASSERT_NE(t, nullptr);
  // "▁abc": "▁ a" (rank 0) first, then "a b" is gone; "▁a b" (rank 3) beats "b c" (rank 2)? No:
  // after ▁a, pairs are (▁a,b) rank 3 and (b,c) rank 2, so b c merges first: ▁a + bc.
  EXPECT_THAT(t->Encode("abc", false), ElementsAre(Id(*t, std::string(kSp) + "a"), Id(*t, "bc")));
  EXPECT_THAT(t->Encode("ab", false), ElementsAre(Id(*t, std::string(kSp) + "ab")));
  EXPECT_THAT(t->Encode("hi", true), ElementsAre(1, Id(*t, std::string(kSp) + "hi")));
  // Two spaces: "▁▁hi" -> ▁▁ + hi? "▁ ▁" is rank 6, "▁ h" rank 4: ▁ + ▁h -> ▁ + ▁hi.
  EXPECT_THAT(t->Encode(" hi", false), ElementsAre(Id(*t, kSp), Id(*t, std::string(kSp) + "hi")));
}

TEST(TokenizerTest, ByteFallbackAndDecode) {
  auto t = Load(SpTokenizer(), SpConfig());
  ASSERT_NE(t, nullptr);
  const auto ids = t->Encode("a\xE2\x82\xAC", false);  // "a€": € is not in the vocabulary
  EXPECT_THAT(ids, ElementsAre(Id(*t, std::string(kSp) + "a"), Id(*t, "<0xE2>"), Id(*t, "<0x82>"),
                               Id(*t, "<0xAC>")));
  EXPECT_EQ(t->Decode(ids), "a\xE2\x82\xAC");  // leading space stripped by the Strip decoder
  const std::vector<int32_t> with_bos = {1, Id(*t, std::string(kSp) + "hi")};
  EXPECT_EQ(t->Decode(with_bos, false), "<s> hi");
  EXPECT_EQ(t->Decode(with_bos, true), "hi");
  // An incomplete byte sequence decodes to U+FFFD.
  EXPECT_EQ(t->Decode(std::vector<int32_t>{Id(*t, "<0xE2>"), Id(*t, "<0x82>")}), "\xEF\xBF\xBD");
  // Unknown ids are skipped.
  EXPECT_EQ(t->Decode(std::vector<int32_t>{-1, 100000, Id(*t, "a")}), "a");
}

TEST(TokenizerTest, IncrementalDetokenizerHoldsBackIncompleteCharacters) {
  auto t = Load(SpTokenizer(), SpConfig());
  ASSERT_NE(t, nullptr);
  IncrementalDetokenizer d(*t, /*skip_special_tokens=*/true);
  EXPECT_EQ(d.Add(1), "");                                  // <s> skipped
  EXPECT_EQ(d.Add(Id(*t, std::string(kSp) + "hi")), "hi");  // leading space stripped
  EXPECT_EQ(d.Add(Id(*t, "<0xE2>")), "");
  EXPECT_TRUE(d.has_pending());
  EXPECT_EQ(d.Add(Id(*t, "<0x82>")), "");
  EXPECT_EQ(d.Add(Id(*t, "<0xAC>")), "\xE2\x82\xAC");
  EXPECT_EQ(d.Add(Id(*t, std::string(kSp) + "a")), " a");
  EXPECT_EQ(d.Add(Id(*t, "<0xF0>")), "");
  EXPECT_EQ(d.Finish(), "\xEF\xBF\xBD");  // an unfinished character at the end of the stream
  EXPECT_EQ(d.text(), "hi\xE2\x82\xAC a\xEF\xBF\xBD");
}

TEST(TokenizerTest, ConfigFields) {
  auto t = Load(SpTokenizer(), SpConfig());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_THAT(t->eos_ids(), ElementsAre(2));
  EXPECT_TRUE(t->IsSpecial(1));
  EXPECT_FALSE(t->IsSpecial(Id(*t, "a")));
  EXPECT_EQ(t->chat_template(), "{{ bos_token }}[INST]");
  EXPECT_EQ(t->vocab_size(), 259 + 13);
  EXPECT_EQ(t->IdToToken(1), "<s>");
  EXPECT_EQ(t->IdToToken(100000), std::nullopt);
}

TEST(TokenizerTest, FromFileReadsDirectoryWithGenerationConfig) {
  const std::string dir = common::testing::MakeTempDir("tok");
  std::ofstream(dir + "/tokenizer.json") << SpTokenizer().dump();
  std::ofstream(dir + "/tokenizer_config.json") << SpConfig().dump();
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [2, 5]})";
  ASSERT_OK_AND_ASSIGN(auto t, Tokenizer::FromFile(dir));
  EXPECT_THAT(t->eos_ids(), ElementsAre(2, 5));
  EXPECT_TRUE(t->IsEos(5));
  ASSERT_OK_AND_ASSIGN(auto t2, Tokenizer::FromFile(dir + "/tokenizer.json"));
  EXPECT_THAT(t2->eos_ids(), ElementsAre(2, 5));
  std::filesystem::remove_all(dir);
}

TEST(TokenizerTest, AddBosFromConfigWithoutTemplate) {
  json tok = SpTokenizer();
  tok["post_processor"] = nullptr;
  json config = SpConfig();
  EXPECT_THAT(Load(tok, config)->Encode("a", true),
              ElementsAre(1, Id(*Load(tok), std::string(kSp) + "a")));
  config["add_bos_token"] = false;
  EXPECT_EQ(Load(tok, config)->Encode("a", true).size(), 1u);
}

// A byte-level (GPT-2 style) tokenizer with added tokens that strip whitespace.
json ByteLevelTokenizer() {
  json vocab = json::object();
  int next = 0;
  for (int b = 0; b < 256; ++b) vocab[ByteToUnicode(static_cast<unsigned char>(b))] = next++;
  const std::string G = ByteToUnicode(' ');
  for (const std::string& t : {std::string("he"), std::string("hel"), std::string("hell"),
                               std::string("hello"), G + "w", G + "wo", std::string("ll")}) {
    vocab[t] = next++;
  }
  json merges =
      json::array({json::array({"h", "e"}), json::array({"l", "l"}), json::array({"he", "ll"}),
                   json::array({"hell", "o"}), json::array({G, "w"}), json::array({G + "w", "o"})});
  json added = json::array({
      {{"id", 1000},
       {"content", "<|end|>"},
       {"special", true},
       {"lstrip", true},
       {"rstrip", true},
       {"normalized", false}},
      {{"id", 1001}, {"content", "<tool>"}, {"special", false}, {"normalized", false}},
  });
  return {
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"},
               {"pattern", {{"Regex", R"( ?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor", {{"type", "ByteLevel"}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", false}}}};
}

TEST(TokenizerTest, ByteLevelWithAddedTokens) {
  auto t = Load(ByteLevelTokenizer(), {{"eos_token", "<|end|>"}});
  ASSERT_NE(t, nullptr);
  const std::string G = ByteToUnicode(' ');
  // lstrip/rstrip swallow the spaces around <|end|>; <tool> is a non-special added token.
  EXPECT_THAT(t->Encode("hello  <|end|>  wo<tool>", true),
              ElementsAre(Id(*t, "hello"), 1000, Id(*t, "w"), Id(*t, "o"), 1001));
  EXPECT_THAT(t->Encode("hello wo", true), ElementsAre(Id(*t, "hello"), Id(*t, G + "wo")));
  const auto ids = t->Encode("hi \xF0\x9F\x98\x80<|end|>", false);
  EXPECT_EQ(t->Decode(ids), "hi \xF0\x9F\x98\x80<|end|>");
  EXPECT_EQ(t->Decode(ids, true), "hi \xF0\x9F\x98\x80");  // <|end|> is special, <tool> is not
  EXPECT_EQ(t->Decode(t->Encode("a<tool>", false), true), "a<tool>");
  EXPECT_EQ(t->eos_id(), 1000);
}

TEST(TokenizerTest, SpecialTokensCanBeEncodedAsPlainText) {
  auto t = Load(ByteLevelTokenizer(), {{"eos_token", "<|end|>"}});
  ASSERT_NE(t, nullptr);
  const auto ids = t->Encode("a<|end|>b<tool>", false, /*parse_special_tokens=*/false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1000), 0);  // <|end|> spelled out in bytes
  EXPECT_EQ(ids.back(), 1001);                             // <tool> is not special
  EXPECT_EQ(t->Decode(ids), "a<|end|>b<tool>");
  EXPECT_EQ(t->Encode("a<|end|>b", false, true)[1], 1000);
}

TEST(TokenizerTest, InvalidUtf8InputIsRepaired) {
  auto t = Load(ByteLevelTokenizer());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Decode(t->Encode("a\xFF"
                                "b",
                                false)),
            "a\xEF\xBF\xBD"
            "b");
}

TEST(TokenizerTest, ConcurrentEncodesAgree) {
  auto t = Load(ByteLevelTokenizer());
  ASSERT_NE(t, nullptr);
  const std::string text = "hello world, hello wo 123 hello\n\n  hello";
  const auto expected = t->Encode(text, false);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        if (t->Encode(text, false) != expected) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ---- errors name the file and the field ----

TEST(TokenizerErrorTest, MalformedFiles) {
  EXPECT_THAT(Tokenizer::FromJson("{not json", "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tokenizer.json")));
  json tok = SpTokenizer();
  tok["model"]["merges"].push_back("a zzz");
  EXPECT_THAT(Tokenizer::FromJson(tok.dump(), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.merges[7]")));
  tok = SpTokenizer();
  tok["model"]["vocab"]["a"] = "x";
  EXPECT_THAT(Tokenizer::FromJson(tok.dump(), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.vocab[\"a\"]")));
  tok = SpTokenizer();
  tok["normalizer"]["normalizers"][1]["type"] = "Precompiled";
  EXPECT_THAT(Tokenizer::FromJson(tok.dump(), "").status(),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("normalizer.normalizers[1]")));
  tok = SpTokenizer();
  tok["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_THAT(Tokenizer::FromJson(tok.dump(), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pre_tokenizer.pattern")));
  tok = SpTokenizer();
  tok.erase("model");
  EXPECT_THAT(Tokenizer::FromJson(tok.dump(), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tokenizer.json: model")));
  EXPECT_THAT(
      Tokenizer::FromJson(SpTokenizer().dump(), R"({"bos_token": "<nope>"})").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tokenizer_config.json: bos_token")));
  EXPECT_THAT(
      Tokenizer::FromJson(SpTokenizer().dump(), R"({"bos_token": 3})").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tokenizer_config.json: bos_token")));
  EXPECT_THAT(Tokenizer::FromJson(SpTokenizer().dump(), "", R"({"eos_token_id": "x"})").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("generation_config.json: eos_token_id")));
}

TEST(TokenizerErrorTest, MissingFileIsNotFound) {
  EXPECT_THAT(Tokenizer::FromFile("/nonexistent/model").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/model")));
}

}  // namespace
}  // namespace moe::tokenizer
