// `moe bench router` (DESIGN.md §6): the router's scheduler + L1 KV cache over
// the real engine on the small preset (or --model DIR), driven step by step on this thread:
//   kv_slot_utilisation              tokens held / (used blocks x block size), shared blocks once,
//                                    sampled every step while 64 requests run (prompts U[16,2048],
//                                    outputs U[16,256]); goal >= 0.97
//   ttft_warm_over_cold_l1           TTFT of a 2k prompt whose 2k prefix is cached + 32 new tokens,
//                                    over the same prompt cold; goal <= 0.1
//   kv_slot_utilisation_short        the same over short prompts (1-24) and outputs (1-16), where
//                                    fragmentation would show
//   prefix_sharing_concurrency_ratio sustained running sequences at a fixed KV budget (mean over
//                                    the steps in which requests waited), 1k shared system
//                                    prompt + 64 unique + 64 output, sharing on / off; goal >= 3
//   router_decode_tok_s              aggregate decode tokens/s at 1..64 concurrent streams
// --quick scales every size down (prompts U[16,512], 16 requests, 512-token prefix, 1..16 streams).
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/common/suite.h"
#include "bench/engine/engine_bench.h"
#include "common/base/clock.h"
#include "common/base/status_macros.h"
#include "services/router/core/router_core.h"

namespace moe::bench {
namespace {

using router::GenerateRequest;
using router::RouterCore;
using router::RouterCoreOptions;
using router::Scheduler;

// The parameters every result carries: what model and machine share it ran with.
BenchResult WithCommon(BenchResult r, const SuiteOptions& o) {
  r.params["model"] = o.model_dir.empty() ? o.preset : o.model_dir;
  r.params["threads"] = o.threads;
  r.params["quick"] = o.quick;
  return r;
}

GenerateRequest Greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerateRequest r;
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;  // lengths as asked
  return r;
}

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> out(n);
  // Skip the low ids (special tokens in the preset tokenizers).
  for (auto& t : out) t = static_cast<int32_t>(16 + rng() % (vocab - 16));
  return out;
}

absl::StatusOr<std::unique_ptr<RouterCore>> MakeCore(const std::string& dir, int threads,
                                                     int64_t kv_blocks, bool sharing,
                                                     int64_t max_num_seqs) {
  RouterCoreOptions o;
  o.model_dir = dir;
  o.num_threads = threads;
  o.kv_num_blocks = kv_blocks;
  o.enable_prefix_caching = sharing;
  o.scheduler.max_num_seqs = max_num_seqs;
  o.scheduler.max_batch_tokens = 2048;
  o.scheduler.chunked_prefill_size = 512;
  o.scheduler.max_waiting = 100000;
  // The suite reads the scheduler's stats, not its metrics: one registry for every core it makes.
  static common::metrics::Registry registry;
  return RouterCore::Create(o, registry, common::SystemClock::Get());
}

// Steps until idle, reading every stream so no one is held back; calls on_step after each step.
template <typename F>
absl::Status RunAll(Scheduler& s, std::vector<std::shared_ptr<router::RequestStream>>& streams,
                    F on_step) {
  while (s.HasWork()) {
    s.Step();
    on_step(s.GetStats());
    for (auto& st : streams) {
      while (auto e = st->Next(absl::ZeroDuration())) {
        if (e->final() && !e->status.ok()) return e->status;
      }
    }
  }
  return absl::OkStatus();
}

