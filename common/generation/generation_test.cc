#include "common/generation/constraint.h"
#include "common/generation/finish_reason.h"
#include "common/generation/sampling_params.h"
#include "common/generation/usage.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::generation {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

TEST(FinishReasonTest, NamesAreTheMetricLabels) {
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kAbort), "abort");
  EXPECT_EQ(FinishReasonName(FinishReason::kError), "error");
  EXPECT_EQ(FinishReasonName(FinishReason::kNone), "");
}

TEST(SamplingParamsTest, ValidateRejectsOutOfRangeParams) {
  SamplingParams p;
  EXPECT_THAT(p.Validate(10), IsOk());
  p.top_p = 0;
  EXPECT_THAT(p.Validate(10), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_p")));
  p = {};
  p.temperature = -1;
  EXPECT_THAT(p.Validate(10), StatusIs(absl::StatusCode::kInvalidArgument));
  p = {};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_THAT(p.Validate(10), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("10")));
  p = {};
  p.stop_token_ids = {-1};
  EXPECT_THAT(p.Validate(10), StatusIs(absl::StatusCode::kInvalidArgument));
  p = {};
  p.max_tokens = -1;
  EXPECT_THAT(p.Validate(10), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SamplingParamsTest, LogprobsCarriesOpenAiLogprobsAndTopLogprobs) {
  SamplingParams p;
  EXPECT_FALSE(p.returns_logprobs());
  EXPECT_EQ(p.num_top_logprobs(), 0);
  p.logprobs = 0;
  EXPECT_TRUE(p.returns_logprobs());
  EXPECT_EQ(p.num_top_logprobs(), 0);
  p.logprobs = 3;
  EXPECT_TRUE(p.returns_logprobs());
  EXPECT_EQ(p.num_top_logprobs(), 3);
}

TEST(ConstraintTest, ValidateChecksTheFieldsOfEachKind) {
  Constraint c;
  EXPECT_FALSE(c.active());
  EXPECT_THAT(c.Validate(), IsOk());
  c.kind = ConstraintKind::kJsonSchema;
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("schema")));
  c.spec = "{}";
  EXPECT_THAT(c.Validate(), IsOk());
  c = {.kind = ConstraintKind::kChoice, .choices = {"yes", ""}};
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("choice 1")));
  c = {.kind = ConstraintKind::kJsonObject, .spec = "x"};
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ConstraintTest, CacheKeysDifferAcrossKindsAndChoiceSplits) {
  const Constraint a{.kind = ConstraintKind::kChoice, .choices = {"a,b"}};
  const Constraint b{.kind = ConstraintKind::kChoice, .choices = {"a", ",b"}};
  const Constraint r{.kind = ConstraintKind::kRegex, .spec = "a,b"};
  EXPECT_NE(a.CacheKey(), b.CacheKey());
  EXPECT_NE(a.CacheKey(), r.CacheKey());
  EXPECT_EQ(r.CacheKey(), (Constraint{.kind = ConstraintKind::kRegex, .spec = "a,b"}.CacheKey()));
}

}  // namespace
}  // namespace moe::generation
