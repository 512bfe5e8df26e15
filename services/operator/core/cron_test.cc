#include "services/operator/core/cron.h"

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::op {
namespace {

using common::testing::StatusIs;

absl::Time At(int y, int mo, int d, int h, int mi) {
  return absl::FromCivil(absl::CivilMinute(y, mo, d, h, mi), absl::UTCTimeZone());
}

TEST(CronTest, DailyAtThree) {
  ASSERT_OK_AND_ASSIGN(CronSchedule c, CronSchedule::Parse("0 3 * * *"));
  EXPECT_EQ(c.Next(At(2026, 12, 1, 2, 59)), At(2026, 12, 1, 3, 0));
  EXPECT_EQ(c.Next(At(2026, 12, 1, 3, 0)), At(2026, 12, 2, 3, 0));  // strictly after
  EXPECT_EQ(c.Next(At(2026, 12, 31, 4, 0)), At(2027, 1, 1, 3, 0));
}

TEST(CronTest, StepsRangesAndLists) {
  ASSERT_OK_AND_ASSIGN(CronSchedule every15, CronSchedule::Parse("*/15 * * * *"));
  EXPECT_EQ(every15.Next(At(2026, 12, 1, 10, 1)), At(2026, 12, 1, 10, 15));
  ASSERT_OK_AND_ASSIGN(CronSchedule office, CronSchedule::Parse("30 9-17/4 * * 1-5"));
  // 2026-12-05 is a Saturday: the next is Monday 09:30.
  EXPECT_EQ(office.Next(At(2026, 12, 4, 17, 31)), At(2026, 12, 7, 9, 30));
  EXPECT_EQ(office.Next(At(2026, 12, 7, 9, 30)), At(2026, 12, 7, 13, 30));
  ASSERT_OK_AND_ASSIGN(CronSchedule sunday, CronSchedule::Parse("0 0 * * 7"));
  EXPECT_EQ(sunday.Next(At(2026, 12, 1, 0, 0)), At(2026, 12, 6, 0, 0));
}

TEST(CronTest, BothDayFieldsMatchEither) {
  // The 1st of the month or any Friday (Vixie cron).
  ASSERT_OK_AND_ASSIGN(CronSchedule c, CronSchedule::Parse("0 12 1 * 5"));
  EXPECT_EQ(c.Next(At(2026, 12, 1, 13, 0)), At(2026, 12, 4, 12, 0));  // Friday the 4th
  EXPECT_EQ(c.Next(At(2026, 12, 25, 13, 0)), At(2027, 1, 1, 12, 0));  // the 1st (also a Friday)
}

TEST(CronTest, NeverMatchingIsInfiniteFuture) {
  ASSERT_OK_AND_ASSIGN(CronSchedule c, CronSchedule::Parse("0 0 31 2 *"));
  EXPECT_EQ(c.Next(At(2026, 1, 1, 0, 0)), absl::InfiniteFuture());
}

TEST(CronTest, RefusesBadFields) {
  for (const char* bad : {"* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *",
                          "* * * * 8", "5-1 * * * *", "*/0 * * * *", "a * * * *", "@daily"}) {
    EXPECT_THAT(CronSchedule::Parse(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

}  // namespace
}  // namespace moe::op
