// The Transcribe stream over real gRPC on loopback, against the core with fake decoders.
#include "services/asr/asr_server.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
#include "services/asr/testing/fake_decoder.h"

namespace moe::asr {
namespace {

namespace pb = ::moe::asr::v1;
using ::testing::HasSubstr;

std::string Tone(int level, int ms) {
  return audio::PcmToBytes(
      std::vector<int16_t>(static_cast<size_t>(16 * ms), static_cast<int16_t>(level)));
}

class AsrServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pool = DecoderPool::Create(2, [] {
      return absl::StatusOr<std::unique_ptr<Decoder>>(std::make_unique<testing::FakeDecoder>());
    });
    ASSERT_OK(pool.status());
    core_ = std::make_unique<AsrCore>(AsrCoreOptions{.max_chunk_bytes = 64000}, *std::move(pool),
                                      common::SystemClock::Get(), registry_);
    service_ = std::make_unique<AsrServer>(*core_);
    common::rpc::ServerOptions so;
    so.host = "127.0.0.1";
    runner_ = std::make_unique<common::rpc::ServerRunner>(so);
    runner_->AddService(service_.get(), pb::Asr::service_full_name());
    ASSERT_OK(runner_->Start());
    auto channel = common::rpc::CreateChannel(absl::StrCat("127.0.0.1:", runner_->port()));
    ASSERT_OK(channel.status());
    stub_ = pb::Asr::NewStub(*channel);
  }

  struct Result {
    std::vector<pb::TranscribeResponse> responses;
    grpc::Status status;
    std::string Render() const {
      std::vector<std::string> out;
      for (const auto& r : responses) {
        if (r.event() == pb::TranscribeResponse::SPEECH_STARTED) {
          out.push_back(absl::StrCat("started@", r.start_ms()));
        } else if (r.event() == pb::TranscribeResponse::SPEECH_STOPPED) {
          out.push_back(absl::StrCat("stopped@", r.end_ms()));
        } else {
          out.push_back(absl::StrCat(r.is_final() ? "final(" : "partial(", r.text(), ")"));
        }
      }
      return absl::StrJoin(out, " ");
    }
  };

  // Sends `requests` (config first unless `config` is null), half-closes, reads everything.
  Result Transcribe(const pb::RecognitionConfig* config,
                    const std::vector<pb::TranscribeRequest>& requests) {
    grpc::ClientContext ctx;
    auto stream = stub_->Transcribe(&ctx);
    if (config != nullptr) {
      pb::TranscribeRequest first;
      *first.mutable_config() = *config;
      stream->Write(first);
    }
    for (const auto& r : requests) {
      if (!stream->Write(r)) break;
    }
    stream->WritesDone();
    Result result;
    pb::TranscribeResponse response;
    while (stream->Read(&response)) result.responses.push_back(response);
    result.status = stream->Finish();
    return result;
  }
  static pb::TranscribeRequest Audio(const std::string& pcm) {
    pb::TranscribeRequest r;
    r.mutable_audio()->set_pcm_s16le(pcm);
    return r;
  }
  static pb::TranscribeRequest Control(pb::Control::Action a) {
    pb::TranscribeRequest r;
    r.mutable_control()->set_action(a);
    return r;
  }

  common::metrics::Registry registry_;
  std::unique_ptr<AsrCore> core_;
  std::unique_ptr<AsrServer> service_;
  std::unique_ptr<common::rpc::ServerRunner> runner_;
  std::unique_ptr<pb::Asr::Stub> stub_;
};

TEST_F(AsrServerTest, StreamsEventsAndFinals) {
  pb::RecognitionConfig config;
  config.set_sample_rate_hz(16000);
  Result r =
      Transcribe(&config, {Audio(Tone(3000, 300)), Audio(Tone(0, 500)), Audio(Tone(5000, 100))});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.Render(), "started@20 stopped@300 final(w3) started@820 stopped@900 final(w5)");
  EXPECT_EQ(r.responses[2].utterance_index(), 0);
  EXPECT_EQ(r.responses[5].utterance_index(), 1);
  EXPECT_EQ(r.responses[5].start_ms(), 820u);
}

