#include "common/grammar/compiled_grammar.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grammar/grammar_metrics.h"

namespace moe::grammar {

GrammarMetrics::GrammarMetrics(common::metrics::Registry& registry)
    : compilations_total(&registry.AddCounter("moe_grammar_compilations_total",
                                              "Constraints compiled (grammar cache misses)")),
      cache_hits_total(&registry.AddCounter("moe_grammar_cache_hits_total",
                                            "Constraints served from the grammar cache")),
      compile_seconds(&registry.AddHistogram("moe_grammar_compile_seconds",
                                             "Time to compile one constraint",
                                             common::metrics::LatencyBuckets())),
      masks_computed_total(&registry.AddCounter(
          "moe_grammar_masks_computed_total", "Token masks computed (one per new grammar state)")),
      mask_cache_hits_total(&registry.AddCounter("moe_grammar_mask_cache_hits_total",
                                                 "Token masks reused from the mask cache")) {}

namespace {

const TokenBitmask& EmptyMask() {
  static const TokenBitmask* empty = new TokenBitmask();
  return *empty;
}

void SetBit(TokenBitmask* mask, int32_t id) {
  uint32_t& w = mask->words[static_cast<size_t>(id / 32)];
  const uint32_t bit = 1u << (id % 32);
  if ((w & bit) == 0) {
    w |= bit;
    ++mask->num_allowed;
  }
}

}  // namespace

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Automaton> automaton,
                                 std::shared_ptr<const TokenVocabulary> vocabulary,
                                 const CompiledGrammarOptions& options, GrammarMetrics metrics)
    : automaton_(std::move(automaton)),
      vocabulary_(std::move(vocabulary)),
      options_(options),
      metrics_(metrics),
      table_(*automaton_, options.states) {}

bool CompiledGrammar::Plain(const Position& pos) const {
  return (!pos.first || !vocabulary_->first_differs()) && pos.strip_left == 0;
}

CompiledGrammar::Position CompiledGrammar::Start() const {
  absl::MutexLock lock(&mu_);
  Position pos;
  pos.config = table_.Initial();
  pos.epoch = epoch_;
  pos.value = table_.Export(pos.config);
  pos.first = true;
  pos.strip_left = vocabulary_->strip_start();
  Finalize(&pos);
  return pos;
}

void CompiledGrammar::Sync(Position* pos) const {
  if (table_.Full()) {
    table_.Reset();
    ++epoch_;
    masks_.clear();
    mask_bytes_ = 0;
  }
  if (pos->epoch != epoch_) {
    pos->config = table_.Import(pos->value);
    pos->epoch = epoch_;
  }
}

void CompiledGrammar::Finalize(Position* pos) const {
  pos->accepting = table_.Accepting(pos->config);
  pos->terminated = pos->accepting && !table_.CanContinue(pos->config);
}

std::string_view CompiledGrammar::Render(const Position& pos, int32_t id, int* strip_after) const {
  std::string_view v = pos.first ? vocabulary_->first_text(id) : vocabulary_->text(id);
  int strip = pos.strip_left;
  const std::string& c = vocabulary_->strip_content();
  // As tokenizer::IncrementalDetokenizer: drop leading strip characters while they lead.
  while (strip > 0 && !v.empty()) {
    if (v.substr(0, c.size()) == c) {
      v.remove_prefix(c.size());
      --strip;
    } else {
      strip = 0;
    }
  }
  *strip_after = strip;
  return v;
}

ConfigId CompiledGrammar::Walk(ConfigId config, std::string_view bytes) const {
  for (char ch : bytes) {
    config = table_.Consume(config, static_cast<uint8_t>(ch));
    if (config == kDeadConfig) return kDeadConfig;
  }
  return config;
}

void CompiledGrammar::FillFromTrie(ConfigId config, TokenBitmask* mask) const {
  const TokenVocabulary::Trie& trie = vocabulary_->trie();
  // Depth-first over (trie node, configuration after its bytes); a rejected byte prunes the
  // whole subtree below it.
  std::vector<std::pair<int32_t, ConfigId>> work{{0, config}};
  while (!work.empty()) {
    const auto [node, cfg] = work.back();
    work.pop_back();
    for (int32_t e = trie.edge_begin[static_cast<size_t>(node)];
         e < trie.edge_begin[static_cast<size_t>(node) + 1]; ++e) {
      const ConfigId next = table_.Consume(cfg, trie.edge_byte[static_cast<size_t>(e)]);
      if (next == kDeadConfig) continue;
      const int32_t child = trie.edge_child[static_cast<size_t>(e)];
      for (int32_t t = trie.token_begin[static_cast<size_t>(child)];
           t < trie.token_begin[static_cast<size_t>(child) + 1]; ++t) {
        SetBit(mask, trie.tokens[static_cast<size_t>(t)]);
      }
      work.emplace_back(child, next);
    }
  }
}

