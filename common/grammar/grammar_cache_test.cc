#include "common/grammar/grammar_cache.h"

#include <string>
#include <thread>
#include <vector>

#include "common/base/clock.h"
#include "common/grammar/testing/grammar_test_util.h"
#include "common/grammar/testing/test_vocabulary.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::grammar {
namespace {

using ::moe::common::testing::StatusIs;
using testing::ByteVocabulary;
using ::testing::HasSubstr;
using testing::Regex;
using testing::Schema;

class GrammarCacheTest : public ::testing::Test {
 protected:
  double Metric(const std::string& name) { return *registry_.Value(name); }
  common::metrics::Registry registry_;
  common::testing::FakeClock clock_;
};

TEST_F(GrammarCacheTest, TheSecondRequestWithASchemaCompilesNothing) {
  GrammarCache cache({}, ByteVocabulary(), registry_, clock_);
  const auto schema = Schema(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                                 "required": ["a"]})");
  ASSERT_OK_AND_ASSIGN(auto first, cache.Get(schema));
  EXPECT_EQ(Metric("moe_grammar_compilations_total"), 1);
  EXPECT_EQ(Metric("moe_grammar_cache_hits_total"), 0);
  // The first step's mask was computed with the grammar.
  EXPECT_EQ(Metric("moe_grammar_masks_computed_total"), 1);
  ASSERT_OK_AND_ASSIGN(auto second, cache.Get(schema));
  EXPECT_EQ(second.get(), first.get());
  EXPECT_EQ(Metric("moe_grammar_compilations_total"), 1);
  EXPECT_EQ(Metric("moe_grammar_cache_hits_total"), 1);
  GrammarMatcher m(second);
  m.NextMask();
  EXPECT_EQ(Metric("moe_grammar_masks_computed_total"), 1);
  EXPECT_EQ(Metric("moe_grammar_mask_cache_hits_total"), 1);
}

// A burst of requests with one new schema compiles it once: the threads that miss while it is
// being compiled wait for that compile and share its grammar (a schema with many properties, so
// that the compile takes long enough for the threads to overlap).
TEST_F(GrammarCacheTest, ConcurrentMissesOnOneSchemaCompileItOnce) {
  GrammarCache cache({}, ByteVocabulary(), registry_, clock_);
  std::string properties, required;
  for (int i = 0; i < 40; ++i) {
    properties += (i ? ", " : "") + std::string("\"p") + std::to_string(i) +
                  "\": {\"type\": \"string\", \"maxLength\": 12}";
    required += (i ? ", " : "") + std::string("\"p") + std::to_string(i) + "\"";
  }
  const auto schema = Schema(R"({"type": "object", "properties": {)" + properties +
                             R"(}, "required": [)" + required + "]}");
  constexpr int kThreads = 8;
  std::vector<const CompiledGrammar*> got(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto g = cache.Get(schema);
      if (g.ok()) got[t] = g->get();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_NE(got[t], nullptr) << t;
    EXPECT_EQ(got[t], got[0]) << t;
  }
  EXPECT_EQ(Metric("moe_grammar_compilations_total"), 1);
  EXPECT_EQ(Metric("moe_grammar_cache_hits_total"), kThreads - 1);
}

TEST_F(GrammarCacheTest, BadConstraintsAreCachedErrors) {
  GrammarCache cache({}, ByteVocabulary(), registry_, clock_);
  const auto bad = Schema(R"({"type": "object", "patternProperties": {}})");
  EXPECT_THAT(cache.Get(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("keyword 'patternProperties'")));
  EXPECT_THAT(cache.Get(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Metric("moe_grammar_compilations_total"), 1);
}

TEST_F(GrammarCacheTest, KeepsAtMostMaxGrammarsAndRefusesHugeSpecs) {
  GrammarCache cache({.max_grammars = 2, .max_spec_bytes = 64}, ByteVocabulary(), registry_,
                     clock_);
  ASSERT_OK_AND_ASSIGN(auto a, cache.Get(Regex("a")));
  ASSERT_OK_AND_ASSIGN(auto b, cache.Get(Regex("b")));
  ASSERT_OK_AND_ASSIGN(auto a2, cache.Get(Regex("a")));  // a is now the most recent
  ASSERT_OK_AND_ASSIGN(auto c, cache.Get(Regex("c")));   // evicts b
  EXPECT_EQ(cache.size(), 2);
  EXPECT_EQ(a2.get(), a.get());
  ASSERT_OK_AND_ASSIGN(auto b2, cache.Get(Regex("b")));
  EXPECT_NE(b2.get(), b.get());
  EXPECT_TRUE(b->Matches("b"));  // an evicted grammar still works for its holders
  EXPECT_EQ(Metric("moe_grammar_compilations_total"), 4);
  EXPECT_THAT(cache.Get(Regex(std::string(65, 'x'))),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("larger than 64 bytes")));
}

}  // namespace
}  // namespace moe::grammar
