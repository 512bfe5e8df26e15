#include "services/router/testing/fake_model_runner.h"

#include <algorithm>
#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/base/hash.h"

namespace moe::router::testing {
namespace {

// What a slot holds for `token_id` at `pos`; never 0 (0 marks an unwritten slot).
uint64_t SlotValue(int32_t token_id, int64_t pos) {
  return common::SplitMix64((static_cast<uint64_t>(token_id) << 32) ^ static_cast<uint64_t>(pos)) |
         1;
}

// Logits from the running hash of slots 0..p: a clear top-1 per context.
void FillLogits(uint64_t context_hash, int64_t vocab, float* out) {
  for (int64_t v = 0; v < vocab; ++v) {
    out[v] =
        static_cast<float>(
            common::SplitMix64(context_hash ^ common::SplitMix64(static_cast<uint64_t>(v))) >> 40) /
        static_cast<float>(1 << 24);
  }
}

uint64_t Chain(uint64_t h, uint64_t slot) { return common::SplitMix64(h ^ slot); }

}  // namespace

FakeModelRunner::FakeModelRunner(const FakeModelRunnerOptions& options)
    : options_(options), slots_(options.num_kv_blocks * options.kv_block_size, 0) {}

std::vector<int32_t> FakeModelRunner::GreedyReference(int64_t vocab_size,
                                                      const std::vector<int32_t>& prompt,
                                                      int64_t max_tokens,
                                                      const std::vector<int32_t>& stop_token_ids) {
  std::vector<int32_t> tokens = prompt;
  std::vector<int32_t> out;
  std::vector<float> logits(vocab_size);
  uint64_t h = 0;
  size_t hashed = 0;
  while (static_cast<int64_t>(out.size()) < max_tokens) {
    for (; hashed < tokens.size(); ++hashed) h = Chain(h, SlotValue(tokens[hashed], hashed));
    FillLogits(h, vocab_size, logits.data());
    int32_t best =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(best);
    tokens.push_back(best);
    if (std::find(stop_token_ids.begin(), stop_token_ids.end(), best) != stop_token_ids.end()) {
      break;
    }
  }
  return out;
}

void FakeModelRunner::FailNextSteps(int n, absl::Status status) {
  fail_steps_ = n;
  fail_status_ = std::move(status);
}

absl::Status FakeModelRunner::Step(std::span<const StepChunk> chunks, std::vector<float>* logits) {
  ++num_steps_;
  if (fail_steps_ > 0) {
    --fail_steps_;
    return fail_status_;
  }
  max_chunks_per_step_ = std::max<int64_t>(max_chunks_per_step_, chunks.size());
  const int64_t bs = options_.kv_block_size;
  auto slot_index = [&](const StepChunk& c, int64_t pos) -> absl::StatusOr<int64_t> {
    const int64_t b = pos / bs;
    if (b >= static_cast<int64_t>(c.block_table.size())) {
      return absl::InternalError(
          absl::StrCat("seq ", c.seq_id.value(), ": position ", pos, " beyond its block table"));
    }
    const int32_t block = c.block_table[b];
    if (block < 0 || block >= options_.num_kv_blocks) {
      return absl::InternalError(absl::StrCat("block id ", block, " out of range"));
    }
    return block * bs + pos % bs;
  };
  // Write every chunk's KV first (as an engine layer does), then read.
  for (const StepChunk& c : chunks) {
    if (c.token_ids.empty()) return absl::InternalError("empty chunk");
    for (size_t i = 0; i < c.token_ids.size(); ++i) {
      const int64_t pos = c.start_pos + static_cast<int64_t>(i);
      auto idx = slot_index(c, pos);
      if (!idx.ok()) return idx.status();
      slots_[*idx] = SlotValue(c.token_ids[i], pos);
    }
    num_computed_tokens_ += static_cast<int64_t>(c.token_ids.size());
    if (step_clock_ != nullptr) {
      step_clock_->Advance(time_per_token_ * static_cast<int64_t>(c.token_ids.size()));
    }
  }
  logits->clear();
  for (const StepChunk& c : chunks) {
    if (!c.want_logits) continue;
    const int64_t last = c.start_pos + static_cast<int64_t>(c.token_ids.size()) - 1;
    uint64_t h = 0;
    for (int64_t pos = 0; pos <= last; ++pos) {
      auto idx = slot_index(c, pos);
      if (!idx.ok()) return idx.status();
      if (slots_[*idx] == 0) {
        return absl::InternalError(absl::StrCat("seq ", c.seq_id.value(), " reads unwritten KV"));
      }
      h = Chain(h, slots_[*idx]);
    }
    const size_t row = logits->size();
    logits->resize(row + options_.vocab_size);
    FillLogits(h, options_.vocab_size, logits->data() + row);
  }
  return absl::OkStatus();
}

absl::Status FakeModelRunner::CopyBlock(int32_t src_block, int32_t dst_block) {
  if (src_block < 0 || src_block >= options_.num_kv_blocks || dst_block < 0 ||
      dst_block >= options_.num_kv_blocks) {
    return absl::InternalError("CopyBlock: block id out of range");
  }
  const int64_t bs = options_.kv_block_size;
  std::copy_n(slots_.begin() + src_block * bs, bs, slots_.begin() + dst_block * bs);
  ++num_block_copies_;
  return absl::OkStatus();
}

absl::Status FakeModelRunner::ReadKvBlock(int32_t block_id, std::span<uint8_t> dst) {
  if (block_id < 0 || block_id >= options_.num_kv_blocks ||
      static_cast<int64_t>(dst.size()) != kv_block_bytes()) {
    return absl::InvalidArgumentError("ReadKvBlock: bad block id or size");
  }
  std::memcpy(dst.data(), slots_.data() + block_id * options_.kv_block_size, dst.size());
  return absl::OkStatus();
}

absl::Status FakeModelRunner::WriteKvBlock(int32_t block_id, int64_t offset,
                                           std::span<const uint8_t> src) {
  if (block_id < 0 || block_id >= options_.num_kv_blocks || offset < 0 ||
      offset + static_cast<int64_t>(src.size()) > kv_block_bytes()) {
    return absl::InvalidArgumentError("WriteKvBlock: bad block id or range");
  }
  std::memcpy(
      reinterpret_cast<uint8_t*>(slots_.data() + block_id * options_.kv_block_size) + offset,
      src.data(), src.size());
  return absl::OkStatus();
}

void FakeModelRunner::ClearBlockForTesting(int32_t block_id) {
  std::fill_n(slots_.begin() + block_id * options_.kv_block_size, options_.kv_block_size, 0);
}

}  // namespace moe::router::testing
