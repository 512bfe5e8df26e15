#include "bench/serve/workload.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace moe::bench::serve {
namespace {

// SplitMix64: a counter-based stream, so block h's tokens depend on (seed, h) only and not on
// how many other blocks were drawn before it (std:: distributions are not portable either).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Stream {
 public:
  explicit Stream(uint64_t seed) : state_(Mix(seed)) {}
  uint64_t Next() { return Mix(state_++); }
  double Uniform01() { return (Next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  int32_t Between(int32_t lo, int32_t hi) {                                   // [lo, hi]
    return lo + static_cast<int32_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t state_;
};

absl::Status CheckVocab(int32_t vocab_size) {
  if (vocab_size <= kFirstTokenId + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size ", vocab_size, " leaves no ids above ", kFirstTokenId));
  }
  return absl::OkStatus();
}

absl::Status CheckRange(const char* what, int32_t lo, int32_t hi, int32_t min_allowed) {
  if (lo < min_allowed || hi < lo) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " range [", lo, ", ", hi, "] is empty or below ", min_allowed));
  }
  return absl::OkStatus();
}

void AppendTokens(Stream& s, int32_t n, int32_t vocab, std::vector<int32_t>& out) {
  for (int32_t i = 0; i < n; ++i) {
    out.push_back(kFirstTokenId + static_cast<int32_t>(s.Next() % (vocab - kFirstTokenId)));
  }
}

}  // namespace

std::vector<double> PoissonArrivals(int count, double rate, double burstiness, uint64_t seed) {
  std::vector<double> out(std::max(0, count), 0.0);
  if (!(rate > 0) || std::isinf(rate)) return out;
  if (!(burstiness > 0)) burstiness = 1;
  std::mt19937_64 rng(seed);
  // Gamma(k, theta) with mean k * theta = 1 / rate.
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double t = 0;
  for (double& a : out) {
    t += gap(rng);
    a = t;
  }
  return out;
}

