#include "services/gateway/core/multipart.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::gateway {
namespace {

using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;
using namespace std::string_literals;

constexpr char kType[] = "multipart/form-data; boundary=----b0undary";

TEST(MultipartTest, ParsesFieldsAndFiles) {
  const std::string body =
      "------b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
      "------b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a b.wav\"\r\n"
      "Content-Type: audio/wav\r\n\r\nRIFF\r\n--not-the-boundary\x00\x01\r\n"
      "------b0undary--\r\n"s;
  auto parts = ParseMultipartFormData(std::string_view(body.data(), body.size()), kType);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "model");
  EXPECT_EQ((*parts)[0].data, "whisper-1");
  EXPECT_EQ((*parts)[1].name, "file");
  EXPECT_EQ((*parts)[1].filename, "a b.wav");
  EXPECT_EQ((*parts)[1].content_type, "audio/wav");
  EXPECT_EQ((*parts)[1].data, "RIFF\r\n--not-the-boundary\x00\x01"s);
}

TEST(MultipartTest, RejectsWhatIsNotAWellFormedForm) {
  EXPECT_THAT(ParseMultipartFormData("x", "application/json").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("multipart/form-data")));
  EXPECT_THAT(ParseMultipartFormData("x", "multipart/form-data").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("boundary")));
  EXPECT_THAT(ParseMultipartFormData("------b0undary\r\nContent-Disposition: form-data; "
                                     "name=\"file\"\r\n\r\ncut off",
                                     kType)
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated")));
  EXPECT_THAT(
      ParseMultipartFormData("------b0undary\r\nX: y\r\n\r\nz\r\n------b0undary--", kType).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Content-Disposition")));
  std::string many;
  for (int i = 0; i < 5; ++i) {
    many += "------b0undary\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nv\r\n";
  }
  many += "------b0undary--";
  EXPECT_THAT(ParseMultipartFormData(many, kType, 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than 4")));
}

}  // namespace
}  // namespace moe::gateway
