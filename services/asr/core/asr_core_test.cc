#include "services/asr/core/asr_core.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/audio/pcm.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/asr/core/endpointer.h"
#include "services/asr/core/stability.h"
#include "services/asr/testing/fake_decoder.h"

namespace moe::asr {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

// `ms` of audio at 16 kHz, every sample `level` (see FakeDecoder).
std::string Tone(int level, int ms, int rate = 16000) {
  return audio::PcmToBytes(
      std::vector<int16_t>(static_cast<size_t>(rate * ms / 1000), static_cast<int16_t>(level)));
}

std::string Render(const std::vector<AsrEvent>& events) {
  std::vector<std::string> out;
  for (const AsrEvent& e : events) {
    switch (e.type) {
      case AsrEvent::Type::kSpeechStarted:
        out.push_back(absl::StrCat("started@", e.start_ms));
        break;
      case AsrEvent::Type::kSpeechStopped:
        out.push_back(absl::StrCat("stopped@", e.end_ms));
        break;
      case AsrEvent::Type::kPartial:
        out.push_back(absl::StrCat("partial(", e.text, "|", e.text.substr(0, e.stable_bytes), ")"));
        break;
      case AsrEvent::Type::kFinal:
        out.push_back(absl::StrCat("final#", e.utterance_index, "(", e.text, ")@", e.start_ms, "-",
                                   e.end_ms));
        break;
    }
  }
  return absl::StrJoin(out, " ");
}

TEST(EndpointerTest, EndsSilenceAfterTheSpeechAndBridgesShortPauses) {
  Endpointer ep({.silence_ms = 300, .onset_ms = 100, .hangover_ms = 200});
  EXPECT_EQ(ep.Update(100, false), Endpointer::Event::kNone);
  EXPECT_EQ(ep.Update(500, true), Endpointer::Event::kSpeechStarted);
  EXPECT_EQ(ep.speech_start_ms(), 400);
  EXPECT_EQ(ep.Update(1000, false), Endpointer::Event::kNone);  // speech ended at 800
  EXPECT_EQ(ep.Update(1050, true), Endpointer::Event::kNone);   // a pause of 250 ms: go on
  EXPECT_EQ(ep.Update(1500, false), Endpointer::Event::kNone);  // ended at 1300
  EXPECT_EQ(ep.Update(1590, false), Endpointer::Event::kNone);
  EXPECT_EQ(ep.Update(1600, false), Endpointer::Event::kEndpoint);
  EXPECT_EQ(ep.speech_end_ms(), 1300);
}

TEST(EndpointerTest, CutsLongUtterancesAndManualModeWaits) {
  Endpointer ep({.silence_ms = 300,
                 .onset_ms = 0,
                 .hangover_ms = 0,
                 .max_utterance_ms = 1000,
                 .manual = true});
  EXPECT_EQ(ep.Update(0, true), Endpointer::Event::kSpeechStarted);
  EXPECT_EQ(ep.Update(500, false), Endpointer::Event::kNone);
  EXPECT_EQ(ep.Update(990, false), Endpointer::Event::kNone);  // manual: silence does not end it
  EXPECT_EQ(ep.Update(1000, false), Endpointer::Event::kEndpoint);
}

TEST(StabilityTest, AWordIsStableOnceItSurvivedTheWindow) {
  StabilityTracker t(300);
  EXPECT_EQ(t.Observe(100, SplitWords("he")), 0);
  EXPECT_EQ(t.Observe(200, SplitWords("he was")), 0);
  EXPECT_EQ(t.Observe(400, SplitWords("he was not")), 1);  // "he" since 100; "was" not yet
  EXPECT_EQ(t.Observe(500, SplitWords("he was not an")), 2);
  EXPECT_EQ(t.Observe(600, SplitWords("he wants not an")), 1);  // a revision
  EXPECT_EQ(PrefixBytes(SplitWords("he was not"), 2), 6u);
}

class AsrCoreTest : public ::testing::Test {
 protected:
  void Make(AsrCoreOptions options = {}, int decoders = 2) {
    auto pool = DecoderPool::Create(decoders, [this]() -> absl::StatusOr<std::unique_ptr<Decoder>> {
      auto d = std::make_unique<testing::FakeDecoder>();
      made_.push_back(d.get());
      return std::unique_ptr<Decoder>(std::move(d));
    });
    ASSERT_THAT(pool.status(), IsOk());
    core_ = std::make_unique<AsrCore>(options, *std::move(pool), clock_, registry_);
  }
  std::string Run(AsrStream& s, const std::vector<std::string>& chunks) {
    std::vector<AsrEvent> events;
    for (const std::string& c : chunks) EXPECT_THAT(s.Audio(c, &events), IsOk());
    EXPECT_THAT(s.Finish(&events), IsOk());
    return Render(events);
  }

