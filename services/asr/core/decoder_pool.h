// A fixed set of decoders made at start (an engine's model load is slow: ~0.3 s for
// pocketsphinx's en-us), lent to one stream each. The pool size is the service's stream bound:
// with every decoder lent, Acquire() fails at once rather than queueing audio.
//
// Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "services/asr/core/decoder.h"

namespace moe::asr {

class DecoderPool;

// A lent decoder; returned to the pool when destroyed.
class DecoderLease {
 public:
  DecoderLease(DecoderPool& pool, std::unique_ptr<Decoder> decoder)
      : pool_(&pool), decoder_(std::move(decoder)) {}
  ~DecoderLease();
  DecoderLease(DecoderLease&& other) noexcept = default;
  DecoderLease& operator=(DecoderLease&&) = delete;
  DecoderLease(const DecoderLease&) = delete;

  Decoder& operator*() const { return *decoder_; }
  Decoder* operator->() const { return decoder_.get(); }

 private:
  DecoderPool* pool_;
  std::unique_ptr<Decoder> decoder_;
};

class DecoderPool {
 public:
  using Factory = std::function<absl::StatusOr<std::unique_ptr<Decoder>>()>;
  // Makes `size` decoders with `factory`; its first error is returned.
  static absl::StatusOr<std::unique_ptr<DecoderPool>> Create(int size, const Factory& factory);

  // kResourceExhausted when every decoder is lent.
  absl::StatusOr<DecoderLease> Acquire();
  int size() const { return size_; }
  int available() const;

 private:
  friend class DecoderLease;
  explicit DecoderPool(std::vector<std::unique_ptr<Decoder>> decoders);
  void Release(std::unique_ptr<Decoder> decoder);

  const int size_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Decoder>> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::asr
