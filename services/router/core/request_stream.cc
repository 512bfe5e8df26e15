#include "services/router/core/request_stream.h"

#include <utility>

#include "common/base/check.h"

namespace moe::router {

using generation::FinishReason;
using generation::Usage;

RequestStream::RequestStream(int64_t capacity) : capacity_(capacity) { MOE_CHECK(capacity >= 1); }

bool RequestStream::HasRoom() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(pending_.size()) < capacity_;
}

void RequestStream::PushToken(int32_t token_id, const engine::SampledToken* logprob) {
  absl::MutexLock lock(&mu_);
  if (finish_reason_ != FinishReason::kNone) return;
  pending_.push_back(token_id);
  if (logprob != nullptr) pending_logprobs_.push_back(*logprob);
}

void RequestStream::Finish(FinishReason reason, absl::Status status, const Usage& usage) {
  MOE_DCHECK(reason != FinishReason::kNone);
  absl::MutexLock lock(&mu_);
  if (finish_reason_ != FinishReason::kNone) return;
  finish_reason_ = reason;
  status_ = std::move(status);
  usage_ = usage;
}

void RequestStream::SetOnRoom(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  on_room_ = std::move(fn);
}

std::optional<StreamEvent> RequestStream::Next(absl::Duration timeout) {
  std::function<void()> notify;
  StreamEvent event;
  {
    absl::MutexLock lock(&mu_);
    if (final_delivered_) return std::nullopt;
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !pending_.empty() || finish_reason_ != FinishReason::kNone;
    };
    if (!ready() && (timeout <= absl::ZeroDuration() ||
                     !mu_.AwaitWithTimeout(absl::Condition(&ready), timeout))) {
      return std::nullopt;
    }
    const bool was_full = static_cast<int64_t>(pending_.size()) >= capacity_;
    event.token_ids.swap(pending_);
    event.logprobs.swap(pending_logprobs_);
    if (finish_reason_ != FinishReason::kNone) {
      event.finish_reason = finish_reason_;
      event.status = status_;
      event.usage = usage_;
      final_delivered_ = true;
    } else if (was_full) {
      notify = on_room_;
    }
  }
  if (notify) notify();
  return event;
}

bool RequestStream::finished() const {
  absl::MutexLock lock(&mu_);
  return finish_reason_ != FinishReason::kNone;
}

bool RequestStream::HasOutput() const {
  absl::MutexLock lock(&mu_);
  return !pending_.empty() || (finish_reason_ != FinishReason::kNone && !final_delivered_);
}

}  // namespace moe::router
