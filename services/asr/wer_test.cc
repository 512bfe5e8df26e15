// The ASR service with the real engine (pocketsphinx, en-us) on the recorded speech of
// pocketsphinx-testdata, through its gRPC stream as the gateway uses it: the word error rates
// against the reference transcripts, checked against thresholds set from the measurement
// (services/asr/README.md), plus bad-audio cases on the real
// engine. Audio goes in 100 ms chunks, as fast as the service takes it.
#include "services/asr/testing/wer.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/audio/pcm.h"
#include "common/audio/wav.h"
#include "common/base/clock.h"
#include "common/base/file.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/server_runner.h"
#include "common/testing/status_matchers.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "services/asr/asr_server.h"
#include "services/asr/pocketsphinx_decoder.h"

namespace moe::asr {
namespace {

namespace pb = ::moe::asr::v1;
constexpr char kData[] = "/usr/share/pocketsphinx/test/data";

// Thresholds: the rate measured on this data with the default options, plus a margin of about
// two words for other builds of the engine. Measured (2026-12-01): librivox 19 / 71 words =
// 0.268 (0.310 with engine.second_pass), cards 1 / 21 = 0.048 (an inserted "three").
constexpr double kLibrivoxMaxWer = 0.30;
constexpr double kCardsMaxWer = 0.10;

class AsrWerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kData))
      GTEST_SKIP() << kData << " missing (pocketsphinx-testdata)";
    registry_ = new common::metrics::Registry();
    auto pool = DecoderPool::Create(2, [] { return CreatePocketsphinxDecoder({}); });
    ASSERT_OK(pool.status());
    core_ = new AsrCore(AsrCoreOptions{}, *std::move(pool), common::SystemClock::Get(), *registry_);
    service_ = new AsrServer(*core_);
    common::rpc::ServerOptions so;
    so.host = "127.0.0.1";
    runner_ = new common::rpc::ServerRunner(so);
    runner_->AddService(service_, pb::Asr::service_full_name());
    ASSERT_OK(runner_->Start());
    auto channel = common::rpc::CreateChannel(absl::StrCat("127.0.0.1:", runner_->port()));
    ASSERT_OK(channel.status());
    stub_ = pb::Asr::NewStub(*channel).release();
  }
  static void TearDownTestSuite() {
    delete stub_;
    if (runner_ != nullptr) runner_->Shutdown();
    delete runner_;
    delete service_;
    delete core_;
    delete registry_;
  }
  void SetUp() override {
    if (stub_ == nullptr) GTEST_SKIP();
  }

  // The finals of one stream, joined; the stream's status in `status`.
  static std::string Transcribe(const pb::RecognitionConfig& config,
                                const std::vector<int16_t>& pcm, grpc::Status* status) {
    grpc::ClientContext ctx;
    auto stream = stub_->Transcribe(&ctx);
    pb::TranscribeRequest first;
    *first.mutable_config() = config;
    stream->Write(first);
    const size_t chunk = static_cast<size_t>(config.sample_rate_hz() / 10);
    for (size_t i = 0; i < pcm.size(); i += chunk) {
      pb::TranscribeRequest r;
      r.mutable_audio()->set_pcm_s16le(audio::PcmToBytes(
          std::span<const int16_t>(pcm).subspan(i, std::min(chunk, pcm.size() - i))));
      if (!stream->Write(r)) break;
    }
    stream->WritesDone();
    std::vector<std::string> finals;
    pb::TranscribeResponse resp;
    while (stream->Read(&resp)) {
      if (resp.is_final() && !resp.text().empty()) finals.push_back(resp.text());
    }
    *status = stream->Finish();
    return absl::StrJoin(finals, " ");
  }

  static testing::WerCount Corpus(const std::string& dir, const std::string& transcription,
                                  const pb::RecognitionConfig& config) {
    auto corpus = testing::ReadTestCorpus(absl::StrCat(kData, "/", dir), transcription);
    EXPECT_OK(corpus.status());
    testing::WerCount total;
    for (const testing::Utterance& u : *corpus) {
      auto wav = common::ReadFile(u.wav_path);
      EXPECT_OK(wav.status());
      auto decoded = audio::DecodeWav(*wav);
      EXPECT_OK(decoded.status());
      pb::RecognitionConfig c = config;
      c.set_sample_rate_hz(decoded->sample_rate);
      grpc::Status status;
      const std::string hyp = Transcribe(c, decoded->samples, &status);
      EXPECT_TRUE(status.ok()) << status.error_message();
      const testing::WerCount n = testing::CountWordErrors(u.reference, hyp);
      std::printf("  %s: %d/%d errors\n    ref: %s\n    hyp: %s\n", u.wav_path.c_str(), n.errors,
                  n.reference_words, u.reference.c_str(), hyp.c_str());
      total.errors += n.errors;
      total.reference_words += n.reference_words;
    }
    std::printf("%s: WER %.3f (%d/%d)\n", dir.c_str(), total.rate(), total.errors,
                total.reference_words);
    return total;
  }

  static common::metrics::Registry* registry_;
  static AsrCore* core_;
  static AsrServer* service_;
  static common::rpc::ServerRunner* runner_;
  static pb::Asr::Stub* stub_;
};
common::metrics::Registry* AsrWerTest::registry_ = nullptr;
AsrCore* AsrWerTest::core_ = nullptr;
AsrServer* AsrWerTest::service_ = nullptr;
common::rpc::ServerRunner* AsrWerTest::runner_ = nullptr;
pb::Asr::Stub* AsrWerTest::stub_ = nullptr;

