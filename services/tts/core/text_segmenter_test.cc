#include "services/tts/core/text_segmenter.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace moe::tts {
namespace {

// Feeds `pieces` one by one, then flushes; renders the segments as "[a] [b]" and, with
// `marks`, which piece completed each ("1:[a]").
std::string Segments(const std::vector<std::string>& pieces, SegmenterOptions o = {}) {
  TextSegmenter s(o);
  std::vector<std::string> out, all;
  for (size_t i = 0; i < pieces.size(); ++i) {
    s.Append(pieces[i], &out);
    for (const std::string& seg : out) all.push_back(std::to_string(i) + ":[" + seg + "]");
    out.clear();
  }
  s.Flush(&out);
  for (const std::string& seg : out) all.push_back("end:[" + seg + "]");
  return absl::StrJoin(all, " ");
}

TEST(TextSegmenterTest, SpeaksEachSentenceOnceItsEndIsSeen) {
  EXPECT_EQ(Segments({"Hello the", "re. How are", " you? Fine", "!", " Bye"}),
            "1:[Hello there.] 2:[How are you?] 4:[Fine!] end:[Bye]");
}

TEST(TextSegmenterTest, APeriodAtTheEndWaitsForTheNextCharacter) {
  EXPECT_EQ(Segments({"It costs 3.", "5 euros. ", "Ok"}), "1:[It costs 3.5 euros.] end:[Ok]");
  EXPECT_EQ(Segments({"She said \"no.\" Then", " left"}), "0:[She said \"no.\"] end:[Then left]");
}

TEST(TextSegmenterTest, TheFirstSegmentEndsEarlyAtAClauseOrTheCap) {
  // A clause boundary after first_min_chars cuts the first segment; later ones wait for the
  // sentence.
  EXPECT_EQ(Segments({"Well, after a long day at work, I went home, and slept. Then"}),
            "0:[Well, after a long day at work,] 0:[I went home, and slept.] end:[Then]");
  // No boundary at all: the cap, at the last space before it.
  EXPECT_EQ(Segments({"one two three four five six seven eight nine ten eleven"},
                     {.first_min_chars = 4, .first_max_chars = 20, .max_chars = 30}),
            "0:[one two three four] 0:[five six seven eight nine ten] end:[eleven]");
}

TEST(TextSegmenterTest, NewlinesEndSegmentsAndBlankOnesAreDropped) {
  EXPECT_EQ(Segments({"Title\n\n\nBody text", "  \n"}), "0:[Title] 1:[Body text]");
  EXPECT_EQ(Segments({"   ", "\n"}), "");
}

TEST(TextSegmenterTest, CutsNeverSplitACharacter) {
  // 30 bytes of 2-byte characters and no space: the cap falls inside one.
  const std::string e = "\xc3\xa9";
  std::string word;
  for (int i = 0; i < 15; ++i) word += e;
  const std::string got =
      Segments({word.substr(0, 7), word.substr(7)}, {.first_min_chars = 4, .first_max_chars = 9});
  EXPECT_EQ(got, "1:[" + word.substr(0, 8) + "] end:[" + word.substr(8) + "]");
}

}  // namespace
}  // namespace moe::tts