  common::testing::FakeClock clock_;
  common::metrics::Registry registry_;
  std::vector<testing::FakeDecoder*> made_;
  std::unique_ptr<AsrCore> core_;
};

TEST_F(AsrCoreTest, EndpointsUtterancesOnSilence) {
  Make();
  auto s = core_->Open({.sample_rate_hz = 16000});
  ASSERT_THAT(s.status(), IsOk());
  // Speech 200-600 ms, a pause of 500 ms (> 300 + hang-over 100), speech 1100-1300, the end.
  EXPECT_EQ(
      Run(**s, {Tone(0, 200), Tone(2000, 200), Tone(3000, 200), Tone(0, 500), Tone(4000, 200)}),
      "started@220 stopped@600 final#0(w2 w3)@220-600 started@1120 stopped@1300 "
      "final#1(w4)@1120-1300");
  EXPECT_EQ(registry_.Value("moe_asr_utterances_total").value_or(-1), 2);
  EXPECT_EQ(registry_.Value("moe_asr_finalize_seconds").value_or(-1), 2);
  EXPECT_EQ(registry_.Value("moe_asr_audio_seconds_total").value_or(-1), 1.3);
}

TEST_F(AsrCoreTest, PartialsCarryTheirStablePrefix) {
  Make({.partial_interval = absl::Milliseconds(100), .stability_window = absl::Milliseconds(200)});
  auto s = core_->Open({.sample_rate_hz = 16000, .partial_results = true});
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_EQ(Run(**s, {Tone(1000, 100), Tone(2000, 100), Tone(3000, 300), Tone(0, 600)}),
            "started@20 partial(w1 w2|) partial(w1 w2 w3|) partial(w1 w2 w3|w1 w2) stopped@500 "
            "final#0(w1 w2 w3)@20-500");
}

TEST_F(AsrCoreTest, ResamplesOtherRates) {
  Make();
  auto s = core_->Open({.sample_rate_hz = 48000});
  ASSERT_THAT(s.status(), IsOk());
  // The filter rings at the tone's edges (so the fake hears a word per level it passes), but the
  // timing and the tone come through.
  const std::string events =
      Run(**s, {Tone(0, 100, 48000), Tone(5500, 400, 48000), Tone(0, 600, 48000)});
  EXPECT_THAT(events, ::testing::StartsWith("started@120 stopped@5"));
  EXPECT_THAT(events, HasSubstr("w5"));
  EXPECT_NEAR(made_[1]->processed_samples() + made_[0]->processed_samples(), 17600, 320);
}

TEST_F(AsrCoreTest, ManualEndpointingWaitsForFinalize) {
  Make();
  auto s = core_->Open({.sample_rate_hz = 16000, .manual_endpointing = true});
  ASSERT_THAT(s.status(), IsOk());
  std::vector<AsrEvent> events;
  ASSERT_THAT((*s)->Audio(Tone(2000, 200) + Tone(0, 1000), &events), IsOk());
  EXPECT_EQ(Render(events), "started@20");
  ASSERT_THAT((*s)->Finalize(&events), IsOk());
  EXPECT_EQ(Render(events), "started@20 stopped@200 final#0(w2)@20-200");
  // FINALIZE with nothing said gives an empty final; DISCARD drops what was said.
  events.clear();
  ASSERT_THAT((*s)->Finalize(&events), IsOk());
  EXPECT_EQ(Render(events), "final#1()@1200-1200");
  events.clear();
  ASSERT_THAT((*s)->Audio(Tone(3000, 100), &events), IsOk());
  ASSERT_THAT((*s)->Discard(&events), IsOk());
  ASSERT_THAT((*s)->Finish(&events), IsOk());
  EXPECT_EQ(Render(events), "started@1220");
}

TEST_F(AsrCoreTest, LongUtterancesAreCut) {
  Make({.max_utterance = absl::Seconds(1)});
  auto s = core_->Open({.sample_rate_hz = 16000});
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_EQ(Run(**s, {Tone(7000, 2500)}),
            "started@20 stopped@1020 final#0(w7)@20-1020 started@1040 stopped@2040 "
            "final#1(w7)@1040-2040 started@2060 stopped@2500 final#2(w7)@2060-2500");
}

TEST_F(AsrCoreTest, BadAudioIsAnErrorAndTheStreamStops) {
  Make({.max_chunk_bytes = 3200});
  auto s = core_->Open({.sample_rate_hz = 16000});
  ASSERT_THAT(s.status(), IsOk());
  std::vector<AsrEvent> events;
  EXPECT_THAT((*s)->Audio("abc", &events),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3 bytes")));
  EXPECT_THAT((*s)->Audio("ab", &events), StatusIs(absl::StatusCode::kFailedPrecondition));
  auto t = core_->Open({.sample_rate_hz = 16000});
  EXPECT_THAT((*t)->Audio(Tone(0, 101), &events),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("over the limit")));
  EXPECT_EQ(registry_.Value("moe_asr_rejected_streams_total", {{"reason", "invalid"}}).value_or(-1),
            2);
}

TEST_F(AsrCoreTest, AStreamPastItsAudioLimitEnds) {
  Make({.max_stream_audio = absl::Seconds(2)});
  auto s = core_->Open({.sample_rate_hz = 16000});
  ASSERT_THAT(s.status(), IsOk());
  std::vector<AsrEvent> events;
  absl::Status status;
  int chunks = 0;
  // A 10-minute stream in 100 ms chunks: refused once it passes 2 s, with bounded work.
  while (status.ok() && chunks < 6000) {
    status = (*s)->Audio(Tone(0, 100), &events);
    ++chunks;
  }
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("2s")));
  EXPECT_EQ(chunks, 21);
}

