// A ResponseWriter for tests: records what the core writes (status, headers, body, whether it
// streamed); Wait() blocks until the answer is complete. HoldFlush() makes WhenFlushed keep its
// callback until Flush(), as a client that has not read the bytes yet.
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "services/gateway/core/http_types.h"

namespace moe::gateway::testing {

class RecordingWriter final : public ResponseWriter {
 public:
  void Send(HttpResponse response) override {
    absl::MutexLock lock(&mu_);
    status_ = response.status;
    body_ = std::move(response.body);
    headers_ = std::move(response.headers);
    done_ = true;
  }
  void StartStream(int status, HttpHeaders headers) override {
    absl::MutexLock lock(&mu_);
    status_ = status;
    headers_ = std::move(headers);
    streamed_ = true;
  }
  void Write(std::string data) override {
    absl::MutexLock lock(&mu_);
    body_ += data;
  }
  void End() override {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  void WhenFlushed(std::function<void()> fn) override {
    {
      absl::MutexLock lock(&mu_);
      if (hold_flush_) {
        on_flushed_ = std::move(fn);
        return;
      }
    }
    fn();
  }
  void HoldFlush() {
    absl::MutexLock lock(&mu_);
    hold_flush_ = true;
  }
  // Runs the held WhenFlushed callback (if any); returns whether there was one.
  bool Flush() {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      fn = std::move(on_flushed_);
      on_flushed_ = nullptr;
    }
    if (!fn) return false;
    fn();
    return true;
  }
  void Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }
  int status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  std::string body() {
    absl::MutexLock lock(&mu_);
    return body_;
  }
  bool streamed() {
    absl::MutexLock lock(&mu_);
    return streamed_;
  }
  std::string header(const std::string& name) {
    absl::MutexLock lock(&mu_);
    for (const auto& [k, v] : headers_) {
      if (k == name) return v;
    }
    return "";
  }

 private:
  absl::Mutex mu_;
  int status_ = 0;
  std::string body_;
  HttpHeaders headers_;
  bool streamed_ = false;
  bool done_ = false;
  bool hold_flush_ = false;
  std::function<void()> on_flushed_;
};

}  // namespace moe::gateway::testing