TEST_F(AsrServerTest, ControlMessagesEndOrDropUtterances) {
  pb::RecognitionConfig config;
  config.set_sample_rate_hz(16000);
  config.set_manual_endpointing(true);
  Result r =
      Transcribe(&config, {Audio(Tone(2000, 200) + Tone(0, 600)), Control(pb::Control::FINALIZE),
                           Audio(Tone(4000, 100)), Control(pb::Control::DISCARD)});
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.Render(), "started@20 stopped@200 final(w2) started@820");
}

TEST_F(AsrServerTest, BadStreamsGetInvalidArgument) {
  pb::RecognitionConfig config;
  config.set_sample_rate_hz(16000);
  EXPECT_EQ(Transcribe(nullptr, {Audio(Tone(0, 10))}).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // no config first
  Result odd = Transcribe(&config, {Audio("abc")});
  EXPECT_EQ(odd.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(odd.status.error_message(), HasSubstr("3 bytes"));
  EXPECT_EQ(Transcribe(&config, {Audio(std::string(64002, '\0'))}).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  pb::RecognitionConfig slow = config;
  slow.set_sample_rate_hz(100);
  EXPECT_EQ(Transcribe(&slow, {}).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Transcribe(&config, {Control(pb::Control::ACTION_UNSPECIFIED)}).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Garbage (full-scale noise) and silence decode without trouble: silence says nothing.
  std::vector<int16_t> noise(16000);
  uint32_t x = 12345;
  for (int16_t& s : noise) s = static_cast<int16_t>((x = x * 1103515245u + 12345u) >> 16);
  EXPECT_TRUE(Transcribe(&config, {Audio(audio::PcmToBytes(noise))}).status.ok());
  Result silence = Transcribe(&config, {Audio(Tone(0, 2000))});
  EXPECT_TRUE(silence.status.ok());
  EXPECT_EQ(silence.Render(), "");
}

TEST_F(AsrServerTest, AllDecodersBusyIsResourceExhausted) {
  pb::RecognitionConfig config;
  config.set_sample_rate_hz(16000);
  grpc::ClientContext c1, c2;
  auto s1 = stub_->Transcribe(&c1);
  auto s2 = stub_->Transcribe(&c2);
  pb::TranscribeRequest first;
  *first.mutable_config() = config;
  ASSERT_TRUE(s1->Write(first));
  ASSERT_TRUE(s2->Write(first));
  // Both streams hold a decoder once the server read their config: a third is refused.
  pb::TranscribeRequest speech = Audio(Tone(3000, 100));
  ASSERT_TRUE(s1->Write(speech));
  ASSERT_TRUE(s2->Write(speech));
  pb::TranscribeResponse started;
  ASSERT_TRUE(s1->Read(&started));
  ASSERT_TRUE(s2->Read(&started));
  EXPECT_EQ(Transcribe(&config, {}).status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  s1->WritesDone();
  s2->WritesDone();
  pb::TranscribeResponse rest;
  while (s1->Read(&rest)) {
  }
  while (s2->Read(&rest)) {
  }
  EXPECT_TRUE(s1->Finish().ok());
  EXPECT_TRUE(s2->Finish().ok());
  EXPECT_EQ(registry_.Value("moe_asr_rejected_streams_total", {{"reason", "busy"}}).value_or(-1),
            1);
}

// mTLS with auth: only the gateway may open a stream; plaintext, certificate-less and foreign-CA
// callers never reach the handler (SECURITY.md).
TEST_F(AsrServerTest, OnlyTheGatewayIsServed) {
  common::rpc::testing::ClusterPki pki(common::testing::MakeTempDir("asr_auth"));
  const common::rpc::ServerOptions grpc = pki.Server();
  ASSERT_OK_AND_ASSIGN(auto auth, common::rpc::Authorizer::Create(grpc.auth, "asr", registry_,
                                                                  common::SystemClock::Get()));
  AsrServer service(*core_);
  service.SetAuthorizer(*auth);
  common::rpc::ServerRunner runner(grpc);
  runner.AddService(&service);
  ASSERT_OK(runner.Start());
  const auto* descriptor = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      pb::Asr::service_full_name());
  ASSERT_NE(descriptor, nullptr);
  pki.ExpectEveryMethodGuarded(absl::StrCat("127.0.0.1:", runner.port()), *descriptor,
                               kAsrServerPolicies);
  runner.Shutdown(absl::Now());
}

}  // namespace
}  // namespace moe::asr
