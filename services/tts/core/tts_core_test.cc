#include "services/tts/core/tts_core.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/audio/pcm.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/tts/testing/fake_synthesizer.h"

namespace moe::tts {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class TtsCoreTest : public ::testing::Test {
 protected:
  void Make(TtsCoreOptions o = {}) {
    o.default_voice = "a";
    core_ = std::make_unique<TtsCore>(o, synth_, clock_, registry_);
  }
  ChunkSink Collect() {
    return [this](AudioChunk c) {
      chunks_.push_back(std::move(c));
      return true;
    };
  }
  // The chunks as "segment:bytes[*]" (* = end of segment), with the text of first chunks.
  std::string Render() const {
    std::vector<std::string> out;
    for (const AudioChunk& c : chunks_) {
      out.push_back(absl::StrCat(c.segment_index, ":", c.pcm_s16le.size(),
                                 c.end_of_segment ? "*" : "",
                                 c.text.empty() ? "" : "'" + c.text + "'"));
    }
    return absl::StrJoin(out, " ");
  }

  testing::FakeSynthesizer synth_;
  common::testing::FakeClock clock_;
  common::metrics::Registry registry_;
  std::unique_ptr<TtsCore> core_;
  std::vector<AudioChunk> chunks_;
};

TEST_F(TtsCoreTest, SpeaksSentencesAsTheyCompleteInChunks) {
  Make({.chunk = absl::Milliseconds(50)});
  auto s = core_->Open({});
  ASSERT_THAT(s.status(), IsOk());
  ASSERT_THAT((*s)->Text("Hi. Y", false, Collect()), IsOk());
  // "Hi." is 3 bytes = 30 ms of audio at 16 kHz = 960 bytes: one chunk.
  EXPECT_EQ(Render(), "0:960*'Hi.'");
  ASSERT_THAT((*s)->Text("es, sure", false, Collect()), IsOk());
  ASSERT_THAT((*s)->Finish(Collect()), IsOk());
  // "Yes, sure" = 90 ms = 2880 bytes: chunks of 50 ms (1600 bytes).
  EXPECT_EQ(Render(), "0:960*'Hi.' 1:1600'Yes, sure' 1:1280*");
  EXPECT_THAT(synth_.synthesized(), ElementsAre("a:Hi.", "a:Yes, sure"));
  EXPECT_EQ(registry_.Value("moe_tts_segments_total").value_or(-1), 2);
  EXPECT_EQ(registry_.Value("moe_tts_first_chunk_seconds").value_or(-1), 1);
  EXPECT_NEAR(registry_.Value("moe_tts_audio_seconds_total").value_or(-1), 0.12, 1e-9);
}

TEST_F(TtsCoreTest, ResamplesToTheStreamsRate) {
  Make();
  auto s = core_->Open({.voice = "b", .sample_rate_hz = 24000, .speed = 1.5});
  ASSERT_THAT(s.status(), IsOk());
  ASSERT_THAT((*s)->Text("abcdefghij", true, Collect()), IsOk());
  size_t bytes = 0;
  for (const AudioChunk& c : chunks_) {
    EXPECT_EQ(c.sample_rate_hz, 24000);
    bytes += c.pcm_s16le.size();
  }
  EXPECT_NEAR(static_cast<double>(bytes) / 2, 2400, 8);  // 100 ms at 24 kHz
}

TEST_F(TtsCoreTest, BadConfigAndTooMuchTextAreInvalid) {
  Make({.max_streams = 1, .max_stream_text_bytes = 10});
  EXPECT_THAT(core_->Open({.voice = "zz"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("voice")));
  EXPECT_THAT(core_->Open({.sample_rate_hz = 4000}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sample_rate_hz")));
  EXPECT_THAT(core_->Open({.speed = 9}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("speed")));
  auto s = core_->Open({});
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_THAT(core_->Open({}).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT((*s)->Text("0123456789x", false, Collect()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limit")));
  s->reset();
  EXPECT_THAT(core_->Open({}).status(), IsOk());
}

TEST_F(TtsCoreTest, ASinkThatStopsCancels) {
  Make({.chunk = absl::Milliseconds(10)});
  auto s = core_->Open({});
  int calls = 0;
  EXPECT_THAT((*s)->Text("a long segment", true, [&](AudioChunk) { return ++calls < 2; }),
              StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace moe::tts
