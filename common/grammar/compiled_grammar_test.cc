#include "common/grammar/compiled_grammar.h"

#include <memory>
#include <string>
#include <vector>

#include "common/grammar/testing/grammar_test_util.h"
#include "common/grammar/testing/test_vocabulary.h"
#include "common/testing/status_matchers.h"
#include "common/tokenizer/preset_tokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::grammar {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using testing::ByteId;
using testing::ByteVocabulary;
using testing::ByteVocabularyTexts;
using testing::CompileForTest;
using testing::kEndId;
using testing::Regex;
using testing::Schema;

const std::vector<std::string> kJsonPieces = {
    "{\"", "\":", "\",",  "\"}",      "name", "age",       "tags", "\":\"",
    "12",  " ",   "  ",   "[\"",      "\"]",  "\",\"",     "true", "null",
    "}",   "x\"", "a\"b", "\xc3\xa9", "\xc3", "ab\xe2\x82"};

constexpr const char* kPersonSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
    "required": ["name", "age"], "additionalProperties": false})";

// The mask a brute force gives: every text token t with prefix+t a prefix of the language, and
// the end token when prefix is complete.
std::vector<int32_t> BruteForce(const CompiledGrammar& g, const std::string& prefix) {
  std::vector<int32_t> out;
  const TokenVocabulary& v = g.vocabulary();
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.IsEos(id) ? g.Matches(prefix) : (v.is_text(id) && g.IsPrefix(prefix + v.text(id)))) {
      out.push_back(id);
    }
  }
  return out;
}

std::vector<int32_t> Bits(const TokenBitmask& m) {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < static_cast<int32_t>(m.words.size() * 32); ++id) {
    if (m.allowed(id)) out.push_back(id);
  }
  return out;
}

TEST(CompiledGrammarTest, MasksEqualTheBruteForceAlongAnOutput) {
  common::metrics::Registry registry;
  ASSERT_OK_AND_ASSIGN(
      auto g, CompileForTest(Schema(kPersonSchema), ByteVocabulary(kJsonPieces), registry));
  const std::string output =
      std::string(R"({"name":"a\"b\u00e9", "age":12,"tags":["x",")") + "\xc3\xa9\"]}";
  GrammarMatcher m(g);
  std::string prefix;
  for (char c : output) {
    ASSERT_EQ(Bits(m.NextMask()), BruteForce(*g, prefix)) << "after " << prefix;
    EXPECT_EQ(m.NextMask().num_allowed, static_cast<int64_t>(BruteForce(*g, prefix).size()));
    ASSERT_THAT(m.Advance(ByteId(static_cast<uint8_t>(c))), IsOk()) << prefix << c;
    prefix += c;
  }
  EXPECT_EQ(Bits(m.NextMask()), std::vector<int32_t>{kEndId});
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.terminated());
  ASSERT_THAT(m.Advance(kEndId), IsOk());
  EXPECT_TRUE(m.ended());
  EXPECT_EQ(m.NextMask().num_allowed, 0);
}

