#include "bench/serve/expert_load.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::bench::serve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two layers, three experts, workers "0" and "5" of a three-worker placement.
constexpr char kBefore[] =
    R"({"router":"127.0.0.1:1","expert_tokens":[10,0,0, 4,4,2],"num_workers":3,)"
    R"("worker_tokens":{"0":[10,6],"5":[0,4]},"measured_balancedness":[0.3,0.5]})";
constexpr char kAfter[] =
    R"({"router":"127.0.0.1:1","expert_tokens":[40,10,10, 16,16,8],"num_workers":3,)"
    R"("worker_tokens":{"0":[30,16],"5":[20,14],"7":[10,10]},"measured_balancedness":[1,1]})";

TEST(ExpertLoadTest, ParsesAnAdminStatsLine) {
  ASSERT_OK_AND_ASSIGN(ExpertLoad l, ParseAdminStats(kBefore));
  EXPECT_EQ(l.num_layers, 2);
  EXPECT_EQ(l.num_experts, 3);
  EXPECT_EQ(l.num_workers, 3);
  EXPECT_THAT(l.workers.at("5"), ElementsAre(0, 4));
}

TEST(ExpertLoadTest, RejectsWhatIsNotAStatsLineOfADisaggregatedRouter) {
  EXPECT_THAT(ParseAdminStats("moe admin: unavailable").status().message(),
              HasSubstr("expert_tokens"));
  EXPECT_THAT(ParseAdminStats(R"({"expert_tokens":[1,2]})").status().message(),
              HasSubstr("worker_tokens"));
  EXPECT_THAT(ParseAdminStats(R"({"expert_tokens":[1,2,3],"worker_tokens":{"0":[1,2]}})")
                  .status()
                  .message(),
              HasSubstr("not layers (2) x experts"));
  EXPECT_THAT(ParseAdminStats(R"({"expert_tokens":[1,2],"worker_tokens":{"0":[1],"1":[1,2]}})")
                  .status()
                  .message(),
              HasSubstr("different layer counts"));
}

TEST(ExpertLoadTest, PhaseLoadIsTheDifferenceAndBalancednessIsMeanOverMax) {
  ASSERT_OK_AND_ASSIGN(ExpertLoad before, ParseAdminStats(kBefore));
  ASSERT_OK_AND_ASSIGN(ExpertLoad after, ParseAdminStats(kAfter));
  // Before: layer 0 all on worker 0 (mean 10/3, max 10), layer 1 6 vs 4 vs idle.
  EXPECT_THAT(WorkerBalancedness(before), ElementsAre(::testing::DoubleNear(1.0 / 3, 1e-12),
                                                      ::testing::DoubleNear(10.0 / 3 / 6, 1e-12)));
  ASSERT_OK_AND_ASSIGN(ExpertLoad phase, LoadBetween(before, after));
  EXPECT_THAT(phase.expert_tokens, ElementsAre(30, 10, 10, 12, 12, 6));
  EXPECT_THAT(phase.workers.at("0"), ElementsAre(20, 10));
  EXPECT_THAT(phase.workers.at("5"), ElementsAre(20, 10));
  EXPECT_THAT(phase.workers.at("7"), ElementsAre(10, 10));  // new in `after`: all of it
  EXPECT_THAT(WorkerBalancedness(phase),
              ElementsAre(::testing::DoubleNear(50.0 / 3 / 20, 1e-12), 1.0));
  ExpertLoad other = after;
  other.num_experts = 2;
  EXPECT_FALSE(LoadBetween(before, other).ok());
}

TEST(ExpertLoadTest, TablesForTheHeatMap) {
  ASSERT_OK_AND_ASSIGN(ExpertLoad before, ParseAdminStats(kBefore));
  EXPECT_EQ(ExpertLoadTable(before),
            "# layer expert tokens share_of_layer\n"
            "0 0 10 1\n0 1 0 0\n0 2 0 0\n\n"
            "1 0 4 0.4\n1 1 4 0.4\n1 2 2 0.2\n\n");
  // Worker "5" is the second; the third worker of the placement has no entry: idle, 0.
  EXPECT_EQ(WorkerLoadTable(before),
            "# layer worker tokens tokens_over_layer_mean\n"
            "0 0 10 3\n0 1 0 0\n0 2 0 0\n\n"
            "1 0 6 1.8\n1 1 4 1.2\n1 2 0 0\n\n");
}

}  // namespace
}  // namespace moe::bench::serve
