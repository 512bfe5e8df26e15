// Small vocabularies for grammar tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/grammar/token_vocabulary.h"

namespace moe::grammar::testing {

// Id 0 is the end token (no text); ids 1..256 are the single bytes 0x00..0xFF; `extra` follow
// from id 257 on.
inline constexpr int32_t kEndId = 0;
int32_t ByteId(uint8_t b);
std::shared_ptr<const TokenVocabulary> ByteVocabulary(const std::vector<std::string>& extra = {});
// The texts ByteVocabulary holds, id by id ("" for the end token).
std::vector<std::string> ByteVocabularyTexts(const std::vector<std::string>& extra = {});

}  // namespace moe::grammar::testing
