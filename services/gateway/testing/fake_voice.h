// Fakes of the speech services (core/voice_backend.h) and a WebSocket peer, for the gateway's
// tests. They deliver inline, on the thread that acts: a test makes the ASR "hear" something by
// calling Emit() on a call, and the TTS speaks when its text is closed.
//
//   FakeAsrClient: records each call's config, audio bytes and control messages; with
//     `final_on_close`, CloseSend() emits one final (`final_text`) and ends the call.
//   FakeTtsClient: each text piece becomes 10 ms of 24 kHz audio per byte (samples = the byte),
//     in one segment per CloseSend... per piece; with `hold`, nothing is spoken until Release().
//   FakeWebSocket: collects the JSON events a session sends; WaitFor() blocks (with a timeout)
//     until a matching one arrived.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "services/gateway/core/http_types.h"
#include "services/gateway/core/voice_backend.h"

namespace moe::gateway::testing {

class FakeAsrClient final : public AsrClient {
 public:
  struct Call final : public AsrCall {
    AsrStreamConfig config;
    std::shared_ptr<AsrObserver> observer;
    FakeAsrClient* owner = nullptr;
    int64_t audio_bytes = 0;
    int finalized = 0, discarded = 0;
    bool closed = false, cancelled = false, done = false;

    void SendAudio(std::string pcm) override {
      absl::MutexLock lock(&owner->mu_);
      audio_bytes += static_cast<int64_t>(pcm.size());
    }
    void Finalize() override;
    void Discard() override {
      absl::MutexLock lock(&owner->mu_);
      ++discarded;
    }
    void CloseSend() override;
    void Cancel() override;
    // Delivers `e` to the observer now (the test's thread).
    void Emit(AsrEvent e) { observer->OnEvent(std::move(e)); }
    void End(absl::Status s) {
      {
        absl::MutexLock lock(&owner->mu_);
        if (done) return;
        done = true;
      }
      observer->OnDone(std::move(s));
    }
  };

  // What the caller holds: forwards to the Call, which the client keeps for the test.
  struct Handle final : public AsrCall {
    std::shared_ptr<Call> call;
    void SendAudio(std::string pcm) override { call->SendAudio(std::move(pcm)); }
    void Finalize() override { call->Finalize(); }
    void Discard() override { call->Discard(); }
    void CloseSend() override { call->CloseSend(); }
    void Cancel() override { call->Cancel(); }
  };

  std::unique_ptr<AsrCall> Transcribe(const AsrStreamConfig& config,
                                      std::shared_ptr<AsrObserver> observer) override {
    auto call = std::make_shared<Call>();
    call->config = config;
    call->observer = std::move(observer);
    call->owner = this;
    absl::MutexLock lock(&mu_);
    calls_.push_back(call);
    auto handle = std::make_unique<Handle>();
    handle->call = std::move(call);
    return handle;
  }
  bool configured() const override { return true; }

  int num_calls() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(calls_.size());
  }
  // The i-th call (kept until the client is destroyed).
  Call& call(int i) {
    absl::MutexLock lock(&mu_);
    return *calls_[static_cast<size_t>(i)];
  }
  int64_t audio_bytes(int i) {
    absl::MutexLock lock(&mu_);
    return calls_[static_cast<size_t>(i)]->audio_bytes;
  }

  bool final_on_close = true;
  std::vector<std::string> final_texts = {"hello world"};  // one final each, on CloseSend
  absl::Status end_status = absl::OkStatus();
  bool final_on_finalize = true;  // Finalize() emits a final of `final_texts[0]`

 private:
  friend struct Call;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
};

inline void FakeAsrClient::Call::Finalize() {
  {
    absl::MutexLock lock(&owner->mu_);
    ++finalized;
  }
  if (owner->final_on_finalize) {
    Emit({.type = AsrEvent::Type::kFinal, .text = owner->final_texts.at(0), .finalize_ms = 1});
  }
}

inline void FakeAsrClient::Call::CloseSend() {
  {
    absl::MutexLock lock(&owner->mu_);
    closed = true;
  }
  if (!owner->final_on_close) return;
  uint32_t t = 0;
  for (const std::string& text : owner->final_texts) {
    Emit({.type = AsrEvent::Type::kFinal, .text = text, .start_ms = t, .end_ms = t + 500});
    t += 1000;
  }
  End(owner->end_status);
}

inline void FakeAsrClient::Call::Cancel() {
  {
    absl::MutexLock lock(&owner->mu_);
    cancelled = true;
  }
  End(absl::CancelledError("cancelled"));
}

