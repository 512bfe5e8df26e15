#include "services/gateway/testing/fake_backend.h"

#include <algorithm>
#include <utility>

namespace moe::gateway::testing {

using generation::FinishReason;

class FakeBackend::Call final : public GenerateCall {
 public:
  Call(FakeBackend* backend, uint64_t id) : backend_(backend), id_(id) {}
  void Cancel() override { backend_->Cancel(id_); }

 private:
  FakeBackend* const backend_;
  const uint64_t id_;
};

FakeBackend::FakeBackend(FakeBackendOptions options)
    : options_(std::move(options)), thread_([this] { Loop(); }) {}

FakeBackend::~FakeBackend() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
  std::map<uint64_t, Stream> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(streams_);
  }
  for (auto& [id, s] : left) s.observer->OnFailed(absl::CancelledError("backend stopped"));
}

std::unique_ptr<GenerateCall> FakeBackend::Generate(GenerateRequest request,
                                                    std::shared_ptr<GenerateObserver> observer) {
  Stream s;
  if (request.prefill_only) {
    // Nothing to generate: the stream ends with its first update (kLength, no tokens).
  } else if (options_.script) {
    s.tokens = options_.script(request);
  } else {
    const int32_t max_tokens = request.sampling.max_tokens;
    const size_t n = max_tokens > 0 ? max_tokens : 16;
    for (size_t i = 0; i < n && !request.prompt_token_ids.empty(); ++i) {
      s.tokens.push_back(request.prompt_token_ids[i % request.prompt_token_ids.size()]);
    }
  }
  if (const int32_t max_tokens = request.sampling.max_tokens;
      max_tokens > 0 && s.tokens.size() > static_cast<size_t>(max_tokens)) {
    s.tokens.resize(max_tokens);
  }
  s.request = std::move(request);
  s.observer = std::move(observer);
  s.due = absl::Now();
  absl::MutexLock lock(&mu_);
  ++started_;
  if (s.request.prefill_only) ++prefills_;
  last_request_ = s.request;
  const uint64_t id = next_id_++;
  streams_.emplace(id, std::move(s));
  return std::make_unique<Call>(this, id);
}

bool FakeBackend::Ready() const {
  absl::MutexLock lock(&mu_);
  return ready_;
}

void FakeBackend::SetReady(bool ready) {
  absl::MutexLock lock(&mu_);
  ready_ = ready;
}

void FakeBackend::Release() {
  absl::MutexLock lock(&mu_);
  released_ = true;
}

void FakeBackend::Cancel(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(id);
  if (it != streams_.end()) it->second.cancelled = true;
}

int FakeBackend::num_started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}
int FakeBackend::num_cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}
int FakeBackend::num_active() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(streams_.size());
}
GenerateRequest FakeBackend::last_request() const {
  absl::MutexLock lock(&mu_);
  return last_request_;
}

bool FakeBackend::WaitForCancelled(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancelled_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool FakeBackend::WaitForIdle(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return streams_.empty() && !delivering_; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool FakeBackend::WaitForHeld(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int held = 0;
    for (const auto& [id, s] : streams_) {
      if (options_.hold_after_tokens >= 0 &&
          s.emitted >= static_cast<size_t>(options_.hold_after_tokens)) {
        ++held;
      }
    }
    return held >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

void FakeBackend::Loop() {
  struct Action {
    std::shared_ptr<GenerateObserver> observer;
    std::optional<GenerateUpdate> update;
    absl::Status failure;
  };
  for (;;) {
    std::vector<Action> actions;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      const absl::Time now = absl::Now();
      absl::Time next = now + absl::Milliseconds(50);
      for (auto it = streams_.begin(); it != streams_.end();) {
        Stream& s = it->second;
        if (s.cancelled) {
          ++cancelled_;
          actions.push_back(
              {std::move(s.observer), std::nullopt, absl::CancelledError("cancelled")});
          it = streams_.erase(it);
          continue;
        }
        if (!options_.fail_with.ok()) {
          actions.push_back({std::move(s.observer), std::nullopt, options_.fail_with});
          it = streams_.erase(it);
          continue;
        }
        const bool held = options_.hold_after_tokens >= 0 && !released_ &&
                          s.emitted >= static_cast<size_t>(options_.hold_after_tokens);
        if (held || s.due > now) {
          if (!held) next = std::min(next, s.due);
          ++it;
          continue;
        }
        GenerateUpdate u;
        bool last = s.emitted >= s.tokens.size();
        if (!last) {
          const int32_t id = s.tokens[s.emitted++];
          u.token_ids.push_back(id);
          const generation::SamplingParams& sampling = s.request.sampling;
          if (sampling.returns_logprobs() && options_.with_logprobs) {
            TokenLogprobs lp{-0.5f, {}};
            for (int k = 0; k < sampling.num_top_logprobs(); ++k) {
              lp.top.push_back({id + k, -0.5f - k});
            }
            u.logprobs.push_back(lp);
          }
          const bool eos = !sampling.ignore_eos && id == options_.eos_id;
          const bool stop_id =
              std::find(sampling.stop_token_ids.begin(), sampling.stop_token_ids.end(), id) !=
              sampling.stop_token_ids.end();
          if (eos || stop_id) {
            u.finish = FinishReason::kStop;
            last = true;
          } else if (s.emitted >= s.tokens.size()) {
            u.finish = FinishReason::kLength;
            last = true;
          }
        } else {
          u.finish = FinishReason::kLength;
        }
        if (options_.error_after_tokens >= 0 &&
            s.emitted > static_cast<size_t>(options_.error_after_tokens)) {
          u = GenerateUpdate{};
          u.finish = FinishReason::kError;
          u.error_message = "injected failure";
          last = true;
        }
        if (last) {
          u.usage =
              generation::Usage{static_cast<int64_t>(s.request.prompt_token_ids.size()),
                                static_cast<int64_t>(s.emitted), options_.cached_prompt_tokens};
          actions.push_back({std::move(s.observer), std::move(u), absl::OkStatus()});
          it = streams_.erase(it);
          continue;
        }
        actions.push_back({s.observer, std::move(u), absl::OkStatus()});
        s.due = now + options_.token_interval;
        next = std::min(next, s.due);
        ++it;
      }
      if (actions.empty()) {
        auto wake = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          if (stop_) return true;
          for (const auto& [id, s] : streams_) {
            if (s.cancelled || !options_.fail_with.ok()) return true;
            const bool held = options_.hold_after_tokens >= 0 && !released_ &&
                              s.emitted >= static_cast<size_t>(options_.hold_after_tokens);
            if (!held && s.due <= absl::Now()) return true;
          }
          return false;
        };
        mu_.AwaitWithDeadline(absl::Condition(&wake), next);
        continue;
      }
      delivering_ = true;
    }
    for (Action& a : actions) {
      if (a.update) {
        a.observer->OnUpdate(std::move(*a.update));
      } else {
        a.observer->OnFailed(a.failure);
      }
    }
    absl::MutexLock lock(&mu_);
    delivering_ = false;
  }
}

}  // namespace moe::gateway::testing
