// A small SentencePiece-style tokenizer for gateway tests (no files): <unk> <s> </s>, the 256
// byte-fallback tokens <0x00>..<0xFF> (ids 3..258) and "▁" (259). Every text round-trips
// through Encode/Decode; most characters are one byte token each.
#pragma once

#include <memory>

#include "common/tokenizer/tokenizer.h"

namespace moe::gateway::testing {

inline constexpr int32_t kTestBosId = 1;
inline constexpr int32_t kTestEosId = 2;

std::unique_ptr<tokenizer::Tokenizer> MakeTestTokenizer();

}  // namespace moe::gateway::testing