class FakeTtsClient final : public TtsClient {
 public:
  struct Call final : public TtsCall {
    TtsStreamConfig config;
    std::shared_ptr<TtsObserver> observer;
    FakeTtsClient* owner = nullptr;
    std::vector<std::string> texts;
    bool closed = false, cancelled = false, done = false;
    int segments = 0;

    void SendText(std::string text, bool) override {
      bool speak;
      {
        absl::MutexLock lock(&owner->mu_);
        texts.push_back(text);
        speak = !owner->hold_;
      }
      if (speak) Speak(text);
    }
    void CloseSend() override {
      bool finish;
      {
        absl::MutexLock lock(&owner->mu_);
        closed = true;
        finish = !owner->hold_;
      }
      if (finish) End(owner->end_status);
    }
    void Cancel() override {
      {
        absl::MutexLock lock(&owner->mu_);
        cancelled = true;
      }
      End(absl::CancelledError("cancelled"));
    }
    void Speak(const std::string& text) {
      TtsAudio a;
      for (char c : text) {
        a.pcm_s16le.append(480, static_cast<char>(c));  // 10 ms at 24 kHz per byte
      }
      a.sample_rate_hz = config.sample_rate_hz;
      a.segment_index = segments++;
      a.end_of_segment = true;
      a.text = text;
      a.segment_latency_ms = 2;
      observer->OnAudio(std::move(a));
    }
    void End(absl::Status s) {
      {
        absl::MutexLock lock(&owner->mu_);
        if (done) return;
        done = true;
      }
      observer->OnDone(std::move(s));
    }
  };

  struct Handle final : public TtsCall {
    std::shared_ptr<Call> call;
    void SendText(std::string text, bool flush) override { call->SendText(std::move(text), flush); }
    void CloseSend() override { call->CloseSend(); }
    void Cancel() override { call->Cancel(); }
  };

  std::unique_ptr<TtsCall> Synthesize(const TtsStreamConfig& config,
                                      std::shared_ptr<TtsObserver> observer) override {
    auto call = std::make_shared<Call>();
    call->owner = this;
    if (!fail_with.ok()) {
      call->done = true;
      observer->OnDone(fail_with);
      auto handle = std::make_unique<Handle>();
      handle->call = std::move(call);
      return handle;
    }
    call->config = config;
    call->observer = std::move(observer);
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(call);
    }
    auto handle = std::make_unique<Handle>();
    handle->call = std::move(call);
    return handle;
  }
  bool configured() const override { return true; }

  int num_calls() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(calls_.size());
  }
  Call& call(int i) {
    absl::MutexLock lock(&mu_);
    return *calls_[static_cast<size_t>(i)];
  }
  void Hold() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
  }

  absl::Status fail_with = absl::OkStatus();  // every call fails at once with it
  absl::Status end_status = absl::OkStatus();

 private:
  friend struct Call;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
};

class FakeWebSocket final : public WebSocketWriter {
 public:
  void SendText(std::string message) override {
    absl::MutexLock lock(&mu_);
    events_.push_back(nlohmann::json::parse(message));
  }
  void Close(uint16_t code, std::string reason) override {
    absl::MutexLock lock(&mu_);
    close_code_ = code;
  }
  // The first event of `type` after the `skip`-th one (0 = any), waiting up to `timeout`.
  std::optional<nlohmann::json> WaitFor(const std::string& type,
                                        absl::Duration timeout = absl::Seconds(10), int skip = 0) {
    absl::MutexLock lock(&mu_);
    std::optional<nlohmann::json> found;
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      int seen = 0;
      for (const auto& e : events_) {
        if (e.value("type", "") == type && seen++ == skip) {
          found = e;
          return true;
        }
      }
      return false;
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    return found;
  }
  std::vector<nlohmann::json> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  // The event types in order, space separated (events of `only` prefixes when given).
  std::string Types(const std::string& prefix = "") const {
    absl::MutexLock lock(&mu_);
    std::string out;
    for (const auto& e : events_) {
      const std::string t = e.value("type", "");
      if (t.rfind(prefix, 0) != 0) continue;
      if (!out.empty()) out += ' ';
      out += t;
    }
    return out;
  }
  int close_code() const {
    absl::MutexLock lock(&mu_);
    return close_code_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<nlohmann::json> events_ ABSL_GUARDED_BY(mu_);
  int close_code_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace moe::gateway::testing