// `name`'s figure over requests with prompts U[min_prompt, max_prompt] and outputs U[min_out,
// max_out]. Long prompts in 16-token blocks cannot fragment much (<= 15 free slots per ~1000
// tokens); the short mix (prompts 1-24, outputs 1-16) is where fragmentation would show.
absl::Status SlotUtilisation(const std::string& dir, const SuiteOptions& o, BenchReport& report,
                             const std::string& name, int n, int64_t min_prompt, int64_t max_prompt,
                             int32_t min_out, int32_t max_out, const std::string& goal) {
  ASSIGN_OR_RETURN(auto core, MakeCore(dir, o.threads, o.quick ? 1024 : 6144, true, 256));
  const int64_t vocab = core->config().vocab_size;
  std::mt19937_64 rng(1);
  std::vector<std::shared_ptr<router::RequestStream>> streams;
  for (int i = 0; i < n; ++i) {
    const int64_t len = min_prompt + static_cast<int64_t>(rng() % (max_prompt - min_prompt + 1));
    const int32_t out = min_out + static_cast<int32_t>(rng() % (max_out - min_out + 1));
    ASSIGN_OR_RETURN(auto sub,
                     core->scheduler().Submit(Greedy(RandomTokens(rng, len, vocab), out)));
    streams.push_back(sub.stream);
  }
  double sum = 0, min = 1;
  int64_t samples = 0, max_running = 0;
  const absl::Time t0 = absl::Now();
  RETURN_IF_ERROR(RunAll(core->scheduler(), streams, [&](const router::SchedulerStats& st) {
    if (st.kv.num_blocks_used == 0) return;
    sum += st.kv.slot_utilisation;
    min = std::min(min, st.kv.slot_utilisation);
    max_running = std::max(max_running, st.num_running);
    ++samples;
  }));
  report.Add(WithCommon({.name = name,
                         .value = samples > 0 ? sum / samples : 0,
                         .unit = "ratio",
                         .params = {{"requests", n},
                                    {"prompt_tokens", {min_prompt, max_prompt}},
                                    {"output_tokens", {min_out, max_out}},
                                    {"block_size", 16},
                                    {"steps_sampled", samples},
                                    {"min", min},
                                    {"max_running", max_running},
                                    {"wall_s", absl::ToDoubleSeconds(absl::Now() - t0)},
                                    {"goal", goal}}},
                        o));
  return absl::OkStatus();
}

// Submit-to-first-token wall time of one request run alone.
absl::StatusOr<double> Ttft(Scheduler& s, std::vector<int32_t> prompt) {
  const absl::Time t0 = absl::Now();
  ASSIGN_OR_RETURN(auto sub, s.Submit(Greedy(std::move(prompt), 1)));
  double ttft = -1;
  while (s.HasWork()) {
    s.Step();
    if (ttft < 0 && sub.stream->finished()) ttft = absl::ToDoubleSeconds(absl::Now() - t0);
  }
  while (auto e = sub.stream->Next(absl::ZeroDuration())) {
    if (e->final() && !e->status.ok()) return e->status;
  }
  return ttft;
}

absl::Status WarmOverCold(const std::string& dir, const SuiteOptions& o, BenchReport& report) {
  const int64_t prefix = o.quick ? 512 : 2048;
  ASSIGN_OR_RETURN(auto core, MakeCore(dir, o.threads, 2048, true, 256));
  const int64_t vocab = core->config().vocab_size;
  std::mt19937_64 rng(2);
  std::vector<double> cold, warm;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int32_t> doc = RandomTokens(rng, prefix, vocab);
    ASSIGN_OR_RETURN(double c, Ttft(core->scheduler(), doc));
    std::vector<int32_t> question = doc;
    auto tail = RandomTokens(rng, 32, vocab);
    question.insert(question.end(), tail.begin(), tail.end());
    ASSIGN_OR_RETURN(double w, Ttft(core->scheduler(), question));
    cold.push_back(c);
    warm.push_back(w);
  }
  std::sort(cold.begin(), cold.end());
  std::sort(warm.begin(), warm.end());
  const double c = cold[1], w = warm[1];  // medians of 3
  report.Add(WithCommon({.name = "ttft_warm_over_cold_l1",
                         .value = w / c,
                         .unit = "ratio",
                         .params = {{"prefix_tokens", prefix},
                                    {"new_tokens", 32},
                                    {"ttft_cold_s", c},
                                    {"ttft_warm_s", w},
                                    {"repeats", 3},
                                    {"goal", "<= 0.1"}}},
                        o));
  return absl::OkStatus();
}

struct Concurrency {
  double sustained = 0;     // mean running sequences over the steps where requests waited
  int64_t peak = 0;         // most running at once
  int64_t bound_steps = 0;  // steps with a non-empty waiting queue (the KV budget binding)
  int64_t preemptions = 0;
};

