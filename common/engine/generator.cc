#include "common/engine/generator.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moe::engine {
namespace {

using generation::FinishReason;

struct Sequence {
  size_t index = 0;
  const GenerationRequest* request = nullptr;
  std::vector<int32_t> tokens;  // prompt, then output
  int64_t prompt_len = 0;
  int64_t num_computed = 0;     // tokens whose K/V are in the cache
  std::vector<int32_t> blocks;  // the block table
  std::unique_ptr<SequenceSampler> sampler;
  bool done = false;
};

}  // namespace

Generator::Generator(Engine* engine, GeneratorOptions options)
    : engine_(engine), options_(std::move(options)) {
  if (options_.eos_token_ids.empty()) {
    for (int64_t id : engine_->config().eos_token_ids) {
      options_.eos_token_ids.push_back(static_cast<int32_t>(id));
    }
    if (options_.eos_token_ids.empty() && engine_->config().eos_token_id >= 0) {
      options_.eos_token_ids.push_back(static_cast<int32_t>(engine_->config().eos_token_id));
    }
  }
  if (options_.prefill_chunk < 1) options_.prefill_chunk = 1;
}

absl::StatusOr<std::vector<GenerationResult>> Generator::Generate(
    absl::Span<const GenerationRequest> requests, const TokenCallback& on_token) {
  const int64_t vocab = engine_->vocab_size();
  const int64_t context = engine_->config().max_position_embeddings;
  const int64_t block_size = engine_->kv_cache().block_size();
  std::vector<GenerationResult> results(requests.size());
  std::vector<Sequence> seqs(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    if (r.prompt_ids.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("request ", i, ": empty prompt"));
    }
    if (context > 0 && static_cast<int64_t>(r.prompt_ids.size()) > context) {
      return absl::InvalidArgumentError(absl::StrCat("request ", i, ": prompt of ",
                                                     r.prompt_ids.size(),
                                                     " tokens exceeds the context of ", context));
    }
    if (absl::Status s = r.sampling.Validate(vocab); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("request ", i, ": ", s.message()));
    }
    Sequence& s = seqs[i];
    s.index = i;
    s.request = &r;
    s.tokens = r.prompt_ids;
    s.tokens.reserve(r.prompt_ids.size() + static_cast<size_t>(r.sampling.max_tokens));
    s.prompt_len = static_cast<int64_t>(r.prompt_ids.size());
    s.sampler =
        std::make_unique<SequenceSampler>(r.sampling, r.prompt_ids, vocab, options_.seed + i);
  }

  // The trivial allocator: a free list over the whole cache, lowest ids first.
  std::vector<int32_t> free_blocks(static_cast<size_t>(engine_->kv_cache().num_blocks()));
  for (size_t b = 0; b < free_blocks.size(); ++b) {
    free_blocks[b] = static_cast<int32_t>(free_blocks.size() - 1 - b);
  }
  auto release = [&](Sequence& s) {
    free_blocks.insert(free_blocks.end(), s.blocks.rbegin(), s.blocks.rend());
    s.blocks.clear();
    s.done = true;
  };

  std::vector<StepItem> items;
  std::vector<Sequence*> stepped;
  StepOutput out;  // reused by every step of this call
  const int64_t max_tokens_per_step = engine_->options().max_batch_tokens;
  while (true) {
    items.clear();
    stepped.clear();
    int64_t budget = max_tokens_per_step;
    for (Sequence& s : seqs) {
      if (s.done || budget == 0) continue;
      const GenerationRequest& r = *s.request;
      StepItem item;
      item.start_pos = static_cast<int32_t>(s.num_computed);
      if (s.num_computed < s.prompt_len) {
        const int64_t n = std::min({options_.prefill_chunk, s.prompt_len - s.num_computed, budget});
        item.token_ids = absl::MakeConstSpan(s.tokens).subspan(s.num_computed, n);
        const bool last_chunk = s.num_computed + n == s.prompt_len;
        if (r.prompt_logits == LogitsMode::kAll) {
          item.logits = LogitsMode::kAll;
        } else if (last_chunk &&
                   (r.sampling.max_tokens > 0 || r.prompt_logits == LogitsMode::kLast)) {
          item.logits = LogitsMode::kLast;
        } else {
          item.logits = LogitsMode::kNone;
        }
      } else {
        item.token_ids = absl::MakeConstSpan(s.tokens).subspan(s.num_computed, 1);
        item.logits = LogitsMode::kLast;
      }
      const int64_t end = s.num_computed + static_cast<int64_t>(item.token_ids.size());
      while (static_cast<int64_t>(s.blocks.size()) * block_size < end) {
        if (free_blocks.empty()) {
          return absl::ResourceExhaustedError(
              absl::StrCat("generator: the KV cache (", engine_->kv_cache().num_blocks(),
                           " blocks) cannot hold all ", requests.size(), " sequences at once"));
        }
        s.blocks.push_back(free_blocks.back());
        free_blocks.pop_back();
      }
      item.block_table = s.blocks;
      budget -= static_cast<int64_t>(item.token_ids.size());
      items.push_back(item);
      stepped.push_back(&s);
    }
    if (items.empty()) break;
    if (absl::Status st = engine_->Step(items, &out); !st.ok()) return st;

    for (size_t i = 0; i < items.size(); ++i) {
      Sequence& s = *stepped[i];
      const GenerationRequest& r = *s.request;
      GenerationResult& res = results[s.index];
      const bool in_prompt = s.num_computed < s.prompt_len;
      s.num_computed += static_cast<int64_t>(items[i].token_ids.size());
      const int64_t rows = out.num_rows(i);
      if (in_prompt && r.prompt_logits != LogitsMode::kNone && rows > 0) {
        const float* first = out.row(i, 0, vocab);
        res.prompt_logits.insert(res.prompt_logits.end(), first, first + rows * vocab);
      }
      if (s.num_computed < s.prompt_len) continue;  // more prompt to go
      if (r.sampling.max_tokens == 0) {
        res.finish_reason = FinishReason::kLength;
        release(s);
        continue;
      }
      SampledToken tok = s.sampler->Sample(absl::MakeConstSpan(out.row(i, rows - 1, vocab), vocab));
      s.tokens.push_back(tok.token_id);
      res.output_ids.push_back(tok.token_id);
      if (on_token) on_token(s.index, tok);
      const int32_t id = tok.token_id;
      res.tokens.push_back(std::move(tok));
      const auto& stops = r.sampling.stop_token_ids;
      const bool eos = !r.sampling.ignore_eos &&
                       std::find(options_.eos_token_ids.begin(), options_.eos_token_ids.end(),
                                 id) != options_.eos_token_ids.end();
      if (eos || std::find(stops.begin(), stops.end(), id) != stops.end()) {
        res.finish_reason = FinishReason::kStop;
        release(s);
      } else if (static_cast<int64_t>(res.output_ids.size()) >= r.sampling.max_tokens ||
                 (context > 0 && static_cast<int64_t>(s.tokens.size()) >= context)) {
        res.finish_reason = FinishReason::kLength;
        release(s);
      }
    }
  }
  return results;
}

}  // namespace moe::engine
