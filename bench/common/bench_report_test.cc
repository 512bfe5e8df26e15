#include "bench/common/bench_report.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::bench {
namespace {

TEST(BenchReportTest, RendersTheSharedSchema) {
  BenchReport report("engine", "2024-01-02T03:04:05Z", MachineInfo{2, "Test CPU"});
  report.Add({"decode_tok_s_b1", 12.5, "tok/s", {{"threads", 2}}, std::nullopt});
  report.Add({"decode_tok_s_b32", 100, "tok/s", {}, Baseline{"llama.cpp", 50}});
  EXPECT_EQ(report.ToJson().dump(),
            R"({"machine":{"cpu_model":"Test CPU","cpus":2},"results":[)"
            R"({"name":"decode_tok_s_b1","params":{"threads":2},"unit":"tok/s","value":12.5},)"
            R"({"baseline":{"name":"llama.cpp","value":50.0},"name":"decode_tok_s_b32",)"
            R"("params":{},"ratio":2.0,"unit":"tok/s","value":100.0}],)"
            R"("started":"2024-01-02T03:04:05Z","suite":"engine"})");
}

TEST(BenchReportTest, MachineAndRssAreMeasured) {
  EXPECT_GE(DetectMachine().cpus, 1);
  EXPECT_GT(PeakRssBytes(), 0);
  EXPECT_THAT(IsoTimeNow(), ::testing::MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T.*Z"));
}

}  // namespace
}  // namespace moe::bench