TEST_F(AsrCoreTest, ConfigIsCheckedAndDecodersAreBounded) {
  Make({}, 1);
  EXPECT_THAT(core_->Open({.sample_rate_hz = 4000}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sample_rate_hz")));
  EXPECT_THAT(core_->Open({.sample_rate_hz = 16000, .language = "fr"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("language")));
  EXPECT_THAT(
      core_->Open({.sample_rate_hz = 16000, .spec = {.mode = RecognitionMode::kGrammar}}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grammar_jsgf")));
  EXPECT_THAT(core_
                  ->Open({.sample_rate_hz = 16000,
                          .spec = {.mode = RecognitionMode::kGrammar, .grammar_jsgf = "bad"}})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A JSGF import would make pocketsphinx open a file the caller names: refused before decoding.
  for (const char* jsgf : {"#JSGF V1.0;\ngrammar g;\nimport <etc.passwd>;\npublic <a> = yes;",
                           "#JSGF V1.0; grammar g; /* c */ import<tmp.x.*>; public <a> = yes;"}) {
    EXPECT_THAT(core_
                    ->Open({.sample_rate_hz = 16000,
                            .spec = {.mode = RecognitionMode::kGrammar, .grammar_jsgf = jsgf}})
                    .status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("import")))
        << jsgf;
  }
  auto held = core_->Open({.sample_rate_hz = 16000});
  ASSERT_THAT(held.status(), IsOk());
  EXPECT_THAT(core_->Open({.sample_rate_hz = 16000}).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  held->reset();
  EXPECT_THAT(core_->Open({.sample_rate_hz = 16000}).status(), IsOk());
  EXPECT_EQ(registry_.Value("moe_asr_rejected_streams_total", {{"reason", "busy"}}).value_or(-1),
            1);
}

TEST_F(AsrCoreTest, RealtimeFactorIsDecodingOverAudio) {
  Make();
  auto s = core_->Open({.sample_rate_hz = 16000});
  std::vector<AsrEvent> events;
  ASSERT_THAT((*s)->Audio(Tone(0, 1000), &events), IsOk());
  // The fake clock does not move while decoding: the factor is 0 (and defined).
  EXPECT_EQ(registry_.Value("moe_asr_realtime_factor").value_or(-1), 0);
  EXPECT_EQ(registry_.Value("moe_asr_streams_active").value_or(-1), 1);
  s->reset();
  EXPECT_EQ(registry_.Value("moe_asr_streams_active").value_or(-1), 0);
}

}  // namespace
}  // namespace moe::asr
