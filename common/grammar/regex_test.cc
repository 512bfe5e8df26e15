#include "common/grammar/regex.h"

#include <memory>
#include <string>

#include "common/grammar/testing/grammar_test_util.h"
#include "common/grammar/testing/test_vocabulary.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::grammar {
namespace {

using ::moe::common::testing::StatusIs;
using testing::ByteVocabulary;
using testing::CompileForTest;
using ::testing::HasSubstr;
using testing::Regex;
using testing::Schema;

class RegexTest : public ::testing::Test {
 protected:
  std::shared_ptr<const CompiledGrammar> Compile(const std::string& pattern) {
    auto g = CompileForTest(Regex(pattern), ByteVocabulary(), registry_);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : nullptr;
  }
  common::metrics::Registry registry_;
};

TEST_F(RegexTest, LiteralsClassesAndQuantifiers) {
  auto g = Compile("a+b*");
  EXPECT_TRUE(g->Matches("a"));
  EXPECT_TRUE(g->Matches("aabbb"));
  EXPECT_FALSE(g->Matches(""));
  EXPECT_FALSE(g->Matches("b"));
  EXPECT_TRUE(g->IsPrefix("aab"));

  g = Compile("^[0-9]{3}-[A-Z]{2,3}$");
  EXPECT_TRUE(g->Matches("123-AB"));
  EXPECT_TRUE(g->Matches("123-ABC"));
  EXPECT_FALSE(g->Matches("123-ABCD"));
  EXPECT_FALSE(g->Matches("12-AB"));

  g = Compile("(cat|dog)s?|(?:bird){2}");
  EXPECT_TRUE(g->Matches("cats"));
  EXPECT_TRUE(g->Matches("dog"));
  EXPECT_TRUE(g->Matches("birdbird"));
  EXPECT_FALSE(g->Matches("bird"));

  g = Compile(R"(\d+\.\d{2}\s\w)");
  EXPECT_TRUE(g->Matches("12.50 x"));
  EXPECT_FALSE(g->Matches("12.5 x"));
}

TEST_F(RegexTest, NegatedClassesAndDotAreWholeUtf8Characters) {
  auto g = Compile("[^a-c]");
  EXPECT_TRUE(g->Matches("d"));
  EXPECT_FALSE(g->Matches("b"));
  EXPECT_TRUE(g->Matches("\xc3\xa9"));    // é
  EXPECT_TRUE(g->IsPrefix("\xc3"));       // first byte of it
  EXPECT_FALSE(g->IsPrefix("\xff"));      // never valid UTF-8
  EXPECT_FALSE(g->IsPrefix("\xed\xa0"));  // a surrogate
  g = Compile(".{2}");
  EXPECT_TRUE(g->Matches("x\xe2\x82\xac"));  // x€
  EXPECT_FALSE(g->Matches("x\n"));
  g = Compile(R"([\u00e9\x41-\x42]\u{1F600})");
  EXPECT_TRUE(g->Matches("A\xf0\x9f\x98\x80"));
}

TEST_F(RegexTest, UnsupportedFeaturesAreNamed) {
  common::metrics::Registry r;
  auto fails = [&](const std::string& p, const std::string& what) {
    EXPECT_THAT(CompileForTest(Regex(p), ByteVocabulary(), r),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)))
        << p;
  };
  fails("(?=a)b", "lookaround");
  fails("(a)\\1", "backreferences");
  fails("\\bfoo", "word boundaries");
  fails("a^b", "'^' inside");
  fails("a$b", "'$' inside");
  fails("(?i)a", "inline flags");
  fails("a{2000}", "above 1000");
  fails("(ab", "missing ')'");
  fails("ab)", "unbalanced ')'");
  fails("[a-", "missing ']'");
  fails("*a", "quantifier without");
  fails("\\p{L}", "Unicode property");
}

TEST_F(RegexTest, PatternsInsideJsonStringsAreEscaped) {
  auto g = CompileForTest(Schema(R"({"type": "string", "pattern": "a\"b\\n?"})"), ByteVocabulary(),
                          registry_);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE((*g)->Matches(R"("a\"b")"));
  EXPECT_TRUE((*g)->Matches(R"("a\"b\n")"));
  EXPECT_FALSE((*g)->Matches("\"a\"b\""));
}

}  // namespace
}  // namespace moe::grammar
