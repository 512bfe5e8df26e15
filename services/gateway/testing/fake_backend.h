// A GenerateBackend for tests and the HTTP-path benchmark: no model, no router. Each call emits
// a scripted token sequence, one token per update, from one delivery thread (so thousands of
// streams cost no threads), optionally paced, held, or failed.
//
// Default script: the prompt's tokens repeated, up to sampling.max_tokens (16 when 0); a token
// equal to options.eos_id (unless sampling.ignore_eos) or in sampling.stop_token_ids ends the
// stream with kStop. A prefill_only request ends at once with kLength and no token.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/gateway/core/generate_backend.h"

namespace moe::gateway::testing {

struct FakeBackendOptions {
  absl::Duration token_interval = absl::ZeroDuration();  // pause between tokens of a stream
  // Tokens to emit for a request (before max_tokens is applied); empty = the default script.
  std::function<std::vector<int32_t>(const GenerateRequest&)> script;
  int32_t eos_id = -1;
  // When >= 0: each stream pauses after this many tokens until Release().
  int32_t hold_after_tokens = -1;
  // Non-OK: every call fails with it before any token.
  absl::Status fail_with = absl::OkStatus();
  // When >= 0: a stream ends with finish kError after this many tokens.
  int32_t error_after_tokens = -1;
  int32_t cached_prompt_tokens = 0;  // reported in usage
  bool with_logprobs = true;         // logprob -0.5 per token, top alternatives id+1.. when asked
};

class FakeBackend final : public GenerateBackend {
 public:
  explicit FakeBackend(FakeBackendOptions options = {});
  ~FakeBackend() override;  // fails every open stream with kCancelled, joins

  // GenerateBackend
  std::unique_ptr<GenerateCall> Generate(GenerateRequest request,
                                         std::shared_ptr<GenerateObserver> observer) override;
  bool Ready() const override;

  void SetReady(bool ready);
  // Resumes held streams.
  void Release();

  int num_started() const;
  // Of those, prefill-only requests (they end at once, with no token).
  int num_prefills() const {
    absl::MutexLock lock(&mu_);
    return prefills_;
  }
  int num_cancelled() const;
  int num_active() const;
  GenerateRequest last_request() const;
  // Blocks until num_cancelled() >= n or `timeout` passes; returns whether it got there.
  bool WaitForCancelled(int n, absl::Duration timeout) const;
  // Blocks until num_active() == 0 and every observer callback has returned, or `timeout` passes.
  bool WaitForIdle(absl::Duration timeout) const;
  // Blocks until `n` streams are held (at hold_after_tokens) or `timeout` passes.
  bool WaitForHeld(int n, absl::Duration timeout) const;

 private:
  struct Stream {
    GenerateRequest request;
    std::shared_ptr<GenerateObserver> observer;
    std::vector<int32_t> tokens;
    size_t emitted = 0;
    absl::Time due;
    bool cancelled = false;
  };
  class Call;
  void Cancel(uint64_t id);
  void Loop();

  const FakeBackendOptions options_;

  mutable absl::Mutex mu_;
  std::map<uint64_t, Stream> streams_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  bool ready_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int prefills_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  // The loop is running observers' callbacks outside mu_ (WaitForIdle waits for them too).
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  GenerateRequest last_request_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace moe::gateway::testing
