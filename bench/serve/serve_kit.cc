#include "bench/serve/serve_kit.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace moe::bench::serve {

namespace fs = std::filesystem;

void Progress(const std::string& msg) {
  std::fprintf(stderr, "moe bench serve: %s\n", msg.c_str());
  std::fflush(stderr);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

Measured Measure(Ctx& ctx, RunningServer& server, const std::string& scenario,
                 const std::vector<ServeRequest>& requests, const LoadOptions& load,
                 nlohmann::json params, const Keep& keep, const std::string& tag) {
  Measured m;
  params["settle_ms"] = absl::ToDoubleMilliseconds(SettleCpu());
  m.outcomes = RunWorkload(server.port, server.model, requests, load);
  m.summary = Summarize(m.outcomes, ctx.slo);
  params["scenario"] = scenario;
  params["system"] = server.system;
  params["requests"] = requests.size();
  if (load.max_concurrency > 0) params["concurrency"] = load.max_concurrency;
  for (BenchResult& r : ToResults(m.summary, ctx.slo, params)) {
    if (keep.empty() || std::find(keep.begin(), keep.end(), r.name) != keep.end()) {
      ctx.report.Add(std::move(r));
    }
  }
  if (!ctx.options.artifacts_dir.empty()) {
    const std::string base =
        (fs::path(ctx.options.artifacts_dir) /
         absl::StrCat("serve-", tag.empty() ? scenario : tag, "-", server.system))
            .string();
    WriteFile(base + ".requests.dat", OutcomeTable(m.outcomes));
    // Sorted samples, one per line: the plots draw them as CDFs.
    std::vector<double> ttft, itl;
    for (const RequestOutcome& o : m.outcomes) {
      if (o.ok && !o.chunk_s.empty()) ttft.push_back(o.chunk_s.front() * 1e3);
      for (size_t i = 1; i < o.chunk_s.size(); ++i) {
        itl.push_back((o.chunk_s[i] - o.chunk_s[i - 1]) * 1e3);
      }
    }
    auto lines = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      std::string out;
      for (double x : v) absl::StrAppend(&out, x, "\n");
      return out;
    };
    WriteFile(base + ".ttft.dat", lines(std::move(ttft)));
    WriteFile(base + ".itl.dat", lines(std::move(itl)));
  }
  Progress(
      absl::StrCat(scenario, " on ", server.system, ": ", m.summary.completed, " ok, ",
                   m.summary.failed, " failed, ", absl::SixDigits(m.summary.output_tok_s),
                   " out tok/s, ttft p90 ", absl::SixDigits(m.summary.ttft_ms.p90), " ms",
                   m.summary.first_error.empty() ? "" : ", first error: ", m.summary.first_error));
  return m;
}

// Output tokens after each request's first, over first-token-to-last-end: the rate at which
// the system decodes while all streams run.
double DecodeTokS(const std::vector<RequestOutcome>& outcomes) {
  double first = 1e18, last = 0;
  int64_t tokens = 0;
  for (const RequestOutcome& o : outcomes) {
    if (!o.ok || o.chunk_s.empty()) continue;
    first = std::min(first, o.send_s + o.chunk_s.front());
    last = std::max(last, o.send_s + o.e2e_s);
    tokens += std::max<int64_t>(0, o.output_tokens - 1);
  }
  return last > first ? tokens / (last - first) : 0;
}

void AddCompared(Ctx& ctx, const std::string& name, double ours, std::optional<double> theirs,
                 const std::string& unit, nlohmann::json params) {
  BenchResult r{.name = name, .value = ours, .unit = unit, .params = std::move(params)};
  if (theirs && *theirs > 0) r.baseline = Baseline{"llama-server", *theirs};
  ctx.report.Add(std::move(r));
}

absl::StatusOr<std::vector<ServeRequest>> ShortPrompts(const Ctx& ctx, int n, int32_t out_min,
                                                       int32_t out_max, uint64_t seed) {
  return RandomWorkload({.num_requests = n,
                         .input_min = 16,
                         .input_max = 64,
                         .output_min = out_min,
                         .output_max = out_max,
                         .vocab_size = ctx.vocab_size,
                         .seed = seed});
}

}  // namespace moe::bench::serve
