// How engine tests build steps: a sequence with KV blocks of its own, and the StepItem of a span
// of its tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/engine/engine.h"

namespace moe::engine::testing {

struct TestSeq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;  // block table; enough blocks for every position the test uses
};

// Tokens [begin, end) of `s` at their positions, with `s`'s block table. The spans borrow `s`.
inline StepItem SpanItem(const TestSeq& s, int64_t begin, int64_t end,
                         LogitsMode mode = LogitsMode::kLast) {
  StepItem it;
  it.token_ids = absl::MakeConstSpan(s.tokens).subspan(begin, end - begin);
  it.start_pos = static_cast<int32_t>(begin);
  it.block_table = s.blocks;
  it.logits = mode;
  return it;
}

}  // namespace moe::engine::testing
