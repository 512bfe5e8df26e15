#include "services/router/core/request_stream.h"

#include <thread>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::router {
namespace {

using ::moe::common::testing::StatusIs;
using ::moe::generation::FinishReason;
using ::moe::generation::Usage;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(RequestStreamTest, CoalescesTokensAndEndsWithUsage) {
  RequestStream stream(8);
  stream.PushToken(5);
  stream.PushToken(7);
  auto first = stream.Next(absl::ZeroDuration());
  ASSERT_TRUE(first.has_value());
  EXPECT_THAT(first->token_ids, ElementsAre(5, 7));
  EXPECT_FALSE(first->final());

  stream.PushToken(9);
  stream.Finish(FinishReason::kLength, absl::OkStatus(),
                Usage{.prompt_tokens = 3, .completion_tokens = 3, .cached_prompt_tokens = 0});
  stream.PushToken(11);  // after the end: dropped
  auto last = stream.Next(absl::ZeroDuration());
  ASSERT_TRUE(last.has_value());
  EXPECT_THAT(last->token_ids, ElementsAre(9));
  EXPECT_EQ(last->finish_reason, FinishReason::kLength);
  EXPECT_EQ(last->usage.completion_tokens, 3);
  EXPECT_FALSE(stream.Next(absl::ZeroDuration()).has_value());
  EXPECT_TRUE(stream.finished());
}

TEST(RequestStreamTest, TimesOutWhenNothingArrives) {
  RequestStream stream(2);
  EXPECT_FALSE(stream.Next(absl::ZeroDuration()).has_value());
  EXPECT_FALSE(stream.finished());
}

TEST(RequestStreamTest, FullStreamHasNoRoomUntilRead) {
  RequestStream stream(2);
  int woken = 0;
  stream.SetOnRoom([&] { ++woken; });
  stream.PushToken(1);
  EXPECT_TRUE(stream.HasRoom());
  stream.PushToken(2);
  EXPECT_FALSE(stream.HasRoom());
  auto event = stream.Next(absl::ZeroDuration());
  ASSERT_TRUE(event.has_value());
  EXPECT_THAT(event->token_ids, ElementsAre(1, 2));
  EXPECT_TRUE(stream.HasRoom());
  EXPECT_EQ(woken, 1);
  // Reading a stream that was not full does not wake the producer.
  stream.PushToken(3);
  ASSERT_TRUE(stream.Next(absl::ZeroDuration()).has_value());
  EXPECT_EQ(woken, 1);
}

TEST(RequestStreamTest, BlockedConsumerWakesOnFinish) {
  RequestStream stream(4);
  std::optional<StreamEvent> got;
  std::thread consumer([&] { got = stream.Next(); });
  stream.Finish(FinishReason::kAbort, absl::CancelledError("gone"), Usage{});
  consumer.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_THAT(got->token_ids, IsEmpty());
  EXPECT_EQ(got->finish_reason, FinishReason::kAbort);
  EXPECT_THAT(got->status, StatusIs(absl::StatusCode::kCancelled));
}

}  // namespace
}  // namespace moe::router
