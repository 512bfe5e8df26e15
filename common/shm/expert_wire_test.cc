#include "common/shm/expert_wire.h"

#include <cstring>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::shm {
namespace {

using common::testing::StatusIs;

TEST(ExpertWireTest, RequestRoundTripsInPlaceAndResponsesLineUp) {
  const int64_t hidden = 3;
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9}, c = {10, 11, 12};
  engine::ExpertCall call;
  call.layer_idx = 2;
  call.hidden = hidden;
  call.activations = kernels::Activations::kBf16;
  call.weights = model::WeightsMode::kQ8_0;
  call.batches = {{5, 2, a.data(), nullptr}, {1, 1, b.data(), nullptr}, {7, 1, c.data(), nullptr}};
  const std::vector<size_t> idx = {0, 2};  // this worker's share
  const std::vector<int64_t> rows = {2, 1};
  const uint64_t bytes = RequestPayloadBytes(hidden, rows);
  EXPECT_EQ(bytes, 64u + 64 + 64 + 64);  // header, table, 24 B -> 64, 12 B -> 64
  alignas(64) std::byte payload[256];
  EncodeRequest({.call_id = 9, .deadline_unix_ns = 77, .placement_version = 3, .layer_idx = 2},
                call, idx, payload);
  DecodedRequest d;
  ASSERT_OK(DecodeRequest(payload, static_cast<uint32_t>(bytes), hidden, &d));
  EXPECT_EQ(d.header.call_id, 9u);
  EXPECT_EQ(d.header.deadline_unix_ns, 77);
  EXPECT_EQ(d.header.placement_version, 3u);
  EXPECT_EQ(d.call.layer_idx, 2);
  EXPECT_EQ(d.call.activations, kernels::Activations::kBf16);
  EXPECT_EQ(d.call.weights, model::WeightsMode::kQ8_0);
  ASSERT_EQ(d.call.batches.size(), 2u);
  EXPECT_EQ(d.call.batches[0].expert_id, 5);
  EXPECT_EQ(d.call.batches[1].expert_id, 7);
  EXPECT_EQ(d.call.batches[0].input[5], 6.0f);
  EXPECT_EQ(d.call.batches[1].input[2], 12.0f);
  EXPECT_EQ(reinterpret_cast<const std::byte*>(d.call.batches[0].input), payload + 128);
  EXPECT_EQ(d.response_bytes, ResponsePayloadBytes(hidden, rows));
  alignas(64) std::byte response[512];
  SetOutputs(response, &d.call);
  EXPECT_EQ(reinterpret_cast<std::byte*>(d.call.batches[0].output), response + 256);
  EXPECT_EQ(reinterpret_cast<std::byte*>(d.call.batches[1].output), response + 320);
  EncodeResult(9, absl::FailedPreconditionError("not resident"), 1234, 2, WorkerTimes{5, 6, 7},
               response);
  ResultHeader r;
  ASSERT_OK(DecodeResult(response, 384, &r));
  EXPECT_EQ(r.call_id, 9u);
  EXPECT_EQ(r.compute_ns, 1234);
  EXPECT_EQ(r.times.picked_mono_ns, 5);
  EXPECT_EQ(r.times.compute_start_mono_ns, 6);
  EXPECT_EQ(r.times.published_mono_ns, 7);
  EXPECT_THAT(ResultStatus(r), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(ResultStatus(r).message(), "not resident");
}

TEST(ExpertWireTest, MalformedRequestsAreInvalidArguments) {
  const int64_t hidden = 4;
  std::vector<float> a(8, 1.0f);
  engine::ExpertCall call;
  call.hidden = hidden;
  call.batches = {{0, 2, a.data(), nullptr}};
  const std::vector<size_t> idx = {0};
  const uint32_t bytes = static_cast<uint32_t>(RequestPayloadBytes(hidden, {2}));
  alignas(64) std::byte payload[256];
  EncodeRequest({.call_id = 1}, call, idx, payload);
  DecodedRequest d;
  EXPECT_THAT(DecodeRequest(payload, bytes - 64, hidden, &d),
              StatusIs(absl::StatusCode::kInvalidArgument));  // truncated
  EXPECT_THAT(DecodeRequest(payload, bytes, hidden + 1, &d),
              StatusIs(absl::StatusCode::kInvalidArgument));  // other model
  EXPECT_EQ(d.header.call_id, 1u);                            // still known: answered with it
  CallHeader h;
  std::memcpy(&h, payload, sizeof(h));
  h.num_batches = 1 << 20;
  std::memcpy(payload, &h, sizeof(h));
  EXPECT_THAT(DecodeRequest(payload, bytes, hidden, &d),
              StatusIs(absl::StatusCode::kInvalidArgument));
  h.num_batches = 1;
  std::memcpy(payload, &h, sizeof(h));
  BatchEntry e{0, 0, 0};
  std::memcpy(payload + sizeof(CallHeader), &e, sizeof(e));
  EXPECT_THAT(DecodeRequest(payload, bytes, hidden, &d),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("num_tokens")));
  e.num_tokens = int64_t{1} << 40;  // would overflow
  std::memcpy(payload + sizeof(CallHeader), &e, sizeof(e));
  EXPECT_THAT(DecodeRequest(payload, bytes, hidden, &d),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(RequestPayloadBytes(hidden, {}), 0u);
  EXPECT_EQ(RequestPayloadBytes(1 << 20, {1 << 20}), 0u);
}

}  // namespace
}  // namespace moe::shm
