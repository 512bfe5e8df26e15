#include "tools/moe/command.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::cli {
namespace {

using ::moe::common::testing::IsOkAndHolds;
using ::moe::common::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ArgsTest, ParsesValuesSwitchesAndPositionals) {
  ASSERT_OK_AND_ASSIGN(Args args, Args::Parse({"--model", "m", "--json", "--max-tokens=5", "x",
                                               "--set", "a=1", "--set", "b=2"},
                                              {"json"}));
  EXPECT_EQ(args.GetOr("model", ""), "m");
  EXPECT_TRUE(args.Has("json"));
  EXPECT_THAT(args.GetInt("max-tokens", 0), IsOkAndHolds(5));
  EXPECT_THAT(args.positional(), ElementsAre("x"));
  EXPECT_THAT(args.GetAll("set"), ElementsAre("a=1", "b=2"));
}

TEST(ArgsTest, ErrorsNameTheFlag) {
  EXPECT_THAT(Args::Parse({"--model"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--model")));
  ASSERT_OK_AND_ASSIGN(Args args, Args::Parse({"--max-tokens", "abc", "--bogus", "1"}));
  EXPECT_THAT(args.GetInt("max-tokens", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'abc'")));
  EXPECT_THAT(args.CheckKnown({"max-tokens"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--bogus")));
}

}  // namespace
}  // namespace moe::cli
