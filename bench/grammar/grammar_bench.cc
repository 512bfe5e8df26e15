// `moe bench grammar` (DESIGN.md §6): what constrained decoding costs, on the small preset (or
// --model DIR), the router's scheduler driven step by step on this thread:
//   constrained_decode_tok_s_b32        decode tok/s of 32 greedy streams under a nested JSON
//                                       schema; baseline: the same prompts unconstrained, each to
//                                       the same length, rounds alternated in one run (medians);
//                                       ratio goal >= 0.95
//   grammar_mask_us_per_token           the matcher's work per generated token (mask lookup or
//                                       computation + advancing over the token's bytes), replaying
//                                       the constrained outputs: warm mask cache, and cold in
//                                       params
//   grammar_compile_ms                  compiling the schema on a cache miss; the second request's
//                                       lookup (a cache hit, nothing compiled) in params
// Only pure decode steps with exactly 32 running sequences are timed (64 requests per round, at
// most 32 at once, so the batch stays full as requests finish).
// The decode ratio is noisy on a shared machine; grammar_mask_us_per_token x tok/s (its
// share_of_constrained_decode) is the matcher's own share of a decode token's time.
// --quick: 2 rounds instead of 5, 32 requests per round.
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
#include "common/grammar/compiled_grammar.h"
#include "common/grammar/grammar_cache.h"
#include "services/router/core/router_core.h"

namespace moe::bench {
namespace {

using router::GenerateRequest;
using router::RouterCore;
using router::Scheduler;

// The e2e test's nested schema (tests/e2e/structured_outputs.test.mjs).
constexpr char kNestedSchema[] = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "role": {"type": "string", "enum": ["admin", "user", "guest"]},
    "address": {"$ref": "#/$defs/address"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
    "scores": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
      "type": "object",
      "properties": {"k": {"type": "string", "maxLength": 4},
                     "v": {"type": "number", "minimum": 0, "maximum": 1}},
      "required": ["k", "v"], "additionalProperties": false}},
    "active": {"type": "boolean"},
    "note": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]}
  },
  "required": ["name", "age", "role", "address", "tags", "scores", "active", "note"],
  "additionalProperties": false,
  "$defs": {"address": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 10},
                   "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
    "required": ["city", "zip"], "additionalProperties": false}}
})";

constexpr int kStreams = 32;

BenchResult WithCommon(BenchResult r, const SuiteOptions& o) {
  r.params["model"] = o.model_dir.empty() ? o.preset : o.model_dir;
  r.params["threads"] = o.threads;
  r.params["quick"] = o.quick;
  return r;
}

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> out(n);
  for (auto& t : out) t = static_cast<int32_t>(16 + rng() % (vocab - 16));
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Round {
  double tok_s = 0;
  int64_t timed_steps = 0;
  int64_t tokens = 0;  // every generated token
  std::vector<std::vector<int32_t>> outputs;
};

// One round: a request per prompt, at most kStreams at once; decode tok/s over steps with
// kStreams sequences all decoding.
absl::StatusOr<Round> RunRound(Scheduler& s, const std::vector<std::vector<int32_t>>& prompts,
                               std::shared_ptr<const grammar::CompiledGrammar> grammar,
                               const std::vector<int32_t>& max_tokens) {
  std::vector<std::shared_ptr<router::RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r;
    r.prompt_token_ids = prompts[i];
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens[i];
    r.sampling.ignore_eos = grammar == nullptr;  // unconstrained: lengths as asked
    r.grammar = grammar;
    ASSIGN_OR_RETURN(auto sub, s.Submit(std::move(r)));
    streams.push_back(sub.stream);
  }
  Round round;
  round.outputs.resize(streams.size());
  absl::Duration decode_time;
  int64_t decode_tokens = 0;
  while (s.HasWork()) {
    const router::SchedulerStats before = s.GetStats();
    const absl::Time t0 = absl::Now();
    s.Step();
    const absl::Duration dt = absl::Now() - t0;
    const router::SchedulerStats st = s.GetStats();
    if (before.num_running == kStreams && st.last_step_seqs == kStreams &&
        st.last_step_tokens == kStreams) {
      decode_time += dt;
      decode_tokens += st.last_step_tokens;
      ++round.timed_steps;
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      while (auto e = streams[i]->Next(absl::ZeroDuration())) {
        if (e->final() && !e->status.ok()) return e->status;
        round.outputs[i].insert(round.outputs[i].end(), e->token_ids.begin(), e->token_ids.end());
        round.tokens += static_cast<int64_t>(e->token_ids.size());
      }
    }
  }
  round.tok_s = decode_tokens / std::max(1e-9, absl::ToDoubleSeconds(decode_time));
  return round;
}