// Runs `requests` sequences (a shared `system_len` prefix, seen once before, + 64 unique + 64
// output tokens) on a `kv_blocks` budget. The figure is the mean number running over the steps
// in which requests were still waiting: admission was held back, so the budget (not the
// number of requests) set it.
absl::StatusOr<Concurrency> SustainedConcurrency(const std::string& dir, const SuiteOptions& o,
                                                 bool sharing, int64_t kv_blocks,
                                                 int64_t system_len, int requests) {
  ASSIGN_OR_RETURN(auto core, MakeCore(dir, o.threads, kv_blocks, sharing, 4096));
  const int64_t vocab = core->config().vocab_size;
  std::mt19937_64 rng(3);
  const std::vector<int32_t> system = RandomTokens(rng, system_len, vocab);
  std::vector<std::shared_ptr<router::RequestStream>> streams;
  // The system prompt has been seen before (a warm cluster): one prefill-only request.
  ASSIGN_OR_RETURN(auto warmup, core->scheduler().Submit(Greedy(system, 0)));
  streams.push_back(warmup.stream);
  RETURN_IF_ERROR(RunAll(core->scheduler(), streams, [](const router::SchedulerStats&) {}));
  streams.clear();
  for (int i = 0; i < requests; ++i) {
    std::vector<int32_t> p = system;
    auto unique = RandomTokens(rng, 64, vocab);
    p.insert(p.end(), unique.begin(), unique.end());
    ASSIGN_OR_RETURN(auto sub, core->scheduler().Submit(Greedy(std::move(p), 64)));
    streams.push_back(sub.stream);
  }
  Concurrency c;
  double sum = 0;
  int64_t first_preemptions = -1;
  RETURN_IF_ERROR(RunAll(core->scheduler(), streams, [&](const router::SchedulerStats& st) {
    if (first_preemptions < 0) first_preemptions = st.num_preemptions;
    c.peak = std::max(c.peak, st.num_running);
    c.preemptions = st.num_preemptions - first_preemptions;
    if (st.num_waiting > 0) {
      sum += static_cast<double>(st.num_running);
      ++c.bound_steps;
    }
  }));
  c.sustained = c.bound_steps > 0 ? sum / c.bound_steps : 0;
  return c;
}

absl::Status SharingConcurrency(const std::string& dir, const SuiteOptions& o,
                                BenchReport& report) {
  const int64_t system_len = o.quick ? 256 : 1024;
  const int64_t per_seq = (system_len + 64 + 64 + 15) / 16;
  const int64_t kv_blocks = 16 * per_seq;  // 16 sequences without sharing
  // With sharing a sequence holds its own (64 + 64) / 16 = 8 blocks past the shared prefix, so
  // about (kv_blocks - system blocks) / 8 fit; submit 3x that (and 3x 16 without sharing) so
  // that requests wait for most of the run and the budget binds.
  const int64_t fit_shared = (kv_blocks - system_len / 16) / 8;
  const int requests_on = static_cast<int>(3 * fit_shared);
  const int requests_off = 48;
  ASSIGN_OR_RETURN(Concurrency off,
                   SustainedConcurrency(dir, o, false, kv_blocks, system_len, requests_off));
  ASSIGN_OR_RETURN(Concurrency on,
                   SustainedConcurrency(dir, o, true, kv_blocks, system_len, requests_on));
  report.Add(WithCommon({.name = "prefix_sharing_concurrency_ratio",
                         .value = off.sustained > 0 ? on.sustained / off.sustained : 0,
                         .unit = "ratio",
                         .params = {{"kv_blocks", kv_blocks},
                                    {"block_size", 16},
                                    {"system_tokens", system_len},
                                    {"unique_tokens", 64},
                                    {"output_tokens", 64},
                                    {"requests_sharing_on", requests_on},
                                    {"requests_sharing_off", requests_off},
                                    {"sustained_running_sharing_on", on.sustained},
                                    {"sustained_running_sharing_off", off.sustained},
                                    {"peak_running_sharing_on", on.peak},
                                    {"peak_running_sharing_off", off.peak},
                                    {"budget_bound_steps_on", on.bound_steps},
                                    {"budget_bound_steps_off", off.bound_steps},
                                    {"preemptions_on", on.preemptions},
                                    {"preemptions_off", off.preemptions},
                                    {"method",
                                     "mean running sequences over the steps with requests "
                                     "waiting (the KV budget binding), sharing on / off"},
                                    {"goal", ">= 3"}}},
                        o));
  return absl::OkStatus();
}

