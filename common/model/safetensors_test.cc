#include "common/model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"

namespace moe::model {
namespace {

using common::DType;
using common::testing::IsOk;
using common::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = common::testing::MakeTempDir("safetensors_test"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // A file with a hand-written header and `data_bytes` bytes of data.
  std::string WriteRaw(const std::string& name, const std::string& header, size_t data_bytes) {
    std::string path = Path(name);
    std::ofstream out(path, std::ios::binary);
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header << std::string(data_bytes, '\0');
    return path;
  }

  std::string dir_;
};

TEST_F(SafetensorsTest, WritesAndMapsTensorsInPlace) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {common::F32ToBf16(0.5f), common::F32ToBf16(-2.0f)};
  std::vector<uint16_t> c = {common::F32ToF16(1.5f)};
  std::string path = Path("m.safetensors");
  ASSERT_OK(WriteSafetensors(
      path, {{"a", DType::kF32, {2, 3}}, {"b", DType::kBF16, {2}}, {"c", DType::kF16, {1, 1}}},
      {a.data(), b.data(), c.data()}, {{"format", "pt"}}));
  ASSERT_OK_AND_ASSIGN(auto f, SafetensorsFile::Open(path));
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const TensorInfo* ta = f->Find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, DType::kF32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->nbytes, 24);
  EXPECT_EQ(ta->file_offset % 8, 0);  // header padded: data section 8-byte aligned
  EXPECT_EQ(reinterpret_cast<const float*>(ta->data)[5], 6.0f);
  const TensorInfo* tb = f->Find("b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, DType::kBF16);
  EXPECT_EQ(common::Bf16ToF32(reinterpret_cast<const uint16_t*>(tb->data)[1]), -2.0f);
  const TensorInfo* tc = f->Find("c");
  ASSERT_NE(tc, nullptr);
  EXPECT_EQ(common::F16ToF32(reinterpret_cast<const uint16_t*>(tc->data)[0]), 1.5f);
  EXPECT_EQ(f->Find("zzz"), nullptr);
  EXPECT_EQ(f->file_size(), static_cast<int64_t>(std::filesystem::file_size(path)));
}

TEST_F(SafetensorsTest, StreamingWriterChecksByteCount) {
  std::string path = Path("s.safetensors");
  ASSERT_OK_AND_ASSIGN(auto w, SafetensorsWriter::Create(path, {{"x", DType::kF32, {4}}}));
  float v[4] = {1, 2, 3, 4};
  ASSERT_OK(w->Append(v, 8));
  EXPECT_THAT(w->Finish(), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("8 of 16")));
  ASSERT_OK_AND_ASSIGN(auto w2, SafetensorsWriter::Create(path, {{"x", DType::kF32, {4}}}));
  ASSERT_OK(w2->Append(v, 8));
  EXPECT_THAT(w2->Append(v, 16), StatusIs(absl::StatusCode::kOutOfRange));
  ASSERT_OK(w2->Append(v + 2, 8));
  ASSERT_OK(w2->Finish());
  ASSERT_OK_AND_ASSIGN(auto f, SafetensorsFile::Open(path));
  EXPECT_EQ(reinterpret_cast<const float*>(f->Find("x")->data)[3], 4.0f);
  EXPECT_THAT(SafetensorsWriter::Create(path, {{"x", DType::kF32, {1}}, {"x", DType::kF32, {1}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate")));
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  EXPECT_THAT(SafetensorsFile::Open(Path("nope.safetensors")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope.safetensors")));
}

TEST_F(SafetensorsTest, TruncatedFileNamesFileAndTensor) {
  std::vector<float> a(64, 1.0f), b(64, 2.0f);
  std::string path = Path("t.safetensors");
  ASSERT_OK(WriteSafetensors(path, {{"first", DType::kF32, {64}}, {"second", DType::kF32, {64}}},
                             {a.data(), b.data()}));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  EXPECT_THAT(SafetensorsFile::Open(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("'second'"), HasSubstr("truncated"))));
  // Cut inside the 8-byte length itself.
  std::filesystem::resize_file(path, 5);
  EXPECT_THAT(
      SafetensorsFile::Open(path),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr(path), HasSubstr("truncated"))));
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFile) {
  std::string path = Path("h.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    uint64_t n = 1000;
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << "{}";
  }
  EXPECT_THAT(
      SafetensorsFile::Open(path),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr(path), HasSubstr("header length 1000"), HasSubstr("past the end"))));
}

TEST_F(SafetensorsTest, OverlappingOffsets) {
  std::string path = WriteRaw("o.safetensors",
                              R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                              R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                              24);
  EXPECT_THAT(SafetensorsFile::Open(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("'b'"), HasSubstr("overlap tensor 'a'"))));
}

TEST_F(SafetensorsTest, OutOfRangeOffsets) {
  // A hole before `b` and `b` ends past the data section: out of range (not a clean truncation).
  std::string path = WriteRaw("r.safetensors",
                              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[400,408]}})",
                              16);
  EXPECT_THAT(SafetensorsFile::Open(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("'b'"), HasSubstr("out of range"))));
}

TEST_F(SafetensorsTest, SizeNotMatchingShapeAndDtype) {
  std::string path = WriteRaw("z.safetensors",
                              R"({"w":{"dtype":"BF16","shape":[3,3],"data_offsets":[0,36]}})", 36);
  EXPECT_THAT(SafetensorsFile::Open(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'w'"), HasSubstr("needs 18 bytes"))));
}

TEST_F(SafetensorsTest, MalformedHeaders) {
  auto open = [&](const std::string& header) {
    return SafetensorsFile::Open(WriteRaw("bad.safetensors", header, 16)).status();
  };
  EXPECT_THAT(open("{not json"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("JSON")));
  EXPECT_THAT(open(R"({"w":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown dtype 'Q4'")));
  EXPECT_THAT(open(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad shape")));
  EXPECT_THAT(open(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w'")));
  EXPECT_THAT(open(R"({"w":{"dtype":"F32","shape":[4]}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data_offsets")));
  EXPECT_THAT(open(R"({"__metadata__":{"format":1}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("__metadata__")));
  // Other dtypes are parsed (and sized) but marked unsupported.
  ASSERT_OK_AND_ASSIGN(
      auto f,
      SafetensorsFile::Open(WriteRaw(
          "i8.safetensors", R"({"q":{"dtype":"I8","shape":[16],"data_offsets":[0,16]}})", 16)));
  EXPECT_FALSE(f->Find("q")->dtype_supported);
}

TEST_F(SafetensorsTest, EmptyTensorsAndZeroSizeFileAreHandled) {
  ASSERT_OK_AND_ASSIGN(
      auto f,
      SafetensorsFile::Open(WriteRaw(
          "e.safetensors", R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}})", 0)));
  EXPECT_EQ(f->Find("e")->nbytes, 0);
  std::ofstream(Path("zero.safetensors")).close();
  EXPECT_THAT(SafetensorsFile::Open(Path("zero.safetensors")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated")));
}

}  // namespace
}  // namespace moe::model
