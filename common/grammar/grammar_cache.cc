#include "common/grammar/grammar_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace moe::grammar {

GrammarCache::GrammarCache(const GrammarCacheOptions& options,
                           std::shared_ptr<const TokenVocabulary> vocabulary,
                           common::metrics::Registry& registry, common::Clock& clock)
    : options_(options), vocabulary_(std::move(vocabulary)), metrics_(registry), clock_(clock) {}

GrammarCache::Entry GrammarCache::Compile(const generation::Constraint& constraint) const {
  const int64_t spec_bytes = static_cast<int64_t>(constraint.spec.size());
  int64_t choice_bytes = 0;
  for (const std::string& c : constraint.choices) choice_bytes += static_cast<int64_t>(c.size());
  if (spec_bytes + choice_bytes > options_.max_spec_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", generation::ConstraintKindName(constraint.kind),
                     " constraint is larger than ", options_.max_spec_bytes, " bytes"));
  }
  JsonGrammarOptions json;
  json.max_whitespace = options_.max_whitespace;
  absl::StatusOr<Grammar> grammar = ConstraintToGrammar(constraint, json);
  if (!grammar.ok()) return grammar.status();
  AutomatonLimits limits;
  limits.max_dfa_states = options_.max_automaton_states;
  limits.max_nfa_states = 8 * options_.max_automaton_states;
  absl::StatusOr<std::shared_ptr<const Automaton>> automaton = Automaton::Compile(*grammar, limits);
  if (!automaton.ok()) return automaton.status();
  CompiledGrammarOptions compiled;
  compiled.states.max_configs = options_.max_grammar_states;
  compiled.states.max_stack_depth = options_.max_stack_depth;
  compiled.max_mask_cache_bytes = options_.max_mask_cache_bytes;
  auto out = std::make_shared<const CompiledGrammar>(*std::move(automaton), vocabulary_, compiled,
                                                     metrics_);
  // The first step's mask is computed now, so that the first decode step pays a lookup only.
  GrammarMatcher(out).NextMask();
  return std::shared_ptr<const CompiledGrammar>(std::move(out));
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::Get(
    const generation::Constraint& constraint) {
  std::string key = constraint.CacheKey();
  std::shared_ptr<Flight> flight;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.first);
      metrics_.cache_hits_total->Increment();
      return it->second.second;
    }
    if (auto f = in_flight_.find(key); f != in_flight_.end()) {
      // Another thread is compiling it: wait for that result.
      std::shared_ptr<Flight> other = f->second;
      mu_.Await(absl::Condition(&other->done));
      metrics_.cache_hits_total->Increment();
      return other->result;
    }
    flight = std::make_shared<Flight>();
    in_flight_.emplace(key, flight);
  }
  const absl::Time start = clock_.Now();
  Entry compiled = Compile(constraint);
  metrics_.compilations_total->Increment();
  metrics_.compile_seconds->Observe(absl::ToDoubleSeconds(clock_.Now() - start));
  absl::MutexLock lock(&mu_);
  flight->result = compiled;
  flight->done = true;
  in_flight_.erase(key);
  lru_.push_front(key);
  entries_.emplace(std::move(key), std::make_pair(lru_.begin(), compiled));
  while (static_cast<int64_t>(entries_.size()) > options_.max_grammars) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  return compiled;
}

int64_t GrammarCache::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(entries_.size());
}

}  // namespace moe::grammar