absl::StatusOr<std::vector<ServeRequest>> RandomWorkload(const RandomWorkloadOptions& o) {
  if (absl::Status s = CheckVocab(o.vocab_size); !s.ok()) return s;
  if (absl::Status s = CheckRange("input", o.input_min, o.input_max, 1); !s.ok()) return s;
  if (absl::Status s = CheckRange("output", o.output_min, o.output_max, 1); !s.ok()) return s;
  if (o.num_requests < 0 || o.shared_prefix < 0) {
    return absl::InvalidArgumentError("num_requests and shared_prefix must be >= 0");
  }
  std::vector<int32_t> system;
  Stream sys(Mix(o.seed) ^ 0x5157);
  AppendTokens(sys, o.shared_prefix, o.vocab_size, system);
  std::vector<ServeRequest> out;
  out.reserve(o.num_requests);
  for (int i = 0; i < o.num_requests; ++i) {
    Stream s(Mix(o.seed) + static_cast<uint64_t>(i) * 0x100000001ull);
    ServeRequest r;
    r.prompt = system;
    AppendTokens(s, s.Between(o.input_min, o.input_max), o.vocab_size, r.prompt);
    r.max_tokens = s.Between(o.output_min, o.output_max);
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<std::vector<ServeRequest>> MultiTurnWorkload(const MultiTurnOptions& o) {
  if (absl::Status s = CheckVocab(o.vocab_size); !s.ok()) return s;
  if (o.num_chats < 0 || o.turns < 1 || o.system_tokens < 0 || o.user_tokens < 1 ||
      o.output_tokens < 1 || o.think_s < 0) {
    return absl::InvalidArgumentError(
        "multi-turn: need chats >= 0, turns >= 1, user and output tokens >= 1, think_s >= 0");
  }
  std::vector<int32_t> system;
  Stream sys(Mix(o.seed) ^ 0x5157);
  AppendTokens(sys, o.system_tokens, o.vocab_size, system);
  std::vector<ServeRequest> out;
  for (int c = 0; c < o.num_chats; ++c) {
    Stream s(Mix(o.seed) + static_cast<uint64_t>(c) * 0x100000001ull);
    std::vector<int32_t> history = system;
    for (int t = 0; t < o.turns; ++t) {
      AppendTokens(s, o.user_tokens, o.vocab_size, history);
      ServeRequest r;
      r.prompt = history;
      r.max_tokens = o.output_tokens;
      if (t > 0) {
        r.after = static_cast<int32_t>(out.size()) - 1;
        r.after_delay_s = o.think_s;
      }
      out.push_back(std::move(r));
      AppendTokens(s, o.output_tokens, o.vocab_size, history);  // the answer's stand-in
    }
  }
  return out;
}

absl::StatusOr<std::vector<TraceEntry>> ParseMooncakeTrace(std::string_view text,
                                                           int32_t block_tokens) {
  if (block_tokens < 1) return absl::InvalidArgumentError("block_tokens must be >= 1");
  std::vector<TraceEntry> out;
  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("trace line ", line_no, ": ", why));
    };
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    TraceEntry e;
    for (const char* key : {"timestamp", "input_length", "output_length"}) {
      if (!j.contains(key) || !j[key].is_number() || j[key].get<double>() < 0) {
        return bad(absl::StrCat("'", key, "' must be a number >= 0"));
      }
    }
    e.timestamp_ms = j["timestamp"].get<int64_t>();
    e.input_length = j["input_length"].get<int32_t>();
    e.output_length = j["output_length"].get<int32_t>();
    if (!j.contains("hash_ids") || !j["hash_ids"].is_array()) {
      return bad("'hash_ids' must be an array");
    }
    for (const auto& h : j["hash_ids"]) {
      if (!h.is_number_integer()) return bad("'hash_ids' must hold integers");
      e.hash_ids.push_back(h.get<int64_t>());
    }
    const int64_t need = (static_cast<int64_t>(e.input_length) + block_tokens - 1) / block_tokens;
    if (static_cast<int64_t>(e.hash_ids.size()) < need) {
      return bad(absl::StrCat(e.hash_ids.size(), " hash_ids cannot cover input_length ",
                              e.input_length, " in blocks of ", block_tokens));
    }
    if (!out.empty() && e.timestamp_ms < out.back().timestamp_ms) {
      return bad("timestamp goes backwards");
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::string FormatMooncakeTrace(const std::vector<TraceEntry>& entries) {
  std::string out;
  for (const TraceEntry& e : entries) {
    nlohmann::ordered_json j;
    j["timestamp"] = e.timestamp_ms;
    j["input_length"] = e.input_length;
    j["output_length"] = e.output_length;
    j["hash_ids"] = e.hash_ids;
    out += j.dump();
    out += '\n';
  }
  return out;
}

absl::StatusOr<std::vector<TraceEntry>> SyntheticTrace(const SyntheticTraceOptions& o) {
  if (o.block_tokens < 1 || o.num_requests < 0 || !(o.rate > 0) || o.num_prefixes < 0 ||
      o.prefix_blocks < 0 || o.prefix_share < 0 || o.prefix_share > 1) {
    return absl::InvalidArgumentError(
        "synthetic trace: need block_tokens >= 1, rate > 0, prefix_share in [0, 1]");
  }
  if (absl::Status s = CheckRange("input", o.input_min, o.input_max, 1); !s.ok()) return s;
  if (absl::Status s = CheckRange("output", o.output_min, o.output_max, 1); !s.ok()) return s;
  const std::vector<double> arrivals = PoissonArrivals(o.num_requests, o.rate, 1, o.seed);
  Stream s(Mix(o.seed) ^ 0x7ace);
  double weight_sum = 0;
  for (int p = 0; p < o.num_prefixes; ++p) weight_sum += 1.0 / (p + 1);
  // Prefix p owns ids [p * prefix_blocks, (p + 1) * prefix_blocks); unique blocks come after.
  int64_t next_id = static_cast<int64_t>(o.num_prefixes) * o.prefix_blocks;
  std::vector<TraceEntry> out;
  for (int i = 0; i < o.num_requests; ++i) {
    TraceEntry e;
    e.timestamp_ms = static_cast<int64_t>(std::llround(arrivals[i] * 1000));
    e.input_length = s.Between(o.input_min, o.input_max);
    e.output_length = s.Between(o.output_min, o.output_max);
    const int64_t blocks = (e.input_length + o.block_tokens - 1) / o.block_tokens;
    if (o.num_prefixes > 0 && s.Uniform01() < o.prefix_share) {
      double x = s.Uniform01() * weight_sum;
      int p = 0;
      while (p + 1 < o.num_prefixes && (x -= 1.0 / (p + 1)) >= 0) ++p;
      for (int32_t b = 0; b < o.prefix_blocks && b < blocks; ++b) {
        e.hash_ids.push_back(static_cast<int64_t>(p) * o.prefix_blocks + b);
      }
    }
    while (static_cast<int64_t>(e.hash_ids.size()) < blocks) e.hash_ids.push_back(next_id++);
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::vector<ServeRequest>> TraceToRequests(const std::vector<TraceEntry>& trace,
                                                          const TraceReplayOptions& o) {
  if (absl::Status s = CheckVocab(o.vocab_size); !s.ok()) return s;
  if (o.block_tokens < 1 || !(o.time_scale >= 0)) {
    return absl::InvalidArgumentError("trace replay: block_tokens >= 1 and time_scale >= 0");
  }
  std::vector<ServeRequest> out;
  out.reserve(trace.size());
  for (const TraceEntry& e : trace) {
    ServeRequest r;
    r.arrival_s = static_cast<double>(e.timestamp_ms) / 1000.0 * o.time_scale;
    int32_t len = e.input_length;
    if (o.max_input > 0) len = std::min(len, o.max_input);
    for (size_t b = 0; static_cast<int32_t>(r.prompt.size()) < len && b < e.hash_ids.size(); ++b) {
      Stream s(Mix(o.seed) ^ Mix(static_cast<uint64_t>(e.hash_ids[b]) + 0x6a09e667ull));
      AppendTokens(s, std::min(o.block_tokens, len - static_cast<int32_t>(r.prompt.size())),
                   o.vocab_size, r.prompt);
    }
    if (r.prompt.empty()) {  // input_length 0: one token, so the request is valid
      Stream s(Mix(o.seed));
      AppendTokens(s, 1, o.vocab_size, r.prompt);
    }
    r.max_tokens =
        std::max(1, o.max_output > 0 ? std::min(e.output_length, o.max_output) : e.output_length);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace moe::bench::serve
