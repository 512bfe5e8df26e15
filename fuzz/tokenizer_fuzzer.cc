// Arbitrary bytes into Encode, Decode and the IncrementalDetokenizer of the preset tokenizer
// (byte-level BPE with added and special tokens): invalid UTF-8, special-token text, ids out of
// range. Checks that streaming detokenization equals Decode of the whole sequence.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/preset_tokenizer.h"
#include "common/tokenizer/tokenizer.h"

namespace {

const moe::tokenizer::Tokenizer& Preset() {
  static const auto* tok = [] {
    auto files = moe::tokenizer::BuildPresetTokenizer(512, "mixtral").value();
    return moe::tokenizer::Tokenizer::FromJson(files.tokenizer_json, files.tokenizer_config_json)
        .value()
        .release();
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moe::tokenizer;
  const Tokenizer& tok = Preset();
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<int32_t> ids;
  if (mode & 1) {
    ids = tok.Encode(text, /*add_special_tokens=*/mode & 2, /*parse_special_tokens=*/mode & 4);
  } else {
    // The bytes as ids (little-endian int16), some out of the vocabulary or negative.
    for (size_t i = 0; i + 1 < text.size(); i += 2) {
      ids.push_back(static_cast<int16_t>(static_cast<uint8_t>(text[i]) |
                                         (static_cast<uint8_t>(text[i + 1]) << 8)));
    }
  }
  const bool skip_special = mode & 8;
  const std::string whole = tok.Decode(ids, skip_special);
  IncrementalDetokenizer detok(tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.Add(id);
  streamed += detok.Finish();
  if (streamed != whole) __builtin_trap();  // streaming must equal one-shot decoding
  return 0;
}
