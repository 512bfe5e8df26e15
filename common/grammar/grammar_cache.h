// Compiles constraints once and keeps them: the entry point of constrained decoding. The router
// owns one (over its tokenizer's vocabulary) and turns each Generate's constraint into a
// CompiledGrammar here; the gateway owns one to refuse a bad schema with a 400 before routing.
// A second request with the same constraint compiles nothing (moe_grammar_cache_hits_total).
// Failures are cached too, so a bad schema sent again costs a lookup.
//
// Bounded: at most max_grammars constraints (least recently used first out); each compiled
// grammar bounds its own state table and mask cache (compiled_grammar.h). A grammar dropped from
// the cache lives on while sequences still use it.
//
// Thread-safe. Compilation runs outside the lock, once per constraint: a thread that misses on a
// constraint another thread is compiling waits for that compile (counted as a hit) instead of
// compiling it again, so a burst of requests with one new schema costs one compile, not one each.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/config/schema.h"
#include "common/generation/constraint.h"
#include "common/grammar/automaton.h"
#include "common/grammar/compiled_grammar.h"
#include "common/grammar/grammar_metrics.h"
#include "common/grammar/json_schema.h"
#include "common/grammar/token_vocabulary.h"
#include "common/metrics/registry.h"

namespace moe::grammar {

struct GrammarCacheOptions {
  // Compiled constraints kept (LRU). Each holds its automaton plus bounded state/mask caches.
  int32_t max_grammars = 64;
  // Largest schema / pattern text accepted, bytes (larger: kInvalidArgument).
  int64_t max_spec_bytes = 256 << 10;
  // Whitespace run allowed between JSON tokens (0 = compact JSON only; bounded so that a model
  // cannot pad forever).
  int32_t max_whitespace = 4;
  // Automaton states one constraint may compile to (more: refused as too complex).
  int64_t max_automaton_states = 1 << 17;
  // Grammar states and token masks cached per constraint before its caches start over.
  int64_t max_grammar_states = 1 << 17;
  int64_t max_mask_cache_bytes = 16 << 20;
  // Deepest nesting (stack frames, about two per JSON level) a recursive grammar may reach.
  int32_t max_stack_depth = 64;

  static void Describe(common::config::Schema<GrammarCacheOptions>& s) {
    s.Add("max_grammars", &GrammarCacheOptions::max_grammars, "compiled constraints kept (LRU)")
        .Range(1, 1 << 20);
    s.Add("max_spec_bytes", &GrammarCacheOptions::max_spec_bytes,
          "largest schema/pattern text, bytes")
        .Range(1, 1 << 26);
    s.Add("max_whitespace", &GrammarCacheOptions::max_whitespace,
          "whitespace characters allowed in a row between JSON tokens")
        .Range(0, 64);
    s.Add("max_automaton_states", &GrammarCacheOptions::max_automaton_states,
          "automaton states per constraint (more: too complex)")
        .Range(16, 1 << 24);
    s.Add("max_grammar_states", &GrammarCacheOptions::max_grammar_states,
          "matching states cached per constraint")
        .Range(16, 1 << 24);
    s.Add("max_mask_cache_bytes", &GrammarCacheOptions::max_mask_cache_bytes,
          "token masks cached per constraint, bytes")
        .Range(1 << 10, int64_t{1} << 34);
    s.Add("max_stack_depth", &GrammarCacheOptions::max_stack_depth,
          "deepest nesting of recursive grammars, frames")
        .Range(2, 4096);
  }
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

class GrammarCache {
 public:
  // `registry` and `clock` must outlive the cache (and every grammar it hands out).
  GrammarCache(const GrammarCacheOptions& options,
               std::shared_ptr<const TokenVocabulary> vocabulary,
               common::metrics::Registry& registry, common::Clock& clock);
  GrammarCache(const GrammarCache&) = delete;
  GrammarCache& operator=(const GrammarCache&) = delete;

  // The compiled `constraint`. kInvalidArgument naming the problem (a bad schema keyword and its
  // JSON pointer, a regex feature, a spec over max_spec_bytes, a constraint too complex).
  // REQUIRES: constraint.active().
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Get(
      const generation::Constraint& constraint);

  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  int64_t size() const;

 private:
  using Entry = absl::StatusOr<std::shared_ptr<const CompiledGrammar>>;
  Entry Compile(const generation::Constraint& constraint) const;

  // Constant after construction.
  const GrammarCacheOptions options_;
  const std::shared_ptr<const TokenVocabulary> vocabulary_;
  const GrammarMetrics metrics_;
  common::Clock& clock_;

  mutable absl::Mutex mu_;
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  absl::flat_hash_map<std::string, std::pair<std::list<std::string>::iterator, Entry>> entries_
      ABSL_GUARDED_BY(mu_);
  // Compiles in progress, by key; `done` and `result` are guarded by mu_ too.
  struct Flight {
    bool done = false;
    Entry result = absl::UnknownError("compiling");
  };
  absl::flat_hash_map<std::string, std::shared_ptr<Flight>> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::grammar