std::shared_ptr<const TokenBitmask> CompiledGrammar::Mask(Position* pos) const {
  absl::MutexLock lock(&mu_);
  Sync(pos);
  const bool plain = Plain(*pos);
  const uint64_t mode = plain ? 0 : 1 + (pos->first ? 1 : 0) + 2 * std::min(pos->strip_left, 100);
  const uint64_t key = (static_cast<uint64_t>(pos->config) << 8) | mode;
  if (auto it = masks_.find(key); it != masks_.end()) {
    metrics_.mask_cache_hits_total->Increment();
    return it->second;
  }
  auto mask = std::make_shared<TokenBitmask>();
  mask->words.assign(static_cast<size_t>((vocabulary_->size() + 31) / 32), 0);
  if (plain) {
    FillFromTrie(pos->config, mask.get());
  } else {
    // The first token renders differently: every text token, one at a time.
    for (int32_t id = 0; id < vocabulary_->size(); ++id) {
      if (!vocabulary_->is_text(id)) continue;
      int strip_after;
      const std::string_view v = Render(*pos, id, &strip_after);
      // A token the start strip swallows whole renders nothing: allowed, it changes nothing.
      const bool ok =
          v.empty() ? strip_after < pos->strip_left : Walk(pos->config, v) != kDeadConfig;
      if (ok) SetBit(mask.get(), id);
    }
  }
  if (table_.Accepting(pos->config)) {
    for (int32_t id : vocabulary_->eos_ids()) SetBit(mask.get(), id);
  }
  metrics_.masks_computed_total->Increment();
  const int64_t bytes = static_cast<int64_t>(mask->words.size() * sizeof(uint32_t)) + 64;
  if (mask_bytes_ + bytes > options_.max_mask_cache_bytes) {
    masks_.clear();
    mask_bytes_ = 0;
  }
  masks_.emplace(key, mask);
  mask_bytes_ += bytes;
  return mask;
}

absl::Status CompiledGrammar::Advance(Position* pos, int32_t id) const {
  absl::MutexLock lock(&mu_);
  Sync(pos);
  if (pos->ended) return absl::InvalidArgumentError("the constrained output has already ended");
  if (vocabulary_->IsEos(id)) {
    if (!table_.Accepting(pos->config)) {
      return absl::InvalidArgumentError(
          absl::StrCat("end token ", id, " before the constrained output is complete"));
    }
    pos->ended = true;
    pos->terminated = true;
    return absl::OkStatus();
  }
  if (!vocabulary_->is_text(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", id, " is not text; the constraint does not allow it"));
  }
  int strip_after;
  const std::string_view v = Render(*pos, id, &strip_after);
  const ConfigId next = v.empty() ? (strip_after < pos->strip_left ? pos->config : kDeadConfig)
                                  : Walk(pos->config, v);
  if (next == kDeadConfig) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", id, " does not continue the constrained output"));
  }
  pos->config = next;
  pos->value = table_.Export(next);
  pos->first = false;
  pos->strip_left = strip_after;
  Finalize(pos);
  return absl::OkStatus();
}

bool CompiledGrammar::Matches(std::string_view text) const {
  absl::MutexLock lock(&mu_);
  const ConfigId c = Walk(table_.Initial(), text);
  return c != kDeadConfig && table_.Accepting(c);
}

bool CompiledGrammar::IsPrefix(std::string_view text) const {
  absl::MutexLock lock(&mu_);
  return Walk(table_.Initial(), text) != kDeadConfig;
}

int64_t CompiledGrammar::num_cached_masks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(masks_.size());
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), pos_(grammar_->Start()) {}

const TokenBitmask& GrammarMatcher::NextMask() {
  if (pos_.ended) return EmptyMask();
  if (mask_ == nullptr) mask_ = grammar_->Mask(&pos_);
  return *mask_;
}

absl::Status GrammarMatcher::Advance(int32_t id) {
  absl::Status s = grammar_->Advance(&pos_, id);
  if (s.ok()) mask_ = nullptr;
  return s;
}

}  // namespace moe::grammar
