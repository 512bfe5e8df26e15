#include "bench/serve/serve_kit.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <utility>

#include "common/base/status_macros.h"

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

namespace {

// Measure's report of outcomes already run.
Measured Record(Ctx& ctx, RunningServer& server, const std::string& scenario,
                std::vector<RequestOutcome> outcomes, const LoadOptions& load,
                nlohmann::json params, const Keep& keep, const std::string& tag) {
  Measured m;
  m.outcomes = std::move(outcomes);
  m.summary = Summarize(m.outcomes, ctx.slo);
  params["scenario"] = scenario;
  params["system"] = server.system;
  params["requests"] = m.outcomes.size();
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

}  // namespace

Measured Measure(Ctx& ctx, RunningServer& server, const std::string& scenario,
                 const std::vector<ServeRequest>& requests, const LoadOptions& load,
                 nlohmann::json params, const Keep& keep, const std::string& tag) {
  params["settle_ms"] = absl::ToDoubleMilliseconds(SettleCpu());
  return Record(ctx, server, scenario, RunWorkload(server.port, server.model, requests, load), load,
                std::move(params), keep, tag);
}

absl::StatusOr<std::vector<TurnsMeasured>> MeasureInTurns(
    Ctx& ctx, const std::vector<RunningServer*>& servers, int rounds, const std::string& scenario,
    const std::function<absl::StatusOr<std::vector<ServeRequest>>(int round)>& make,
    const LoadOptions& load, nlohmann::json params, const Keep& keep, const std::string& tag) {
  const size_t n = servers.size();
  std::vector<std::vector<RequestOutcome>> all(n);
  std::vector<double> elapsed(n, 0), settle_ms(n, 0);
  std::vector<DecodeSpan> decode(n);
  for (int r = 0; r < rounds; ++r) {
    ASSIGN_OR_RETURN(std::vector<ServeRequest> requests, make(r));
    for (size_t k : TurnOrder(r, n)) {
      settle_ms[k] += absl::ToDoubleMilliseconds(SettleCpu());
      std::vector<RequestOutcome> out =
          RunWorkload(servers[k]->port, servers[k]->model, requests, load);
      const DecodeSpan span = DecodeSpanOf(out);
      decode[k].tokens += span.tokens;
      decode[k].seconds += span.seconds;
      Progress(absl::StrCat(scenario, " round ", r + 1, "/", rounds, " on ", servers[k]->system,
                            ": ", absl::SixDigits(span.tok_s()), " decode tok/s"));
      AppendRound(std::move(out), &all[k], &elapsed[k]);
    }
  }
  std::vector<TurnsMeasured> result(n);
  for (size_t k = 0; k < n; ++k) {
    nlohmann::json p = params;
    p["settle_ms"] = settle_ms[k];
    p["rounds"] = rounds;
    p["order"] = kTurnsOrder;
    result[k].measured =
        Record(ctx, *servers[k], scenario, std::move(all[k]), load, std::move(p), keep, tag);
    result[k].decode_tok_s = decode[k].tok_s();
  }
  return result;
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