TEST(CompiledGrammarTest, RejectsTokensOutsideTheMaskAndKeepsItsPlace) {
  common::metrics::Registry registry;
  ASSERT_OK_AND_ASSIGN(auto g, CompileForTest(Regex("ab|ac"), ByteVocabulary({"ab"}), registry));
  GrammarMatcher m(g);
  EXPECT_THAT(m.Advance(kEndId), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(m.Advance(ByteId('b')), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(m.Advance(ByteId('a')), IsOk());
  EXPECT_FALSE(m.accepting());
  EXPECT_THAT(m.Advance(257), StatusIs(absl::StatusCode::kInvalidArgument));  // "ab" after "a"
  ASSERT_THAT(m.Advance(ByteId('c')), IsOk());
  EXPECT_TRUE(m.terminated());
}

TEST(CompiledGrammarTest, MasksAreComputedOncePerStateAndShared) {
  common::metrics::Registry registry;
  ASSERT_OK_AND_ASSIGN(
      auto g, CompileForTest(Schema(kPersonSchema), ByteVocabulary(kJsonPieces), registry));
  auto run = [&] {
    GrammarMatcher m(g);
    for (char c : std::string(R"({"name":"abc","age":7})")) {
      m.NextMask();
      ASSERT_THAT(m.Advance(ByteId(static_cast<uint8_t>(c))), IsOk());
    }
  };
  run();
  const double computed = *registry.Value("moe_grammar_masks_computed_total");
  EXPECT_GT(computed, 10);
  EXPECT_EQ(*registry.Value("moe_grammar_mask_cache_hits_total"), 0);
  run();  // the same states again: every mask from the cache
  EXPECT_EQ(*registry.Value("moe_grammar_masks_computed_total"), computed);
  EXPECT_EQ(*registry.Value("moe_grammar_mask_cache_hits_total"), 22);
}

TEST(CompiledGrammarTest, SurvivesStateTableResets) {
  common::metrics::Registry registry;
  CompiledGrammarOptions options;
  options.states.max_configs = 16;  // resets many times along the way
  ASSERT_OK_AND_ASSIGN(auto g, CompileForTest({.kind = generation::ConstraintKind::kJsonObject},
                                              ByteVocabulary(kJsonPieces), registry, options));
  const std::string output = R"({"a":[1,{"b":[true,null,"xyz"]},-2.5e3],"c":{}})";
  GrammarMatcher m(g);
  std::string prefix;
  for (char c : output) {
    ASSERT_EQ(Bits(m.NextMask()), BruteForce(*g, prefix)) << prefix;
    ASSERT_THAT(m.Advance(ByteId(static_cast<uint8_t>(c))), IsOk()) << prefix << c;
    prefix += c;
  }
  EXPECT_TRUE(m.terminated());
}

TEST(CompiledGrammarTest, NestingIsBoundedByTheStackDepth) {
  common::metrics::Registry registry;
  CompiledGrammarOptions options;
  options.states.max_stack_depth = 8;
  ASSERT_OK_AND_ASSIGN(auto g, CompileForTest({.kind = generation::ConstraintKind::kJsonObject},
                                              ByteVocabulary(), registry, options));
  GrammarMatcher m(g);
  ASSERT_THAT(m.Advance(ByteId('{')), IsOk());
  for (char c : std::string(R"("a":)")) ASSERT_THAT(m.Advance(ByteId(c)), IsOk());
  int depth = 0;
  while (m.NextMask().allowed(ByteId('[')) && depth < 100) {
    ASSERT_THAT(m.Advance(ByteId('[')), IsOk());
    ++depth;
  }
  EXPECT_GT(depth, 1);
  EXPECT_LT(depth, 8);
}

// SentencePiece-style rendering: "▁yes" renders " yes", but as the first output token the
// decoder's Strip drops that space.
TEST(CompiledGrammarTest, FirstTokenRendersWithoutTheStrippedSpace) {
  common::metrics::Registry registry;
  std::vector<std::string> texts = ByteVocabularyTexts({" yes", "yes", " no", "es"});
  auto vocab = TokenVocabulary::FromTexts(texts, {kEndId}, {}, " ", 1);
  const generation::Constraint choice{.kind = generation::ConstraintKind::kChoice,
                                      .choices = {"yes", "no way"}};
  ASSERT_OK_AND_ASSIGN(auto g, CompileForTest(choice, vocab, registry));
  GrammarMatcher m(g);
  const TokenBitmask& first = m.NextMask();
  EXPECT_TRUE(first.allowed(257));  // " yes" -> "yes"
  EXPECT_TRUE(first.allowed(258));
  EXPECT_TRUE(first.allowed(259));          // " no" -> "no"
  EXPECT_TRUE(first.allowed(ByteId(' ')));  // the strip swallows it whole: renders nothing
  EXPECT_FALSE(first.allowed(260));
  ASSERT_THAT(m.Advance(259), IsOk());
  // Now in plain mode: " way" needs its space.
  EXPECT_TRUE(m.NextMask().allowed(ByteId(' ')));
  EXPECT_FALSE(m.NextMask().allowed(ByteId('w')));
  GrammarMatcher y(g);
  ASSERT_THAT(y.Advance(257), IsOk());
  EXPECT_TRUE(y.terminated());
}

// With the preset (Mistral-style byte-fallback) tokenizer: following the mask token by token
// (longest allowed token first) decodes to exactly the constrained text.
TEST(CompiledGrammarTest, RealTokenizerOutputsDecodeToTheConstrainedText) {
  ASSERT_OK_AND_ASSIGN(auto files, tokenizer::BuildPresetTokenizer(512, "mixtral"));
  ASSERT_OK_AND_ASSIGN(
      auto tok, tokenizer::Tokenizer::FromJson(files.tokenizer_json, files.tokenizer_config_json));
  ASSERT_OK_AND_ASSIGN(auto vocab, TokenVocabulary::FromTokenizer(*tok, 520, {}));
  EXPECT_TRUE(vocab->position_dependent());
  EXPECT_FALSE(vocab->is_text(515));  // past the tokenizer
  common::metrics::Registry registry;
  for (const std::string& target :
       {std::string("the cat sat"), std::string(" leading space"), std::string("{\"k\": [1, 2]}"),
        std::string("caf\xc3\xa9 \xe2\x82\xac")}) {
    ASSERT_OK_AND_ASSIGN(
        auto g, CompileForTest({.kind = generation::ConstraintKind::kChoice, .choices = {target}},
                               vocab, registry));
    GrammarMatcher m(g);
    std::vector<int32_t> ids;
    while (!m.terminated()) {
      const TokenBitmask& mask = m.NextMask();
      ASSERT_GT(mask.num_allowed, 0) << target;
      int32_t best = -1;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if (!mask.allowed(id) || vocab->IsEos(id)) continue;
        if (best < 0 || vocab->text(id).size() > vocab->text(best).size()) best = id;
      }
      ASSERT_GE(best, 0);
      ASSERT_THAT(m.Advance(best), IsOk());
      ids.push_back(best);
    }
    EXPECT_EQ(tok->Decode(ids, /*skip_special_tokens=*/true), target);
    EXPECT_TRUE(m.NextMask().allowed(tok->eos_id()));
  }
}

}  // namespace
}  // namespace moe::grammar
