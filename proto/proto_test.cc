// The generated API compiles, links and round-trips; field numbers that clients depend on are
// pinned here (a renumbering would break every deployed peer).
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "moe/asr/v1/asr.grpc.pb.h"
#include "moe/common/v1/types.pb.h"
#include "moe/expert_worker/v1/expert_worker.grpc.pb.h"
#include "moe/kv_store/v1/kv_store.grpc.pb.h"
#include "moe/router/v1/router.grpc.pb.h"
#include "moe/tts/v1/tts.grpc.pb.h"

namespace {

TEST(ProtoTest, GenerateRequestRoundTrips) {
  moe::router::v1::GenerateRequest req;
  req.set_request_id("r1");
  req.add_prompt_token_ids(1);
  req.add_prompt_token_ids(300);
  req.mutable_sampling()->set_temperature(0.7f);
  req.mutable_sampling()->set_seed(42);
  (*req.mutable_sampling()->mutable_logit_bias())[5] = -100.0f;
  req.set_max_tokens(16);
  req.set_top_logprobs(3);

  moe::router::v1::GenerateRequest back;
  ASSERT_TRUE(back.ParseFromString(req.SerializeAsString()));
  EXPECT_EQ(back.request_id(), "r1");
  ASSERT_EQ(back.prompt_token_ids_size(), 2);
  EXPECT_EQ(back.prompt_token_ids(1), 300);
  EXPECT_TRUE(back.sampling().has_seed());
  EXPECT_EQ(back.sampling().seed(), 42u);
  EXPECT_EQ(back.sampling().logit_bias().at(5), -100.0f);
  EXPECT_FALSE(moe::router::v1::GenerateRequest().sampling().has_seed());
}

TEST(ProtoTest, TensorCarriesPackedBytes) {
  moe::common::v1::Tensor t;
  t.set_dtype(moe::common::v1::DTYPE_BF16);
  t.add_shape(3);
  t.add_shape(64);
  t.set_data(std::string(3 * 64 * 2, '\x01'));
  // Packed: payload plus a few bytes of framing, not a varint per element.
  EXPECT_LT(t.ByteSizeLong(), t.data().size() + 16);
}

TEST(ProtoTest, FieldNumbersArePinned) {
  using moe::router::v1::GenerateRequest;
  EXPECT_EQ(GenerateRequest::kPromptTokenIdsFieldNumber, 2);
  EXPECT_EQ(GenerateRequest::kSamplingFieldNumber, 3);
  EXPECT_EQ(GenerateRequest::kMaxTokensFieldNumber, 4);
  EXPECT_EQ(moe::router::v1::GenerateResponse::kTokenIdsFieldNumber, 1);
  EXPECT_EQ(moe::router::v1::Usage::kCachedPromptTokensFieldNumber, 3);
  EXPECT_EQ(moe::expert_worker::v1::ExpertBatch::kActivationsFieldNumber, 2);
  EXPECT_EQ(moe::kv_store::v1::KvBlock::kHashFieldNumber, 1);
  EXPECT_EQ(moe::router::v1::FINISH_REASON_ERROR, 4);
}

TEST(ProtoTest, ServiceNamesAreVersioned) {
  EXPECT_STREQ(moe::router::v1::Router::service_full_name(), "moe.router.v1.Router");
  EXPECT_STREQ(moe::expert_worker::v1::ExpertWorker::service_full_name(),
               "moe.expert_worker.v1.ExpertWorker");
  EXPECT_STREQ(moe::kv_store::v1::KvStore::service_full_name(), "moe.kv_store.v1.KvStore");
  EXPECT_STREQ(moe::asr::v1::Asr::service_full_name(), "moe.asr.v1.Asr");
  EXPECT_STREQ(moe::tts::v1::Tts::service_full_name(), "moe.tts.v1.Tts");
  EXPECT_STREQ(grpc::health::v1::Health::service_full_name(), "grpc.health.v1.Health");
}

}  // namespace
