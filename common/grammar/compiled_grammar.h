// One constraint compiled for one tokenizer: the automaton, the vocabulary, the lazily built
// state table (state_table.h) and a cache of token masks per grammar state, shared by every
// sequence that uses the constraint; and GrammarMatcher, one sequence's position in it.
//
// A mask is computed once per (grammar state, position mode) by walking the vocabulary's byte
// trie through the state table (tokens sharing a prefix share the walk; subtrees die at the first
// byte the grammar rejects), then reused by every later step and sequence in that state: the
// steady-state cost of a decode step is a hash lookup for the mask, applying it to the logits,
// and a few cached transitions for the sampled token's bytes. The mask is a pure function of the
// sequence's own state, never of its batch.
//
// Ending: the end ids (the vocabulary's EOS ids) are allowed exactly when the output so far is
// accepted; taking one ends the matcher. terminated() says that nothing but an end id can follow.
//
// Thread-safety: CompiledGrammar is thread-safe (one mutex over its tables and mask cache);
// a GrammarMatcher is thread-compatible (one sequence, one thread at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/grammar/automaton.h"
#include "common/grammar/grammar_metrics.h"
#include "common/grammar/state_table.h"
#include "common/grammar/token_vocabulary.h"

namespace moe::grammar {

// Allowed tokens: bit (id % 32) of words[id / 32].
struct TokenBitmask {
  std::vector<uint32_t> words;  // [ceil(vocab / 32)]
  int64_t num_allowed = 0;
  bool allowed(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id / 32) < words.size() &&
           ((words[static_cast<size_t>(id / 32)] >> (id % 32)) & 1u);
  }
};

struct CompiledGrammarOptions {
  StateTableOptions states;
  // Token masks cached per grammar; past this the cache starts over. Each mask is vocab / 8
  // bytes.
  int64_t max_mask_cache_bytes = 16 << 20;
};

class CompiledGrammar {
 public:
  CompiledGrammar(std::shared_ptr<const Automaton> automaton,
                  std::shared_ptr<const TokenVocabulary> vocabulary,
                  const CompiledGrammarOptions& options, GrammarMetrics metrics);
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

  const Automaton& automaton() const { return *automaton_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }

  // Whether the bytes `text` are accepted whole / are a prefix of an accepted text. For tests
  // and the gateway's checks.
  bool Matches(std::string_view text) const;
  bool IsPrefix(std::string_view text) const;
  int64_t num_cached_masks() const;

 private:
  friend class GrammarMatcher;

  // Where a matcher stands. `value` carries it across a table reset.
  struct Position {
    ConfigId config = kDeadConfig;
    uint64_t epoch = 0;
    StateTable::ConfigValue value;
    bool first = true;   // no token taken yet
    int strip_left = 0;  // sequence-start strip characters still to drop
    bool ended = false;
    bool accepting = false;
    bool terminated = false;
  };

  Position Start() const;
  // The mask for `pos` (shared: the cache may drop its copy at any time).
  std::shared_ptr<const TokenBitmask> Mask(Position* pos) const;
  // kInvalidArgument when `id` is not allowed at `pos` (pos unchanged).
  absl::Status Advance(Position* pos, int32_t id) const;

  // Resets a full table and brings `pos` to the current epoch.
  void Sync(Position* pos) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rendering of `id` at `pos` after the start strip; sets *strip_after.
  std::string_view Render(const Position& pos, int32_t id, int* strip_after) const;
  ConfigId Walk(ConfigId config, std::string_view bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillFromTrie(ConfigId config, TokenBitmask* mask) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finalize(Position* pos) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Plain(const Position& pos) const;

  // Constant after construction.
  const std::shared_ptr<const Automaton> automaton_;
  const std::shared_ptr<const TokenVocabulary> vocabulary_;
  const CompiledGrammarOptions options_;
  const GrammarMetrics metrics_;

  mutable absl::Mutex mu_;
  mutable StateTable table_ ABSL_GUARDED_BY(mu_);
  mutable uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // (config << 8 | mode) -> mask.
  mutable absl::flat_hash_map<uint64_t, std::shared_ptr<const TokenBitmask>> masks_
      ABSL_GUARDED_BY(mu_);
  mutable int64_t mask_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // The tokens allowed next, over vocabulary().size() ids: text tokens that keep the output a
  // prefix of an accepted text, plus the end ids when the output so far is accepted. Valid until
  // the next Advance(). Empty after ended().
  const TokenBitmask& NextMask();
  // Takes `id` as the next output token. kInvalidArgument (nothing changes) when the grammar does
  // not allow it here.
  absl::Status Advance(int32_t id);

  // An end id is allowed now (the output so far is complete).
  bool accepting() const { return pos_.accepting; }
  // Complete, and no more text can follow: only an end id can come next.
  bool terminated() const { return pos_.terminated; }
  // An end id was taken.
  bool ended() const { return pos_.ended; }
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  CompiledGrammar::Position pos_;
  std::shared_ptr<const TokenBitmask> mask_;  // for the current position; null: not computed
};

}  // namespace moe::grammar
