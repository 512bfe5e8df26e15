#include "common/grpc/status.h"

#include "gtest/gtest.h"

namespace moe::common::rpc {
namespace {

TEST(StatusTest, EveryCanonicalCodeRoundTripsWithItsMessage) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status s(static_cast<absl::StatusCode>(code), "detail");
    const ::grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(g.error_message(), "detail");
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(::grpc::Status::OK).ok());
}

TEST(StatusTest, NamedCodesMatch) {
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("full")).error_code(),
            ::grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("bad")).error_code(),
            ::grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(FromGrpcStatus(::grpc::Status(::grpc::StatusCode::UNAVAILABLE, "x")).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace moe::common::rpc
