#include "common/model/expert_spec.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::model {
namespace {

using ::moe::common::testing::IsOkAndHolds;
using ::moe::common::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// 4 layers (layer 1 dense), 8 experts.
ModelConfig Config() {
  ModelConfig c;
  c.num_hidden_layers = 4;
  c.num_experts = 8;
  c.mlp_only_layers = {1};
  return c;
}

TEST(ExpertSpecTest, ParsesSinglesRangesAndStarIntoSortedDistinctKeys) {
  EXPECT_THAT(ParseExpertSpecs({"3:7", "*:0-1", "0:1", "2-3:5"}, Config()),
              IsOkAndHolds(ElementsAre(ExpertKey{0, 0}, ExpertKey{0, 1}, ExpertKey{2, 0},
                                       ExpertKey{2, 1}, ExpertKey{2, 5}, ExpertKey{3, 0},
                                       ExpertKey{3, 1}, ExpertKey{3, 5}, ExpertKey{3, 7})));
  EXPECT_THAT(ParseExpertSpecs({}, Config()), IsOkAndHolds(ElementsAre()));
}

TEST(ExpertSpecTest, RejectsMalformedOutOfRangeAndDenseLayers) {
  for (const char* bad : {"x", "1", "0:", ":3", "0:3-1", "0:a", "*:*", "0:1:2"}) {
    EXPECT_THAT(ParseExpertSpecs({bad}, Config()),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(bad)))
        << bad;
  }
  EXPECT_THAT(ParseExpertSpecs({"0:8"}, Config()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
  EXPECT_THAT(ParseExpertSpecs({"4:0"}, Config()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
  EXPECT_THAT(ParseExpertSpecs({"1:0"}, Config()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an MoE layer")));
}

}  // namespace
}  // namespace moe::model
