#include "common/grpc/callback_queue_keeper.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace moe::common::rpc {
namespace {

std::atomic<int64_t> g_ticks{0};

void Run() {
  // Never connected: every call below fails on its expired deadline before any I/O.
  const std::shared_ptr<::grpc::Channel> channel = ::grpc::CreateChannel(
      "unix:/nonexistent/moe-callback-queue-keeper", ::grpc::InsecureChannelCredentials());
  ::grpc::GenericStub stub(channel);
  ::grpc::Slice empty;
  const ::grpc::ByteBuffer request(&empty, 1);  // a default ByteBuffer is no message at all
  for (;;) {
    ::grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() - std::chrono::seconds(1));
    ::grpc::ByteBuffer response;
    absl::Notification done;
    // Its completion is delivered on the callback queue: that is the event the threads need.
    stub.UnaryCall(&ctx, "/moe.keeper/Tick", ::grpc::StubOptions(), &request, &response,
                   [&done](const ::grpc::Status&) { done.Notify(); });
    done.WaitForNotification();
    g_ticks.fetch_add(1, std::memory_order_relaxed);
    absl::SleepFor(kCallbackQueueKeeperInterval);
  }
}

}  // namespace

void KeepCallbackQueueAwake() {
  static std::once_flag once;
  std::call_once(once, [] { std::thread(Run).detach(); });
}

int64_t CallbackQueueKeeperTicks() { return g_ticks.load(std::memory_order_relaxed); }

}  // namespace moe::common::rpc
