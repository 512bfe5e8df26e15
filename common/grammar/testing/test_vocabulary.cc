#include "common/grammar/testing/test_vocabulary.h"

namespace moe::grammar::testing {

int32_t ByteId(uint8_t b) { return 1 + b; }

std::vector<std::string> ByteVocabularyTexts(const std::vector<std::string>& extra) {
  std::vector<std::string> texts(1);
  for (int b = 0; b < 256; ++b) texts.emplace_back(1, static_cast<char>(b));
  texts.insert(texts.end(), extra.begin(), extra.end());
  return texts;
}

std::shared_ptr<const TokenVocabulary> ByteVocabulary(const std::vector<std::string>& extra) {
  return TokenVocabulary::FromTexts(ByteVocabularyTexts(extra), {kEndId});
}

}  // namespace moe::grammar::testing
