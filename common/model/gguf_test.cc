#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/base/file.h"
#include "common/model/gguf_reader.h"
#include "common/model/gguf_writer.h"
#include "common/tensor/dtype.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"

namespace moe::model::gguf {
namespace {

namespace fs = std::filesystem;
using common::testing::StatusIs;

std::string ReadAll(const std::string& path) { return common::ReadFile(path).value(); }

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = common::testing::MakeTempDir("gguf_test"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(GgufTest, WriterRoundTripsMetadataAndTensors) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddUint32("a.u32", 7);
  w.AddInt32("a.i32", -3);
  w.AddFloat32("a.f32", 0.5f);
  w.AddBool("a.bool", true);
  w.AddUint64("a.u64", 1ull << 40);
  w.AddStringArray("a.strs", {"x", "", "yz"});
  w.AddFloat32Array("a.floats", {1.0f, -2.0f});
  w.AddInt32Array("a.ints", {4, 5, 6});
  // 3 x 2 f32 (24 bytes, padded to 32) then a 5-element bf16 (10 bytes).
  w.AddTensor("t0", GgmlType::kF32, {3, 2}, [](uint8_t* out) {
    for (int i = 0; i < 6; ++i) {
      const float f = static_cast<float>(i);
      std::memcpy(out + 4 * i, &f, 4);
    }
    return absl::OkStatus();
  });
  w.AddTensor("t1", GgmlType::kBF16, {5}, [](uint8_t* out) {
    for (int i = 0; i < 10; ++i) out[i] = static_cast<uint8_t>(i + 1);
    return absl::OkStatus();
  });
  const std::string path = dir_ + "/t.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());

  const std::string bytes = ReadAll(path);
  ASSERT_GE(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 4), "GGUF");
  EXPECT_EQ(bytes.size() % kAlignment, 0u);

  auto info = ReadGgufHeader(path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->version, 3u);
  ASSERT_EQ(info->metadata.size(), 9u);
  EXPECT_EQ(info->metadata.at("general.architecture").s(), "llama");
  EXPECT_EQ(info->metadata.at("a.u32").type, ValueType::kUint32);
  EXPECT_EQ(info->metadata.at("a.u32").u(), 7u);
  EXPECT_EQ(info->metadata.at("a.i32").i(), -3);
  EXPECT_EQ(info->metadata.at("a.f32").f(), 0.5);
  EXPECT_TRUE(std::get<bool>(info->metadata.at("a.bool").scalar));
  EXPECT_EQ(info->metadata.at("a.u64").u(), 1ull << 40);
  const Value& strs = info->metadata.at("a.strs");
  EXPECT_EQ(strs.type, ValueType::kArray);
  EXPECT_EQ(strs.array_type, ValueType::kString);
  ASSERT_EQ(strs.array.size(), 3u);
  EXPECT_EQ(std::get<std::string>(strs.array[2]), "yz");
  EXPECT_EQ(std::get<double>(info->metadata.at("a.floats").array[1]), -2.0);
  EXPECT_EQ(std::get<int64_t>(info->metadata.at("a.ints").array[2]), 6);

  ASSERT_EQ(info->tensors.size(), 2u);
  EXPECT_EQ(info->tensors[0].name, "t0");
  EXPECT_EQ(info->tensors[0].ne, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(info->tensors[0].offset, 0u);
  EXPECT_EQ(info->tensors[1].type, GgmlType::kBF16);
  EXPECT_EQ(info->tensors[1].offset, 32u);
  EXPECT_EQ(info->data_offset % kAlignment, 0u);
  float f5 = 0;
  std::memcpy(&f5, bytes.data() + info->data_offset + 20, 4);
  EXPECT_EQ(f5, 5.0f);
  EXPECT_EQ(bytes[info->data_offset + 32 + 9], 10);
}

TEST_F(GgufTest, DuplicateKeysAreRejected) {
  GgufWriter w;
  w.AddUint32("k", 1);
  w.AddUint32("k", 2);
  EXPECT_THAT(w.WriteFile(dir_ + "/d.gguf"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(GgufTest, TruncatedFileIsRejected) {
  GgufWriter w;
  w.AddTensor("t", GgmlType::kF32, {64}, [](uint8_t*) { return absl::OkStatus(); });
  const std::string path = dir_ + "/t.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  fs::resize_file(path, fs::file_size(path) - 8);
  EXPECT_THAT(ReadGgufHeader(path).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace moe::model::gguf
