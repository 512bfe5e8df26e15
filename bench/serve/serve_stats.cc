#include "bench/serve/serve_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace moe::bench::serve {
namespace {

double Tpot(const RequestOutcome& o) {
  if (o.chunk_s.empty() || o.output_tokens < 2) return -1;
  return (o.e2e_s - o.chunk_s.front()) / static_cast<double>(o.output_tokens - 1);
}

}  // namespace

bool Slo::Parse(const std::string& text, Slo* out) {
  Slo s;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(", "), absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(part, ':');
    double v = 0;
    if (kv.size() != 2 || !absl::SimpleAtod(kv[1], &v) || !(v > 0)) return false;
    if (kv[0] == "ttft") {
      s.ttft_ms = v;
    } else if (kv[0] == "tpot") {
      s.tpot_ms = v;
    } else if (kv[0] == "e2el" || kv[0] == "e2e") {
      s.e2e_ms = v;
    } else {
      return false;
    }
  }
  *out = s;
  return true;
}

std::string Slo::ToString() const {
  std::string out;
  auto add = [&](const char* name, double v) {
    if (v > 0) absl::StrAppend(&out, out.empty() ? "" : " ", name, "<=", v, "ms");
  };
  add("ttft", ttft_ms);
  add("tpot", tpot_ms);
  add("e2e", e2e_ms);
  return out.empty() ? "none" : out;
}

bool Slo::Met(double ttft, double tpot, double e2e) const {
  return (ttft_ms <= 0 || ttft <= ttft_ms) && (tpot_ms <= 0 || tpot <= tpot_ms) &&
         (e2e_ms <= 0 || e2e <= e2e_ms);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

Distribution Describe(std::vector<double> v) {
  Distribution d;
  d.count = static_cast<int64_t>(v.size());
  if (v.empty()) return d;
  double sum = 0;
  for (double x : v) sum += x;
  d.mean = sum / static_cast<double>(v.size());
  d.max = *std::max_element(v.begin(), v.end());
  d.p50 = Percentile(v, 0.5);
  d.p90 = Percentile(v, 0.9);
  d.p99 = Percentile(std::move(v), 0.99);
  return d;
}

ServeSummary Summarize(const std::vector<RequestOutcome>& outcomes, const Slo& slo,
                       double duration_s) {
  ServeSummary s;
  std::vector<double> ttft, tpot, itl, e2e;
  double first = 0, last = 0;
  bool any = false;
  for (const RequestOutcome& o : outcomes) {
    if (!any || o.send_s < first) first = o.send_s;
    if (!any || o.send_s + o.e2e_s > last) last = o.send_s + o.e2e_s;
    any = true;
    if (!o.ok || o.chunk_s.empty()) {
      if (s.failed++ == 0) s.first_error = o.ok ? "no content chunk" : o.error;
      continue;
    }
    ++s.completed;
    s.prompt_tokens += o.prompt_tokens;
    s.output_tokens += o.output_tokens;
    const double t = o.chunk_s.front() * 1e3, p = Tpot(o) * 1e3, e = o.e2e_s * 1e3;
    ttft.push_back(t);
    if (p >= 0) tpot.push_back(p);
    e2e.push_back(e);
    for (size_t i = 1; i < o.chunk_s.size(); ++i) {
      itl.push_back((o.chunk_s[i] - o.chunk_s[i - 1]) * 1e3);
    }
    if (slo.Met(t, p >= 0 ? p : 0, e)) ++s.good;
  }
  s.duration_s = duration_s > 0 ? duration_s : (any ? last - first : 0);
  if (s.duration_s > 0) {
    s.request_throughput = s.completed / s.duration_s;
    s.output_tok_s = s.output_tokens / s.duration_s;
    s.total_tok_s = (s.prompt_tokens + s.output_tokens) / s.duration_s;
    s.goodput = s.good / s.duration_s;
  }
  s.ttft_ms = Describe(std::move(ttft));
  s.tpot_ms = Describe(std::move(tpot));
  s.itl_ms = Describe(std::move(itl));
  s.e2e_ms = Describe(std::move(e2e));
  return s;
}

std::vector<BenchResult> ToResults(const ServeSummary& s, const Slo& slo,
                                   const nlohmann::json& params) {
  nlohmann::json p = params;
  p["completed"] = s.completed;
  p["failed"] = s.failed;
  if (!s.first_error.empty()) p["first_error"] = s.first_error;
  p["duration_s"] = s.duration_s;
  std::vector<BenchResult> out;
  auto add = [&](const std::string& name, double v, const char* unit, nlohmann::json extra = {}) {
    nlohmann::json q = p;
    if (extra.is_object()) q.update(extra);
    out.push_back({.name = name, .value = v, .unit = unit, .params = q, .baseline = {}});
  };
  add("request_throughput", s.request_throughput, "req/s");
  add("output_tok_s", s.output_tok_s, "tok/s", {{"output_tokens", s.output_tokens}});
  add("total_tok_s", s.total_tok_s, "tok/s", {{"prompt_tokens", s.prompt_tokens}});
  add("goodput", s.goodput, "req/s", {{"objective", slo.ToString()}, {"good", s.good}});
  auto dist = [&](const std::string& base, const Distribution& d) {
    add(base + "_mean", d.mean, "ms", {{"samples", d.count}});
    add(base + "_p50", d.p50, "ms");
    add(base + "_p90", d.p90, "ms");
    add(base + "_p99", d.p99, "ms");
  };
  dist("ttft_ms", s.ttft_ms);
  dist("tpot_ms", s.tpot_ms);
  dist("itl_ms", s.itl_ms);
  dist("e2e_ms", s.e2e_ms);
  return out;
}

std::string OutcomeTable(const std::vector<RequestOutcome>& outcomes) {
  std::string out = "# send_s ttft_ms tpot_ms e2e_ms output_tokens ok\n";
  for (const RequestOutcome& o : outcomes) {
    const double ttft = o.chunk_s.empty() ? -1 : o.chunk_s.front() * 1e3;
    const double tpot = Tpot(o);
    absl::StrAppend(&out, o.send_s, " ", ttft, " ", tpot < 0 ? -1 : tpot * 1e3, " ", o.e2e_s * 1e3,
                    " ", o.output_tokens, " ", o.ok ? 1 : 0, "\n");
  }
  return out;
}

DecodeSpan DecodeSpanOf(const std::vector<RequestOutcome>& outcomes) {
  double first = 1e18, last = 0;
  int64_t tokens = 0;
  for (const RequestOutcome& o : outcomes) {
    if (!o.ok || o.chunk_s.empty()) continue;
    first = std::min(first, o.send_s + o.chunk_s.front());
    last = std::max(last, o.send_s + o.e2e_s);
    tokens += std::max<int64_t>(0, o.output_tokens - 1);
  }
  if (last <= first) return {};
  return {tokens, last - first};
}

std::vector<size_t> TurnOrder(int round, size_t n) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = round % 2 == 0 ? i : n - 1 - i;
  return order;
}

void AppendRound(std::vector<RequestOutcome> round, std::vector<RequestOutcome>* all,
                 double* elapsed) {
  double end = 0;
  for (RequestOutcome& o : round) {
    end = std::max(end, o.send_s + o.e2e_s);
    o.send_s += *elapsed;
    all->push_back(std::move(o));
  }
  *elapsed += end;
}

}  // namespace moe::bench::serve
