#include "services/operator/core/quantity.h"

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::op {
namespace {

using common::testing::IsOkAndHolds;
using common::testing::StatusIs;

TEST(QuantityTest, ParsesBinaryDecimalAndMilliSuffixes) {
  EXPECT_THAT(ParseQuantity("256Mi"), IsOkAndHolds(268435456));
  EXPECT_THAT(ParseQuantity("1Gi"), IsOkAndHolds(int64_t{1} << 30));
  EXPECT_THAT(ParseQuantity("10G"), IsOkAndHolds(10'000'000'000));
  EXPECT_THAT(ParseQuantity("1500m"), IsOkAndHolds(2));  // rounded up, like the API's Value()
  EXPECT_THAT(ParseQuantity("42"), IsOkAndHolds(42));
  EXPECT_THAT(ParseQuantity("1e3"), IsOkAndHolds(1000));
}

TEST(QuantityTest, RefusesGarbage) {
  EXPECT_THAT(ParseQuantity(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseQuantity("12Qi"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseQuantity("-1Gi"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseQuantity("Mi"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(QuantityTest, ParsesGoDurations) {
  EXPECT_THAT(ParseDuration("300s"), IsOkAndHolds(absl::Seconds(300)));
  EXPECT_THAT(ParseDuration("1m30s"), IsOkAndHolds(absl::Seconds(90)));
  EXPECT_THAT(ParseDuration("250ms"), IsOkAndHolds(absl::Milliseconds(250)));
  EXPECT_THAT(ParseDuration("1.5h"), IsOkAndHolds(absl::Minutes(90)));
  EXPECT_THAT(ParseDuration("5"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseDuration("-1s"), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace moe::op