TEST_F(AsrWerTest, LibrivoxDictation) {
  const testing::WerCount n = Corpus("librivox", "transcription", pb::RecognitionConfig());
  EXPECT_GT(n.reference_words, 50);
  EXPECT_LE(n.rate(), kLibrivoxMaxWer);
}

TEST_F(AsrWerTest, CardsWithTheirGrammar) {
  pb::RecognitionConfig config;
  config.set_mode(pb::RECOGNITION_MODE_GRAMMAR);
  auto grammar = common::ReadFile(absl::StrCat(kData, "/cards/cards.gram"));
  ASSERT_OK(grammar.status());
  config.set_grammar_jsgf(*grammar);
  const testing::WerCount n = Corpus("cards", "cards.transcription", config);
  EXPECT_GT(n.reference_words, 10);
  EXPECT_LE(n.rate(), kCardsMaxWer);
}

TEST_F(AsrWerTest, KeywordsAreSpotted) {
  pb::RecognitionConfig config;
  config.set_mode(pb::RECOGNITION_MODE_KEYWORDS);
  config.add_keywords("young man");
  config.add_keywords("selfish");
  auto wav = common::ReadFile(
      absl::StrCat(kData, "/librivox/sense_and_sensibility_01_austen_64kb-0880.wav"));
  ASSERT_OK(wav.status());
  auto decoded = audio::DecodeWav(*wav);
  config.set_sample_rate_hz(decoded->sample_rate);
  grpc::Status status;
  EXPECT_EQ(Transcribe(config, decoded->samples, &status), "young man");
  EXPECT_TRUE(status.ok());
  config.clear_keywords();
  config.add_keywords("xqzzy");
  Transcribe(config, decoded->samples, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("dictionary"), std::string::npos);
}

TEST_F(AsrWerTest, BadAudioOnTheRealEngine) {
  pb::RecognitionConfig config;
  config.set_sample_rate_hz(16000);
  grpc::Status status;
  // Silence: nothing said.
  EXPECT_EQ(Transcribe(config, std::vector<int16_t>(16000 * 3), &status), "");
  EXPECT_TRUE(status.ok());
  // Full-scale noise: whatever the engine makes of it, no failure.
  std::vector<int16_t> noise(16000 * 3);
  uint32_t x = 7;
  for (int16_t& s : noise) s = static_cast<int16_t>((x = x * 1103515245u + 12345u) >> 16);
  Transcribe(config, noise, &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  // A bad grammar is refused before any audio.
  config.set_mode(pb::RECOGNITION_MODE_GRAMMAR);
  config.set_grammar_jsgf("#JSGF V1.0; grammar g; public <a> = ((;");
  Transcribe(config, {}, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace moe::asr
