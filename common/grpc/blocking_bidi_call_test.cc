#include "common/grpc/blocking_bidi_call.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "moe/router/v1/router.grpc.pb.h"

namespace moe::common::rpc {
namespace {

namespace rpb = ::moe::router::v1;
using Call = BlockingBidiCall<rpb::GenerateBatchRequest, rpb::GenerateBatchResponse>;

// Any bidi method does; GenerateBatch's messages carry ids to check order by.
class Server final : public rpb::Router::WithCallbackMethod_GenerateBatch<rpb::Router::Service> {
 public:
  explicit Server(std::function<grpc::Status(Call&)> handler) : handler_(std::move(handler)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~Server() override { server_->Shutdown(); }

  grpc::ServerBidiReactor<rpb::GenerateBatchRequest, rpb::GenerateBatchResponse>* GenerateBatch(
      grpc::CallbackServerContext* context) override {
    return Call::Start(context, handler_);
  }

  std::unique_ptr<rpb::Router::Stub> Stub() const {
    return rpb::Router::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }

 private:
  std::function<grpc::Status(Call&)> handler_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

rpb::GenerateBatchRequest Start(uint64_t id) {
  rpb::GenerateBatchRequest request;
  request.add_starts()->set_id(id);
  return request;
}

rpb::GenerateBatchResponse Item(uint64_t id) {
  rpb::GenerateBatchResponse response;
  response.add_items()->set_id(id);
  return response;
}

TEST(BlockingBidiCallTest, ReadsInOrderUntilTheHalfCloseAndFinishesWithTheHandlersStatus) {
  Server server([](Call& call) {
    rpb::GenerateBatchRequest request;
    int n = 0;
    while (call.Read(&request)) {
      EXPECT_TRUE(call.Write(Item(request.starts(0).id() * 10)));
      ++n;
    }
    EXPECT_FALSE(call.Read(&request));  // over, and it stays over
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, absl::StrCat("read ", n));
  });
  auto stub = server.Stub();
  grpc::ClientContext context;
  auto stream = stub->GenerateBatch(&context);
  rpb::GenerateBatchResponse response;
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(stream->Write(Start(id)));
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.items(0).id(), id * 10);
  }
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(), "read 3");
}

// Writes from several threads (the router's writer beside its reader, the fakes' per-request
// threads) go out one at a time, each thread's in its own order, none lost.
TEST(BlockingBidiCallTest, WritesFromManyThreadsAreSerialised) {
  constexpr int kThreads = 4;
  constexpr int kEach = 200;
  Server server([](Call& call) {
    std::vector<std::thread> writers;
    for (int t = 0; t < kThreads; ++t) {
      writers.emplace_back([&call, t] {
        for (int i = 0; i < kEach; ++i) EXPECT_TRUE(call.Write(Item(t * 1000 + i)));
      });
    }
    rpb::GenerateBatchRequest request;
    while (call.Read(&request)) {
    }
    for (std::thread& w : writers) w.join();
    return grpc::Status::OK;
  });
  auto stub = server.Stub();
  grpc::ClientContext context;
  auto stream = stub->GenerateBatch(&context);
  std::vector<int> next(kThreads, 0);
  rpb::GenerateBatchResponse response;
  for (int i = 0; i < kThreads * kEach; ++i) {
    ASSERT_TRUE(stream->Read(&response));
    const int t = static_cast<int>(response.items(0).id() / 1000);
    ASSERT_LT(t, kThreads);
    EXPECT_EQ(response.items(0).id() % 1000, static_cast<uint64_t>(next[t]));
    ++next[t];
  }
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_TRUE(stream->Finish().ok());
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(next[t], kEach);
}

// A client that goes away ends the pending Read, and Write then fails at once.
TEST(BlockingBidiCallTest, AClientThatGoesAwayEndsReadAndWrite) {
  absl::Notification handler_done;
  std::atomic<bool> write_after_cancel{true};
  std::atomic<bool> cancelled{false};
  Server server([&](Call& call) {
    rpb::GenerateBatchRequest request;
    EXPECT_TRUE(call.Read(&request));
    EXPECT_TRUE(call.Write(Item(1)));
    EXPECT_FALSE(call.Read(&request));  // the client cancels instead of sending more
    cancelled = call.context()->IsCancelled();
    bool wrote = true;
    for (int i = 0; i < 100 && wrote; ++i) wrote = call.Write(Item(2));
    write_after_cancel = wrote;
    handler_done.Notify();
    return grpc::Status::OK;
  });
  auto stub = server.Stub();
  grpc::ClientContext context;
  auto stream = stub->GenerateBatch(&context);
  ASSERT_TRUE(stream->Write(Start(7)));
  rpb::GenerateBatchResponse response;
  ASSERT_TRUE(stream->Read(&response));
  context.TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(handler_done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_TRUE(cancelled);
  EXPECT_FALSE(write_after_cancel);
}

// The router's drain: its writer ends first and releases the reader blocked in Read with
// TryCancel, so the call ends though the client keeps its side open.
TEST(BlockingBidiCallTest, TryCancelReleasesABlockedRead) {
  Server server([](Call& call) {
    std::thread writer([&call] {
      EXPECT_TRUE(call.Write(Item(5)));
      call.context()->TryCancel();
    });
    rpb::GenerateBatchRequest request;
    const bool read = call.Read(&request);
    writer.join();
    EXPECT_FALSE(read);
    return grpc::Status::OK;
  });
  auto stub = server.Stub();
  grpc::ClientContext context;
  auto stream = stub->GenerateBatch(&context);
  rpb::GenerateBatchResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.items(0).id(), 5u);
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

}  // namespace
}  // namespace moe::common::rpc
