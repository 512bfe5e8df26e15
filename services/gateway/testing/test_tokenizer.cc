#include "services/gateway/testing/test_tokenizer.h"

#include <string>

#include "common/base/check.h"
#include "common/tokenizer/testing/sp_tokenizer_json.h"
#include "nlohmann/json.hpp"

namespace moe::gateway::testing {

std::unique_ptr<tokenizer::Tokenizer> MakeTestTokenizer() {
  const nlohmann::json tok =
      tokenizer::testing::SentencePieceTokenizerJson({tokenizer::testing::kSpacePiece}, {});
  const nlohmann::json config = tokenizer::testing::SentencePieceConfigJson(
      "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n"
      "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}");
  auto t = tokenizer::Tokenizer::FromJson(tok.dump(), config.dump());
  MOE_CHECK_OK(t.status());
  return std::move(t).value();
}

}  // namespace moe::gateway::testing
