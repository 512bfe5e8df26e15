// The Synthesize stream over real gRPC on loopback, with espeak-ng itself (fast, no model
// download): first chunks early, sentences streamed, voices and bad input.
#include "services/tts/tts_server.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/audio/pcm.h"
#include "common/base/clock.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/testing/method_policy.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace moe::tts {
namespace {

namespace pb = ::moe::tts::v1;
using ::testing::HasSubstr;

class TtsServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto synth = EspeakSynthesizer::Create({});
    ASSERT_OK(synth.status());
    synth_ = synth->release();
    registry_ = new common::metrics::Registry();
    core_ = new TtsCore({.max_streams = 4}, *synth_, common::SystemClock::Get(), *registry_);
    service_ = new TtsServer(*core_);
    common::rpc::ServerOptions so;
    so.host = "127.0.0.1";
    runner_ = new common::rpc::ServerRunner(so);
    runner_->AddService(service_, pb::Tts::service_full_name());
    ASSERT_OK(runner_->Start());
    auto channel = common::rpc::CreateChannel(absl::StrCat("127.0.0.1:", runner_->port()));
    ASSERT_OK(channel.status());
    stub_ = pb::Tts::NewStub(*channel).release();
  }
  static void TearDownTestSuite() {
    delete stub_;
    runner_->Shutdown();
    delete runner_;
    delete service_;
    delete core_;
    delete registry_;
    delete synth_;
  }

  struct Result {
    std::vector<pb::SynthesizeResponse> responses;
    grpc::Status status;
    size_t bytes() const {
      size_t n = 0;
      for (const auto& r : responses) n += r.pcm_s16le().size();
      return n;
    }
  };
  static Result Synthesize(const pb::SynthesisConfig& config,
                           const std::vector<std::string>& pieces) {
    grpc::ClientContext ctx;
    auto stream = stub_->Synthesize(&ctx);
    pb::SynthesizeRequest first;
    *first.mutable_config() = config;
    stream->Write(first);
    for (const std::string& p : pieces) {
      pb::SynthesizeRequest r;
      r.mutable_text()->set_text(p);
      if (!stream->Write(r)) break;
    }
    stream->WritesDone();
    Result result;
    pb::SynthesizeResponse resp;
    while (stream->Read(&resp)) result.responses.push_back(resp);
    result.status = stream->Finish();
    return result;
  }

  static EspeakSynthesizer* synth_;
  static common::metrics::Registry* registry_;
  static TtsCore* core_;
  static TtsServer* service_;
  static common::rpc::ServerRunner* runner_;
  static pb::Tts::Stub* stub_;
};
EspeakSynthesizer* TtsServerTest::synth_ = nullptr;
common::metrics::Registry* TtsServerTest::registry_ = nullptr;
TtsCore* TtsServerTest::core_ = nullptr;
TtsServer* TtsServerTest::service_ = nullptr;
common::rpc::ServerRunner* TtsServerTest::runner_ = nullptr;
pb::Tts::Stub* TtsServerTest::stub_ = nullptr;

TEST_F(TtsServerTest, SpeaksStreamedTextSentenceBySentence) {
  pb::SynthesisConfig config;
  config.set_voice("alloy");
  config.set_sample_rate_hz(24000);
  Result r = Synthesize(config, {"Hello there", ". This is a test", " of streaming speech."});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  std::vector<std::string> texts;
  for (const auto& resp : r.responses) {
    EXPECT_EQ(resp.sample_rate_hz(), 24000);
    EXPECT_EQ(resp.pcm_s16le().size() % 2, 0u);
    if (!resp.text().empty()) texts.push_back(resp.text());
  }
  EXPECT_EQ(texts,
            (std::vector<std::string>{"Hello there.", "This is a test of streaming speech."}));
  // Real speech: a second or more, not silence.
  EXPECT_GT(r.bytes(), 24000u * 2);
  std::string all;
  for (const auto& resp : r.responses) all += resp.pcm_s16le();
  EXPECT_GT(audio::Rms(audio::PcmFromBytes(all)), 300);
  EXPECT_TRUE(r.responses.back().end_of_sentence());
}

TEST_F(TtsServerTest, ALongFirstSentenceStartsAtTheCap) {
  pb::SynthesisConfig config;
  Result r = Synthesize(config, {"the first sentence of this answer goes on and on without any "
                                 "pause at all until it finally ends here."});
  ASSERT_TRUE(r.status.ok());
  ASSERT_FALSE(r.responses.empty());
  EXPECT_EQ(r.responses[0].sample_rate_hz(), 22050);  // espeak-ng's own rate
  EXPECT_EQ(r.responses[0].text(), "the first sentence of this answer goes on and");
}

TEST_F(TtsServerTest, VoicesAndSpeedChangeTheAudio) {
  pb::SynthesisConfig slow, fast, other;
  slow.set_speed(0.5);
  fast.set_speed(2.0);
  other.set_voice("en+f3");
  const std::vector<std::string> text = {"Speed changes the length of speech."};
  const size_t s = Synthesize(slow, text).bytes(), f = Synthesize(fast, text).bytes();
  EXPECT_GT(s, f * 2);
  EXPECT_TRUE(Synthesize(other, text).status.ok());
}

TEST_F(TtsServerTest, BadStreamsGetInvalidArgument) {
  pb::SynthesisConfig config;
  config.set_voice("no-such-voice");
  Result r = Synthesize(config, {"x"});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("no-such-voice"));
  // A voice name is never a path (espeak-ng would load a voice file from it).
  for (const char* path : {"../../../../etc/passwd", "/usr/share/espeak-ng-data/voices/!v/m1",
                           "en/../../../x", "..", "en+..", ".hidden", "en\\..\\x", "en us"}) {
    pb::SynthesisConfig bad;
    bad.set_voice(path);
    EXPECT_EQ(Synthesize(bad, {"x"}).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << path;
  }
  pb::SynthesisConfig rate;
  rate.set_sample_rate_hz(96000);
  EXPECT_EQ(Synthesize(rate, {"x"}).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Text that is no language at all, and empty text, are spoken (or not) without failing.
  pb::SynthesisConfig plain;
  EXPECT_TRUE(Synthesize(plain, {"\xff\xfe zzzq 1234 ;;; \x01"}).status.ok());
  Result empty = Synthesize(plain, {});
  EXPECT_TRUE(empty.status.ok());
  EXPECT_EQ(empty.bytes(), 0u);
}

// mTLS with auth: only the gateway may open a stream; plaintext, certificate-less and foreign-CA
// callers never reach the handler (SECURITY.md).
TEST_F(TtsServerTest, OnlyTheGatewayIsServed) {
  common::rpc::testing::ClusterPki pki(common::testing::MakeTempDir("tts_auth"));
  const common::rpc::ServerOptions grpc = pki.Server();
  ASSERT_OK_AND_ASSIGN(auto auth, common::rpc::Authorizer::Create(grpc.auth, "tts", *registry_,
                                                                  common::SystemClock::Get()));
  TtsServer service(*core_);
  service.SetAuthorizer(*auth);
  common::rpc::ServerRunner runner(grpc);
  runner.AddService(&service);
  ASSERT_OK(runner.Start());
  const auto* descriptor = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      pb::Tts::service_full_name());
  ASSERT_NE(descriptor, nullptr);
  pki.ExpectEveryMethodGuarded(absl::StrCat("127.0.0.1:", runner.port()), *descriptor,
                               kTtsServerPolicies);
  runner.Shutdown(absl::Now());
}

}  // namespace
}  // namespace moe::tts
