// A bidi-streaming call served through gRPC's callback API with the blocking face of
// grpc::ServerReaderWriter: the handler runs on a thread of its own and reads and writes in plain
// sequential code, while gRPC sees a ServerBidiReactor. Read blocks the handler's thread until
// OnReadDone; Write (any thread, one at a time: serialised here) blocks until OnWriteDone; the
// handler's return value is the call's Finish; the call deletes itself in OnDone, after its
// handler has returned. The router's GenerateBatch and the tests' fake routers use it.
//
// Why not the sync API: under ASan on a loaded machine a gateway test aborted now and then with
// a double free in gRPC's completion-queue unref while its fake router read a sync bidi stream on
// the handler thread and other threads wrote (the pattern gRPC's docs allow; grpc/grpc#36346
// reports a double free in it too). The sync API's per-call completion queue is the suspect
// (services/gateway/README.md, "Failure modes"); the callback API has none. Why not reactions
// that do the work: the router's work per message may block (a grammar compile, a response-cache
// lookup with its deadline), and reactions must not block (grpcpp/support/server_callback.h);
// here they only flag the waiting thread.
//
//   grpc::ServerBidiReactor<Req, Resp>* Chat(grpc::CallbackServerContext* ctx) override {
//     return BlockingBidiCall<Req, Resp>::Start(ctx, [this](BlockingBidiCall<Req, Resp>& call) {
//       Req req;
//       while (call.Read(&req)) call.Write(Answer(req));
//       return grpc::Status::OK;
//     });
//   }
//
// The handler must have joined any thread that writes before it returns (as with the sync API);
// a thread blocked in Read is released by context()->TryCancel().
#pragma once

#include <functional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_callback.h"

namespace moe::common::rpc {

template <class Request, class Response>
class BlockingBidiCall final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  using Handler = std::function<grpc::Status(BlockingBidiCall&)>;

  // The reactor to return from the callback method; gRPC owns it until OnDone.
  static grpc::ServerBidiReactor<Request, Response>* Start(grpc::CallbackServerContext* context,
                                                           Handler handler) {
    return new BlockingBidiCall(context, std::move(handler));
  }

  grpc::CallbackServerContext* context() const { return context_; }

  // The handler's thread: the next message (true), or false once the client has half-closed or
  // the call has ended (and every later Read is false at once).
  bool Read(Request* request) {
    {
      absl::MutexLock lock(&mu_);
      if (reads_over_) return false;
      read_done_ = false;
    }
    this->StartRead(request);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&read_done_));
    if (!read_ok_) reads_over_ = true;
    return read_ok_;
  }

  // Any thread, one write at a time: true once `response` is sent, false once the call is gone
  // (and every later Write is false at once).
  bool Write(const Response& response) {
    absl::MutexLock serial(&write_serial_);
    {
      absl::MutexLock lock(&mu_);
      if (writes_over_) return false;
      write_done_ = false;
    }
    this->StartWrite(&response);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&write_done_));
    if (!write_ok_) writes_over_ = true;
    return write_ok_;
  }

 private:
  BlockingBidiCall(grpc::CallbackServerContext* context, Handler handler)
      : context_(context), handler_(std::move(handler)) {
    thread_ = std::thread([this] { this->Finish(handler_(*this)); });
  }

  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    read_ok_ = ok;
    read_done_ = true;
  }
  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    write_ok_ = ok;
    write_done_ = true;
  }
  void OnDone() override {
    // Finish was the handler thread's last act; it cannot join itself should gRPC run OnDone on
    // it.
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
    delete this;
  }

  grpc::CallbackServerContext* const context_;
  const Handler handler_;
  std::thread thread_;
  absl::Mutex write_serial_;  // one Write at a time
  absl::Mutex mu_;
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_over_ ABSL_GUARDED_BY(mu_) = false;
  bool write_done_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_over_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moe::common::rpc
