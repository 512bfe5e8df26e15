// The BPE model of a tokenizer.json: vocabulary, ranked merges, byte fallback, and a word cache.
//
// Merging is rank-based over a linked list of symbols with a binary heap, O(n log n) in the word
// length: the lowest-ranked adjacent pair merges first, ties go to the leftmost pair (the order of
// HF tokenizers). Words shorter than kMaxCachedWordBytes are cached (sharded, thread-safe).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace moe::tokenizer {

class BpeModel {
 public:
  struct Options {
    int32_t unk_id = -1;         // -1: no unknown token (unknown characters are dropped)
    bool byte_fallback = false;  // unknown characters become <0xNN> tokens
    bool fuse_unk = false;       // consecutive unknown characters become one unk
    bool ignore_merges = false;  // a word that is itself in the vocabulary is one token
  };

  // `vocab` maps token -> id; `merges` are (left, right) pairs in rank order. A merge whose parts
  // or result are not in the vocabulary is an error naming `where` and the merge's index.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      absl::flat_hash_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, const Options& options,
      const std::string& where);

  // Appends the ids of `word` (UTF-8; already normalized and pre-tokenized) to `out`.
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;

  // -1 when `token` is not in the vocabulary.
  int32_t TokenToId(std::string_view token) const;
  const absl::flat_hash_map<std::string, int32_t>& vocab() const { return vocab_; }
  // True when no vocabulary token contains `sep` right after a different character, so a word may
  // be cut before each such `sep` without changing the result (lets SentencePiece-style inputs with
  // no pre-tokenizer be encoded word by word).
  bool CanSplitBefore(std::string_view sep) const;

  static constexpr size_t kMaxCachedWordBytes = 256;

 private:
  BpeModel() = default;
  void EncodeUncached(std::string_view word, std::vector<int32_t>* out) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  // (left id << 32 | right id) -> (rank, merged id).
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> ids, -1 when absent
  Options options_;

  struct CacheShard {
    absl::Mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map ABSL_GUARDED_BY(mu);
  };
  static constexpr int kCacheShards = 16;
  static constexpr size_t kCacheShardCapacity = 8192;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace moe::tokenizer
