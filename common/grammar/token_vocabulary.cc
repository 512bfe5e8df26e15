#include "common/grammar/token_vocabulary.h"

#include <algorithm>
#include <map>
#include <utility>

namespace moe::grammar {

absl::StatusOr<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::FromTokenizer(
    const tokenizer::Tokenizer& tokenizer, int64_t model_vocab_size,
    absl::Span<const int32_t> eos_ids) {
  if (model_vocab_size < 1) {
    return absl::InvalidArgumentError("token vocabulary: model vocabulary size must be >= 1");
  }
  std::vector<std::string> texts(static_cast<size_t>(model_vocab_size));
  std::vector<std::string> firsts(static_cast<size_t>(model_vocab_size));
  bool first_differs = false;
  const int64_t n = std::min<int64_t>(model_vocab_size, tokenizer.vocab_size());
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    std::string text, first;
    if (!tokenizer.AppendTokenBytes(id, /*is_first=*/false, /*skip_special=*/true, &text)) continue;
    tokenizer.AppendTokenBytes(id, /*is_first=*/true, /*skip_special=*/true, &first);
    first_differs |= first != text;
    texts[static_cast<size_t>(id)] = std::move(text);
    firsts[static_cast<size_t>(id)] = std::move(first);
  }
  std::vector<int32_t> eos(eos_ids.begin(), eos_ids.end());
  eos.insert(eos.end(), tokenizer.eos_ids().begin(), tokenizer.eos_ids().end());
  return FromTexts(std::move(texts), std::move(eos),
                   first_differs ? std::move(firsts) : std::vector<std::string>(),
                   tokenizer.decoder().strip_content(), tokenizer.decoder().strip_start());
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTexts(
    std::vector<std::string> texts, std::vector<int32_t> eos_ids,
    std::vector<std::string> first_texts, std::string strip_content, int strip_start) {
  std::shared_ptr<TokenVocabulary> v(new TokenVocabulary());
  v->size_ = static_cast<int64_t>(texts.size());
  std::sort(eos_ids.begin(), eos_ids.end());
  eos_ids.erase(std::unique(eos_ids.begin(), eos_ids.end()), eos_ids.end());
  std::erase_if(eos_ids, [&](int32_t id) { return id < 0 || id >= v->size_; });
  // An end id is never text (its bytes would otherwise be both an end and output).
  for (int32_t id : eos_ids) texts[static_cast<size_t>(id)].clear();
  v->texts_ = std::move(texts);
  if (!first_texts.empty()) {
    first_texts.resize(v->texts_.size());
    for (int32_t id : eos_ids) first_texts[static_cast<size_t>(id)].clear();
    v->first_texts_ = std::move(first_texts);
  }
  v->eos_ids_ = std::move(eos_ids);
  v->strip_content_ = strip_content.empty() ? std::string() : std::move(strip_content);
  v->strip_start_ = v->strip_content_.empty() ? 0 : strip_start;
  v->BuildTrie();
  return v;
}

bool TokenVocabulary::IsEos(int32_t id) const {
  return std::binary_search(eos_ids_.begin(), eos_ids_.end(), id);
}

void TokenVocabulary::BuildTrie() {
  struct Node {
    std::map<uint8_t, int32_t> children;
    std::vector<int32_t> tokens;
  };
  std::vector<Node> nodes(1);
  for (int32_t id = 0; id < size_; ++id) {
    const std::string& t = texts_[static_cast<size_t>(id)];
    if (t.empty()) continue;
    int32_t cur = 0;
    for (char c : t) {
      const uint8_t b = static_cast<uint8_t>(c);
      auto it = nodes[static_cast<size_t>(cur)].children.find(b);
      if (it == nodes[static_cast<size_t>(cur)].children.end()) {
        nodes.emplace_back();
        const int32_t child = static_cast<int32_t>(nodes.size() - 1);
        nodes[static_cast<size_t>(cur)].children.emplace(b, child);
        cur = child;
      } else {
        cur = it->second;
      }
    }
    nodes[static_cast<size_t>(cur)].tokens.push_back(id);
  }
  trie_ = Trie();
  for (const Node& n : nodes) {
    trie_.edge_begin.push_back(static_cast<int32_t>(trie_.edge_byte.size()));
    trie_.token_begin.push_back(static_cast<int32_t>(trie_.tokens.size()));
    for (const auto& [b, child] : n.children) {
      trie_.edge_byte.push_back(b);
      trie_.edge_child.push_back(child);
    }
    trie_.tokens.insert(trie_.tokens.end(), n.tokens.begin(), n.tokens.end());
  }
  trie_.edge_begin.push_back(static_cast<int32_t>(trie_.edge_byte.size()));
  trie_.token_begin.push_back(static_cast<int32_t>(trie_.tokens.size()));
}

}  // namespace moe::grammar