// The matcher's time per token over `outputs`, with `grammar`'s caches as they are.
absl::StatusOr<double> ReplayUsPerToken(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                                        const std::vector<std::vector<int32_t>>& outputs) {
  int64_t tokens = 0;
  const absl::Time t0 = absl::Now();
  for (const std::vector<int32_t>& out : outputs) {
    grammar::GrammarMatcher m(grammar);
    for (int32_t id : out) {
      const grammar::TokenBitmask& mask = m.NextMask();
      if (!mask.allowed(id)) {
        return absl::InternalError(absl::StrCat("replay: token ", id, " is not in the mask"));
      }
      RETURN_IF_ERROR(m.Advance(id));
      ++tokens;
    }
  }
  return absl::ToDoubleMicroseconds(absl::Now() - t0) / std::max<int64_t>(1, tokens);
}

absl::StatusOr<BenchReport> RunGrammarSuite(const SuiteOptions& options) {
  SuiteOptions o = options;
  if (o.model_dir.empty() && o.preset == "bench") o.preset = "small";
  std::string dir = o.model_dir;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, PresetCheckpoint(o));
  }
  router::RouterCoreOptions co;
  co.model_dir = dir;
  co.num_threads = o.threads;
  co.kv_num_blocks = 2048;
  co.scheduler.max_num_seqs = kStreams;
  co.scheduler.max_batch_tokens = 2048;
  co.scheduler.chunked_prefill_size = 512;
  co.scheduler.max_waiting = 100000;
  common::metrics::Registry registry;
  ASSIGN_OR_RETURN(std::unique_ptr<RouterCore> core,
                   RouterCore::Create(co, registry, common::SystemClock::Get()));
  if (core->grammar_cache() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " has no tokenizer: constrained decoding is off"));
  }
  BenchReport report("grammar");
  const generation::Constraint constraint{.kind = generation::ConstraintKind::kJsonSchema,
                                          .spec = kNestedSchema};

  std::fprintf(stderr, "moe bench grammar: compile\n");
  const absl::Time c0 = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<const grammar::CompiledGrammar> compiled,
                   core->grammar_cache()->Get(constraint));
  const double compile_ms = absl::ToDoubleMilliseconds(absl::Now() - c0);
  const absl::Time h0 = absl::Now();
  ASSIGN_OR_RETURN(auto again, core->grammar_cache()->Get(constraint));
  const double hit_ms = absl::ToDoubleMilliseconds(absl::Now() - h0);
  if (again != compiled) return absl::InternalError("the second Get compiled again");
  report.Add(WithCommon({.name = "grammar_compile_ms",
                         .value = compile_ms,
                         .unit = "ms",
                         .params = {{"schema", "nested (tests/e2e/structured_outputs)"},
                                    {"automaton_states", compiled->automaton().num_states()},
                                    {"second_request_ms", hit_ms},
                                    {"second_request_compiled", false}}},
                        o));

  std::fprintf(stderr, "moe bench grammar: decode, constrained vs unconstrained, %d streams\n",
               kStreams);
  const int rounds = o.quick ? 2 : 5;
  const int n = o.quick ? kStreams : 2 * kStreams;
  const int64_t vocab = core->config().vocab_size;
  std::mt19937_64 rng(21);
  std::vector<double> plain, constrained, ratios;
  int64_t plain_steps = 0, constrained_steps = 0, constrained_tokens = 0;
  std::vector<std::vector<int32_t>> outputs;
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < n; ++i) prompts.push_back(RandomTokens(rng, 32, vocab));
    // Constrained first; then the same prompts unconstrained, each to the same length, so that
    // both runs decode the same batch at the same positions (attention cost grows with them).
    ASSIGN_OR_RETURN(Round c, RunRound(core->scheduler(), prompts, compiled,
                                       std::vector<int32_t>(prompts.size(), 1024)));
    std::vector<int32_t> lengths;
    for (const auto& out : c.outputs) {
      // The constrained run's last token is the EOS appended without an engine step.
      lengths.push_back(std::max<int32_t>(1, static_cast<int32_t>(out.size()) - 1));
    }
    ASSIGN_OR_RETURN(Round u, RunRound(core->scheduler(), prompts, nullptr, lengths));
    plain.push_back(u.tok_s);
    constrained.push_back(c.tok_s);
    ratios.push_back(u.tok_s > 0 ? c.tok_s / u.tok_s : 0);
    plain_steps += u.timed_steps;
    constrained_steps += c.timed_steps;
    constrained_tokens += c.tokens;
    for (auto& out : c.outputs) outputs.push_back(std::move(out));
    std::fprintf(stderr, "  round %d: unconstrained %.0f tok/s, constrained %.0f tok/s\n", r,
                 u.tok_s, c.tok_s);
  }
  const double u = Median(plain), c = Median(constrained);
  report.Add(
      WithCommon({.name = "constrained_decode_tok_s_b32",
                  .value = c,
                  .unit = "tok/s",
                  .params = {{"streams", kStreams},
                             {"rounds", rounds},
                             {"requests_per_round", n},
                             {"prompt_tokens", 32},
                             {"constrained_tok_s", c},
                             {"unconstrained_tok_s", u},
                             {"constrained_tok_s_rounds", constrained},
                             {"unconstrained_tok_s_rounds", plain},
                             {"timed_steps_constrained", constrained_steps},
                             {"timed_steps_unconstrained", plain_steps},
                             {"constrained_mean_output_tokens",
                              static_cast<double>(constrained_tokens) / (rounds * n)},
                             {"same_prompts_and_lengths", true},
                             {"ratio_rounds", ratios},
                             {"ratio_median_of_rounds", Median(ratios)},
                             {"goal", "ratio >= 0.95"}},
                  .baseline = Baseline{.name = "unconstrained_decode_tok_s_b32", .value = u}},
                 o));

  std::fprintf(stderr, "moe bench grammar: mask cost per token\n");
  ASSIGN_OR_RETURN(double warm_us, ReplayUsPerToken(compiled, outputs));
  // Cold: a fresh compile of the same schema (empty state table and mask cache), outside the cache.
  grammar::GrammarCacheOptions fresh_options;
  fresh_options.max_grammars = 1;
  common::metrics::Registry fresh_registry;
  grammar::GrammarCache fresh(fresh_options,
                              // Non-owning: the core outlives this cache.
                              std::shared_ptr<const grammar::TokenVocabulary>(
                                  std::shared_ptr<void>(), &core->grammar_cache()->vocabulary()),
                              fresh_registry, common::SystemClock::Get());
  ASSIGN_OR_RETURN(auto cold_grammar, fresh.Get(constraint));
  ASSIGN_OR_RETURN(double cold_us, ReplayUsPerToken(cold_grammar, outputs));
  int64_t replayed = 0;
  for (const auto& out : outputs) replayed += static_cast<int64_t>(out.size());
  report.Add(WithCommon({.name = "grammar_mask_us_per_token",
                         .value = warm_us,
                         .unit = "us",
                         .params = {{"cold_us_per_token", cold_us},
                                    // The matcher's share of a decode token's time at 32 streams.
                                    {"share_of_constrained_decode", warm_us * c / 1e6},
                                    {"tokens_replayed", replayed},
                                    {"vocab", vocab},
                                    {"masks_cached", compiled->num_cached_masks()}}},
                        o));
  return report;
}

}  // namespace

MOE_REGISTER_BENCH_SUITE("grammar",
                         "constrained decoding: decode tok/s with a nested JSON schema vs "
                         "unconstrained at 32 streams, mask cost per token, schema compile time",
                         RunGrammarSuite);

}  // namespace moe::bench
