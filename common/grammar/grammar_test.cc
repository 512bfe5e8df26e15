#include "common/grammar/grammar.h"

#include <string>

#include "common/grammar/automaton.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::grammar {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

std::string Encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

bool InSequences(const std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& seqs,
                 const std::string& bytes) {
  for (const auto& seq : seqs) {
    if (seq.size() != bytes.size()) continue;
    bool ok = true;
    for (size_t i = 0; i < seq.size() && ok; ++i) {
      const auto b = static_cast<uint8_t>(bytes[i]);
      ok = b >= seq[i].first && b <= seq[i].second;
    }
    if (ok) return true;
  }
  return false;
}

TEST(Utf8SequencesTest, CoverExactlyTheRangeWithoutSurrogates) {
  for (auto [lo, hi] : std::vector<std::pair<uint32_t, uint32_t>>{
           {0, 0x10FFFF}, {0x41, 0x7A}, {0x7F, 0x801}, {0xD000, 0xE100}, {0xFFF0, 0x10010}}) {
    const auto seqs = Utf8Sequences(lo, hi);
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x11000 ? 1 : 97)) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      EXPECT_EQ(InSequences(seqs, Encode(cp)), cp >= lo && cp <= hi)
          << std::hex << cp << " in [" << lo << ", " << hi << "]";
    }
  }
}

TEST(RangesTest, NegateAndNormalize) {
  EXPECT_EQ(NormalizeRanges({{5, 9}, {1, 3}, {4, 4}, {20, 30}}),
            (CodepointRanges{{1, 9}, {20, 30}}));
  EXPECT_EQ(NegateRanges({{0, 9}, {20, 0x10FFFF}}), (CodepointRanges{{10, 19}}));
}

TEST(GrammarTest, DebugStringShowsRulesAndValidateNeedsBodies) {
  Grammar g;
  const RuleId v = g.AddRule("value");
  EXPECT_THAT(g.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  g.SetBody(v, g.Alt({g.Literal("null"), g.Seq({g.Byte('['), g.Ref(v), g.Byte(']')})}));
  g.set_root(v);
  EXPECT_THAT(g.Validate(), IsOk());
  EXPECT_EQ(g.DebugString(), "root value ::= ((\"n\" \"u\" \"l\" \"l\") | (\"[\" value \"]\"))\n");
}

TEST(AutomatonTest, InlinesNonRecursiveRulesAndKeepsRecursiveOnes) {
  Grammar g;
  const RuleId root = g.AddRule("root");
  const RuleId digit = g.AddRule("digit");
  const RuleId list = g.AddRule("list");
  g.SetBody(digit, g.ByteRange('0', '9'));
  g.SetBody(list, g.Alt({g.Ref(digit), g.Seq({g.Byte('('), g.Ref(list), g.Byte(')')})}));
  g.SetBody(root, g.Ref(list));
  g.set_root(root);
  ASSERT_OK_AND_ASSIGN(auto a, Automaton::Compile(g));
  ASSERT_EQ(a->rules().size(), 2u);  // root and the recursive `list`; `digit` inlined
  EXPECT_EQ(a->rules()[1].name, "list");
  // Bytes split into classes: digits, '(', ')', the rest.
  EXPECT_EQ(a->num_classes(), 4);
}

TEST(AutomatonTest, RejectsLeftRecursionAndHugeGrammars) {
  Grammar g;
  const RuleId r = g.AddRule("r");
  g.SetBody(r, g.Alt({g.Seq({g.Ref(r), g.Byte('a')}), g.Byte('b')}));
  g.set_root(r);
  EXPECT_THAT(Automaton::Compile(g),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("left recursion")));

  Grammar big;
  const RuleId b = big.AddRule("b");
  big.SetBody(b, big.Repeat(big.ByteRange('a', 'z'), 0, 5000));
  big.set_root(b);
  EXPECT_THAT(Automaton::Compile(big, {.max_nfa_states = 1000, .max_dfa_states = 1000}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too complex")));
}

}  // namespace
}  // namespace moe::grammar
