#include "common/tokenizer/bpe_model.h"

#include <queue>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tokenizer/unicode.h"

namespace moe::tokenizer {
namespace {

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Symbol {
  int32_t id;
  int32_t prev;  // index of the previous live symbol, -1 at the start
  int32_t next;  // index of the next live symbol, -1 at the end
  bool alive;
};

struct Candidate {
  int32_t rank;
  int32_t pos;  // index of the left symbol
  int32_t left_id, right_id, merged_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    absl::flat_hash_map<std::string, int32_t> vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, const Options& options,
    const std::string& where) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->vocab_ = std::move(vocab);
  m->options_ = options;
  m->merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [l, r] = merges[i];
    const int32_t a = m->TokenToId(l), b = m->TokenToId(r), c = m->TokenToId(l + r);
    if (a < 0 || b < 0 || c < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".merges[", i, "]: '", l, " ", r,
                                                     "' uses a token not in the vocabulary"));
    }
    // The first (lowest-ranked) occurrence of a pair wins.
    m->merges_.try_emplace(PairKey(a, b), static_cast<int32_t>(i), c);
  }
  for (int b = 0; b < 256; ++b) {
    m->byte_ids_[b] = m->TokenToId(absl::StrFormat("<0x%02X>", b));
  }
  return m;
}

int32_t BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(AbslView(token));
  return it == vocab_.end() ? -1 : it->second;
}

bool BpeModel::CanSplitBefore(std::string_view sep) const {
  if (sep.empty()) return false;
  for (const auto& [token, id] : vocab_) {
    size_t pos = token.find(sep, 1);
    while (pos != std::string::npos) {
      // The character just before `pos`.
      size_t start = pos - 1;
      while (start > 0 && (static_cast<unsigned char>(token[start]) & 0xC0) == 0x80) --start;
      if (std::string_view(token).substr(start, pos - start) != sep) return false;
      pos = token.find(sep, pos + 1);
    }
  }
  return true;
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    const int32_t id = TokenToId(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  if (word.size() >= kMaxCachedWordBytes) {
    EncodeUncached(word, out);
    return;
  }
  CacheShard& shard = cache_[absl::Hash<absl::string_view>()(AbslView(word)) % kCacheShards];
  {
    absl::MutexLock lock(&shard.mu);
    auto it = shard.map.find(AbslView(word));
    if (it != shard.map.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out->size();
  EncodeUncached(word, out);
  std::vector<int32_t> ids(out->begin() + static_cast<std::ptrdiff_t>(before), out->end());
  absl::MutexLock lock(&shard.mu);
  if (shard.map.size() >= kCacheShardCapacity) shard.map.clear();
  shard.map.emplace(std::string(word), std::move(ids));
}

void BpeModel::EncodeUncached(std::string_view word, std::vector<int32_t>* out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  bool prev_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    const size_t len =
        std::min<size_t>(Utf8SeqLen(static_cast<unsigned char>(word[pos])), word.size() - pos);
    const int32_t id = TokenToId(word.substr(pos, len));
    if (id >= 0) {
      symbols.push_back({id, -1, -1, true});
      prev_unk = false;
    } else {
      bool all_bytes = options_.byte_fallback;
      for (size_t k = 0; all_bytes && k < len; ++k) {
        all_bytes = byte_ids_[static_cast<unsigned char>(word[pos + k])] >= 0;
      }
      if (all_bytes) {
        for (size_t k = 0; k < len; ++k) {
          symbols.push_back({byte_ids_[static_cast<unsigned char>(word[pos + k])], -1, -1, true});
        }
        prev_unk = false;
      } else if (options_.unk_id >= 0) {
        if (!(options_.fuse_unk && prev_unk)) symbols.push_back({options_.unk_id, -1, -1, true});
        prev_unk = true;
      }
    }
    pos += len;
  }
  const int32_t n = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int32_t i) {
    const int32_t j = symbols[i].next;
    if (j < 0) return;
    auto it = merges_.find(PairKey(symbols[i].id, symbols[j].id));
    if (it != merges_.end()) {
      heap.push({it->second.first, i, symbols[i].id, symbols[j].id, it->second.second});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.pos];
    if (!left.alive || left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right_id) continue;
    left.id = c.merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

}  // namespace moe::tokenizer
