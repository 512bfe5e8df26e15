#include "bench/common/goals.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "gtest/gtest.h"

#ifndef MOE_SOURCE_DIR
#define MOE_SOURCE_DIR "."
#endif

namespace moe::bench {
namespace {

using nlohmann::json;

const std::vector<Goal> kTable = {
    {"serve_decode_tok_s_c16", 18, "serve", "ratio", ">=", 2.5, "", "", "ratio >= 2.5"},
    {"ttft_warm_over_cold_l2", 11, "kv-store", "value", "<=", 0.2, "", "", "<= 0.2"},
    {"overhead_ms", 13, "experts", "value", "<=", 0.05, "transport", "shm", "<= 0.05 (shm)"},
    {"reported_only", 6, "gateway", "value", "", 0, "", "", "reported"},
    {"never_emitted", 20, "engine", "ratio", ">=", 1.1, "", "", ">= 1.1"},
    {"from_skipped", 12, "voice", "value", "<=", 500, "", "", "<= 500"},
};

json Result(const std::string& name, const std::string& suite, double value,
            std::optional<double> ratio = std::nullopt, json params = json::object()) {
  params["suite"] = suite;
  json r = {{"name", name}, {"value", value}, {"unit", "x"}, {"params", params}};
  if (ratio) r["ratio"] = *ratio;
  return r;
}

TEST(GoalsTest, JudgesValueOrRatioOfMatchingResultsOnly) {
  const Goal& g = kTable[2];
  EXPECT_TRUE(GoalMatches(g, Result("overhead_ms", "experts", 0.04, {}, {{"transport", "shm"}})));
  EXPECT_FALSE(GoalMatches(g, Result("overhead_ms", "experts", 0.04, {}, {{"transport", "grpc"}})));
  EXPECT_FALSE(GoalMatches(g, Result("overhead_ms", "serve", 0.04, {}, {{"transport", "shm"}})));
  EXPECT_FALSE(GoalMatches(g, Result("overhead_ms", "experts", 0.04)));  // no transport
  EXPECT_EQ(GoalMet(g, Result("overhead_ms", "experts", 0.04)), true);
  EXPECT_EQ(GoalMet(g, Result("overhead_ms", "experts", 0.05)), true);  // <= includes the bound
  EXPECT_EQ(GoalMet(g, Result("overhead_ms", "experts", 0.06)), false);
  // of=ratio: judged on the ratio, never on the value; absent ratio = not judged.
  EXPECT_EQ(GoalMet(kTable[0], Result("serve_decode_tok_s_c16", "serve", 2000, 3.0)), true);
  EXPECT_EQ(GoalMet(kTable[0], Result("serve_decode_tok_s_c16", "serve", 2000, 2.4)), false);
  EXPECT_EQ(GoalMet(kTable[0], Result("serve_decode_tok_s_c16", "serve", 2000)), std::nullopt);
  EXPECT_EQ(GoalMet(kTable[3], Result("reported_only", "gateway", 1)), std::nullopt);
}

TEST(GoalsTest, SummaryNamesEveryGoalAndWhyItIsMissingOrUnjudged) {
  json results = json::array({
      Result("serve_decode_tok_s_c16", "serve", 2000),  // llama-server absent: no ratio
      Result("ttft_warm_over_cold_l2", "kv-store", 0.1, {}, {{"preset", "small"}}),
      Result("ttft_warm_over_cold_l2", "kv-store", 0.25, {}, {{"preset", "bench"}}),
      Result("overhead_ms", "experts", 0.03, {}, {{"transport", "shm"}}),
      Result("overhead_ms", "experts", 0.4, {}, {{"transport", "grpc"}}),
      Result("reported_only", "gateway", 2.2),
      Result("unrelated", "router", 1),
  });
  const json suites = json::array(
      {{{"name", "serve"}, {"status", "ok"}},
       {{"name", "kv-store"}, {"status", "ok"}},
       {{"name", "experts"}, {"status", "ok"}},
       {{"name", "gateway"}, {"status", "ok"}},
       {{"name", "engine"}, {"status", "ok"}},
       {{"name", "voice"}, {"status", "skipped"}, {"reason", "asr must be built beside moe"}}});
  const json summary = ApplyGoals(kTable, results, suites);
  ASSERT_EQ(summary.size(), kTable.size());
  std::ostringstream lines;
  for (const json& e : summary) {
    lines << e["figure"].get<std::string>() << " found=" << e["found"] << " met=" << e["met"]
          << " value=" << e["value"] << " reason=" << e.value("reason", "-") << "\n";
  }
  EXPECT_EQ(lines.str(),
            "serve_decode_tok_s_c16 found=1 met=null value=null reason=no ratio in 1 of 1 "
            "results (a baseline not measured in this run)\n"
            "ttft_warm_over_cold_l2 found=2 met=false value=0.1 reason=-\n"
            "overhead_ms found=1 met=true value=0.03 reason=-\n"
            "reported_only found=1 met=null value=2.2 reason=reported, no threshold\n"
            "never_emitted found=0 met=null value=null reason=not emitted by this build\n"
            "from_skipped found=0 met=null value=null reason=suite 'voice' skipped: asr must be "
            "built beside moe\n");
  // Each matching result carries its verdict; the others are left as they were.
  EXPECT_EQ(results[1]["goals"][0]["met"], true);
  EXPECT_EQ(results[2]["goals"][0]["met"], false);
  EXPECT_EQ(results[2]["goals"][0]["issue"], 11);
  EXPECT_TRUE(results[0]["goals"][0]["met"].is_null());
  EXPECT_FALSE(results[4].contains("goals"));
  EXPECT_FALSE(results[6].contains("goals"));
}

TEST(GoalsTest, TableIsWellFormedAndEveryFigureIsInTheReadme) {
  // ctest sets MOE_SOURCE_DIR in the environment (cmake/MoeHelpers.cmake).
  const char* env = std::getenv("MOE_SOURCE_DIR");
  std::ifstream in(std::string(env ? env : MOE_SOURCE_DIR) + "/bench/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  ASSERT_FALSE(readme.empty()) << "bench/README.md not found (MOE_SOURCE_DIR)";
  const std::set<std::string> ops = {">=", "<=", ">", "<", ""};
  for (const Goal& g : Goals()) {
    EXPECT_TRUE(g.of == "value" || g.of == "ratio") << g.figure;
    EXPECT_TRUE(ops.count(g.op)) << g.figure;
    EXPECT_GT(g.issue, 0) << g.figure;
    EXPECT_FALSE(g.text.empty()) << g.figure;
    EXPECT_NE(readme.find("`" + g.figure + "`"), std::string::npos)
        << g.figure << " (issue " << g.issue << ") is missing from bench/README.md";
  }
}

}  // namespace
}  // namespace moe::bench