absl::Status DecodeThroughput(const std::string& dir, const SuiteOptions& o, BenchReport& report) {
  const int max_streams = o.quick ? 16 : 64;
  const int32_t out_tokens = o.quick ? 32 : 64;
  std::vector<int> counts;
  for (int b = 1; b <= max_streams; b *= 2) counts.push_back(b);
  ASSIGN_OR_RETURN(auto core, MakeCore(dir, o.threads, 2048, true, 256));
  const int64_t vocab = core->config().vocab_size;
  std::mt19937_64 rng(4);
  for (int b : counts) {
    std::vector<std::shared_ptr<router::RequestStream>> streams;
    for (int i = 0; i < b; ++i) {
      ASSIGN_OR_RETURN(auto sub,
                       core->scheduler().Submit(Greedy(RandomTokens(rng, 32, vocab), out_tokens)));
      streams.push_back(sub.stream);
    }
    // Time only steps where every stream decodes (prefill excluded).
    absl::Duration decode_time;
    int64_t decode_tokens = 0;
    Scheduler& s = core->scheduler();
    while (s.HasWork()) {
      const router::SchedulerStats before = s.GetStats();
      const absl::Time t0 = absl::Now();
      s.Step();
      const absl::Duration dt = absl::Now() - t0;
      const router::SchedulerStats st = s.GetStats();
      if (before.num_running == b && st.last_step_seqs == st.last_step_tokens &&
          st.last_step_seqs == b) {
        decode_time += dt;
        decode_tokens += st.last_step_tokens;
      }
      for (auto& stream : streams) {
        while (stream->Next(absl::ZeroDuration())) {
        }
      }
    }
    report.Add(
        WithCommon({.name = "router_decode_tok_s",
                    .value = decode_tokens / std::max(1e-9, absl::ToDoubleSeconds(decode_time)),
                    .unit = "tok/s",
                    .params = {{"streams", b},
                               {"prompt_tokens", 32},
                               {"output_tokens", out_tokens},
                               {"decode_steps_timed", b > 0 ? decode_tokens / b : 0}}},
                   o));
  }
  return absl::OkStatus();
}

absl::StatusOr<BenchReport> RunRouterSuite(const SuiteOptions& options) {
  SuiteOptions o = options;
  // This suite's figures are defined on the small preset; the shared default ("bench") would take
  // far too long on a small machine. An explicit --preset tiny|small or --model is honoured.
  if (o.model_dir.empty() && o.preset == "bench") o.preset = "small";
  std::string dir = o.model_dir;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, PresetCheckpoint(o));
  }
  BenchReport report("router");
  // --only ttft: just ttft_warm_over_cold_l1 (the quick warm/cold TTFT check).
  const auto only = o.flags.find("only");
  if (only != o.flags.end()) {
    if (only->second != "ttft") {
      return absl::InvalidArgumentError(absl::StrCat("--only: ttft, got '", only->second, "'"));
    }
    RETURN_IF_ERROR(WarmOverCold(dir, o, report));
    return report;
  }
  std::fprintf(stderr, "moe bench router: kv_slot_utilisation\n");
  RETURN_IF_ERROR(SlotUtilisation(dir, o, report, "kv_slot_utilisation", o.quick ? 16 : 64, 16,
                                  o.quick ? 512 : 2048, 16, 256, ">= 0.97"));
  std::fprintf(stderr,
               "moe bench router: kv_slot_utilisation_short (prompts 1-24, outputs 1-16)\n");
  RETURN_IF_ERROR(SlotUtilisation(dir, o, report, "kv_slot_utilisation_short", o.quick ? 64 : 256,
                                  1, 24, 1, 16, "reported: fragmentation of short sequences"));
  std::fprintf(stderr, "moe bench router: ttft_warm_over_cold_l1\n");
  RETURN_IF_ERROR(WarmOverCold(dir, o, report));
  std::fprintf(stderr, "moe bench router: prefix_sharing_concurrency_ratio\n");
  RETURN_IF_ERROR(SharingConcurrency(dir, o, report));
  std::fprintf(stderr, "moe bench router: decode tok/s vs streams\n");
  RETURN_IF_ERROR(DecodeThroughput(dir, o, report));
  return report;
}

}  // namespace

const std::vector<std::string> kRouterFlags = {"only"};

MOE_REGISTER_BENCH_SUITE_EX("router",
                            "scheduler + L1 KV: slot utilisation, warm/cold TTFT, prefix-sharing "
                            "concurrency, decode tok/s vs streams",
                            RunRouterSuite, kRouterFlags, 600, 180);

}  // namespace moe::bench
