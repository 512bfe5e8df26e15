// tokenizer.json text (with the preset tokenizer_config.json) into Tokenizer::FromJson, then a
// short encode/decode round on whatever loads.
#include <cstdint>
#include <string_view>

#include "common/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moe::tokenizer;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  auto tok = Tokenizer::FromJson(
      in.substr(0, nul), nul == std::string_view::npos ? std::string_view{} : in.substr(nul + 1));
  if (!tok.ok()) return 0;
  const auto ids = (*tok)->Encode("Hello, world! <s> \xff\xfe 123", true);
  (void)(*tok)->Decode(ids, false);
  return 0;
}
