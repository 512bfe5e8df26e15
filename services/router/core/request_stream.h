// The per-request channel from the scheduler thread to whoever consumes the request's tokens
// (a gRPC handler, a test, the bench). Bounded: the scheduler does not decode a request whose
// consumer has `capacity` tokens unread (backpressure instead of unbounded memory).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/router/core/request.h"

namespace moe::router {

// Thread-safe: one producer (the scheduler thread) and any number of consumer threads, though
// normally one consumer reads each stream.
class RequestStream {
 public:
  // REQUIRES: capacity >= 1 (tokens buffered before the producer is held back).
  explicit RequestStream(int64_t capacity);
  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;

  // Producer side --------------------------------------------------------------------------
  // True when fewer than `capacity` tokens are unread; the scheduler only decodes then.
  bool HasRoom() const;
  // Appends one generated token. Never blocks (room is checked before the step that made it).
  // `logprob` (may be null) is kept when the request asked for logprobs.
  void PushToken(int32_t token_id, const engine::SampledToken* logprob = nullptr);
  // Ends the stream; later calls are ignored. Wakes every waiting consumer.
  void Finish(generation::FinishReason reason, absl::Status status, const generation::Usage& usage);
  // `fn` runs (without this stream's lock) whenever a read frees room in a stream that was full.
  void SetOnRoom(std::function<void()> fn);

  // Consumer side --------------------------------------------------------------------------
  // Waits up to `timeout` for unread tokens or the end, and returns them as one event (tokens
  // coalesced; the last event carries the finish reason, status and usage). Returns nullopt on
  // timeout and, immediately, once the final event has been returned.
  std::optional<StreamEvent> Next(absl::Duration timeout = absl::InfiniteDuration());
  // True once the final event has been produced (read or not).
  bool finished() const;
  // True when Next() would return an event at once: unread tokens, or the final event unread.
  bool HasOutput() const;

 private:
  const int64_t capacity_;
  mutable absl::Mutex mu_;
  std::vector<int32_t> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<engine::SampledToken> pending_logprobs_ ABSL_GUARDED_BY(mu_);
  generation::FinishReason finish_reason_ ABSL_GUARDED_BY(mu_) = generation::FinishReason::kNone;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  generation::Usage usage_ ABSL_GUARDED_BY(mu_);
  bool final_delivered_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_room_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::router
