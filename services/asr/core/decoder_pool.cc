#include "services/asr/core/decoder_pool.h"

#include "absl/strings/str_cat.h"

namespace moe::asr {

DecoderLease::~DecoderLease() {
  if (decoder_ != nullptr) pool_->Release(std::move(decoder_));
}

absl::StatusOr<std::unique_ptr<DecoderPool>> DecoderPool::Create(int size, const Factory& factory) {
  std::vector<std::unique_ptr<Decoder>> decoders;
  for (int i = 0; i < size; ++i) {
    absl::StatusOr<std::unique_ptr<Decoder>> d = factory();
    if (!d.ok()) return d.status();
    decoders.push_back(*std::move(d));
  }
  return std::unique_ptr<DecoderPool>(new DecoderPool(std::move(decoders)));
}

DecoderPool::DecoderPool(std::vector<std::unique_ptr<Decoder>> decoders)
    : size_(static_cast<int>(decoders.size())), free_(std::move(decoders)) {}

absl::StatusOr<DecoderLease> DecoderPool::Acquire() {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", size_, " decoders are busy (core.max_streams); retry later"));
  }
  std::unique_ptr<Decoder> d = std::move(free_.back());
  free_.pop_back();
  return DecoderLease(*this, std::move(d));
}

int DecoderPool::available() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(free_.size());
}

void DecoderPool::Release(std::unique_ptr<Decoder> decoder) {
  absl::MutexLock lock(&mu_);
  free_.push_back(std::move(decoder));
}

}  // namespace moe::asr
