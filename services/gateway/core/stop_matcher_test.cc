#include "services/gateway/core/stop_matcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moe::gateway {
namespace {

// Feeds pieces; renders "released|released|...[STOP]" for one-line assertions.
std::string Feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) {
    StopMatcher::Result r = m.Add(p);
    out += r.text + "|";
    if (r.stopped) return out + "[STOP]";
  }
  return out + "flush:" + m.Flush();
}

TEST(StopMatcherTest, PassesTextThroughWithoutStops) {
  StopMatcher m({}, false);
  EXPECT_EQ(Feed(m, {"ab", "cd"}), "ab|cd|flush:");
}

TEST(StopMatcherTest, StopsWithinOnePiece) {
  StopMatcher m({"END"}, false);
  EXPECT_EQ(Feed(m, {"abENDcd"}), "ab|[STOP]");
  EXPECT_EQ(m.matched(), "END");
}

TEST(StopMatcherTest, HoldsBackAPossiblePrefixAcrossPieces) {
  StopMatcher m({"END"}, false);
  EXPECT_EQ(Feed(m, {"abE", "N", "Dxyz"}), "ab|||[STOP]");
}

TEST(StopMatcherTest, ReleasesHeldTextWhenThePrefixBreaks) {
  StopMatcher m({"END"}, false);
  EXPECT_EQ(Feed(m, {"abEN", "x"}), "ab|ENx|flush:");
}

TEST(StopMatcherTest, FlushReleasesATrailingPartialMatch) {
  StopMatcher m({"END"}, false);
  EXPECT_EQ(Feed(m, {"abEN"}), "ab|flush:EN");
}

TEST(StopMatcherTest, IncludesTheStopStringWhenAsked) {
  StopMatcher m({"\n\n"}, true);
  EXPECT_EQ(Feed(m, {"a\n", "\nb"}), "a|\n\n|[STOP]");
}

TEST(StopMatcherTest, EarliestOfSeveralStopsWins) {
  StopMatcher m({"xyz", "b"}, false);
  EXPECT_EQ(Feed(m, {"axyzb"}), "a|[STOP]");
  EXPECT_EQ(m.matched(), "xyz");
}

TEST(StopMatcherTest, NothingAfterAStop) {
  StopMatcher m({"!"}, false);
  EXPECT_TRUE(m.Add("hi!").stopped);
  EXPECT_EQ(m.Add("more").text, "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, HoldsOnlyTheLongestPossiblePrefix) {
  StopMatcher m({"aab"}, false);
  StopMatcher::Result r = m.Add("xaa");
  EXPECT_EQ(r.text, "x");
  EXPECT_EQ(m.held_bytes(), 2u);
  r = m.Add("a");  // "aaa": "aa" may still start "aab"
  EXPECT_EQ(r.text, "a");
  EXPECT_TRUE(m.Add("b").stopped);
}

TEST(StopMatcherTest, MultiByteCharactersStayWhole) {
  StopMatcher m({"\xC3\xA9t\xC3\xA9"}, false);   // "été"
  StopMatcher::Result r = m.Add("caf\xC3\xA9");  // "café": "é" may start "été"
  EXPECT_EQ(r.text, "caf");
  r = m.Add("!");
  EXPECT_EQ(r.text, "\xC3\xA9!");
}

}  // namespace
}  // namespace moe::gateway
