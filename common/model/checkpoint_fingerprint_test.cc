#include "common/model/checkpoint_fingerprint.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/model/make_model.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::model {
namespace {

namespace fs = std::filesystem;
using ::moe::common::testing::StatusIs;

std::string Make(const std::string& dir, uint64_t seed, common::DType dtype = common::DType::kF32) {
  MakeModelOptions o;
  o.seed = seed;
  o.dtype = dtype;
  EXPECT_OK(MakeModel(o, dir));
  return dir;
}

// Flips one byte of `file` at `offset`.
void FlipByte(const fs::path& file, int64_t offset) {
  const int fd = open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c;
  ASSERT_EQ(pread(fd, &c, 1, offset), 1);
  c ^= 0x01;
  ASSERT_EQ(pwrite(fd, &c, 1, offset), 1);
  close(fd);
}

fs::path OnlySafetensors(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") return e.path();
  }
  return {};
}

class CheckpointFingerprintTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { root_ = new std::string(common::testing::MakeTempDir("ckpt_fp")); }
  static std::string* root_;
};
std::string* CheckpointFingerprintTest::root_ = nullptr;

TEST_F(CheckpointFingerprintTest, IsStableAnd32HexDigits) {
  const std::string a = Make(*root_ + "/a", 1);
  ASSERT_OK_AND_ASSIGN(const std::string fp1, CheckpointFingerprint(a));
  ASSERT_OK_AND_ASSIGN(const std::string fp2, CheckpointFingerprint(a));
  EXPECT_EQ(fp1, fp2);
  EXPECT_THAT(fp1, ::testing::MatchesRegex("[0-9a-f]{32}"));
  // The same bytes elsewhere: the same checkpoint.
  const std::string copy = *root_ + "/a-copy";
  fs::copy(a, copy);
  EXPECT_THAT(CheckpointFingerprint(copy), common::testing::IsOkAndHolds(fp1));
}

TEST_F(CheckpointFingerprintTest, AnotherCheckpointOfTheSameShapeDiffers) {
  // Same config (same model id in a cluster), other weights: a fine-tune or another seed.
  const std::string a = Make(*root_ + "/s1", 1);
  const std::string b = Make(*root_ + "/s2", 2);
  EXPECT_NE(*CheckpointFingerprint(a), *CheckpointFingerprint(b));
  const std::string c = Make(*root_ + "/bf16", 1, common::DType::kBF16);
  EXPECT_NE(*CheckpointFingerprint(a), *CheckpointFingerprint(c));
}

TEST_F(CheckpointFingerprintTest, OneChangedWeightByteChangesIt) {
  const std::string a = Make(*root_ + "/flip", 3);
  ASSERT_OK_AND_ASSIGN(const std::string before, CheckpointFingerprint(a));
  const fs::path f = OnlySafetensors(a);
  FlipByte(f, static_cast<int64_t>(fs::file_size(f)) - 100);  // a weight, not the header
  ASSERT_OK_AND_ASSIGN(const std::string after, CheckpointFingerprint(a));
  EXPECT_NE(before, after);
}

TEST_F(CheckpointFingerprintTest, ConfigIsPartOfIt) {
  const std::string a = Make(*root_ + "/cfg", 4);
  ASSERT_OK_AND_ASSIGN(const std::string before, CheckpointFingerprint(a));
  std::ofstream(fs::path(a) / "config.json", std::ios::app) << "\n";
  EXPECT_NE(*CheckpointFingerprint(a), before);
}

TEST_F(CheckpointFingerprintTest, MissingFilesAreNotFound) {
  EXPECT_THAT(CheckpointFingerprint(*root_ + "/nothing-here"),
              StatusIs(absl::StatusCode::kNotFound));
  const std::string dir = *root_ + "/config-only";
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "config.json") << "{}";
  EXPECT_THAT(CheckpointFingerprint(dir), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace moe::model
