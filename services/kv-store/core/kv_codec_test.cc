#include "services/kv-store/core/kv_codec.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::kv_store {
namespace {

using ::moe::common::testing::StatusIs;

// [layers, 2, tokens, heads, dim] f32: smooth K/V-like values (shared exponents), or white noise.
std::string Block(const std::vector<int64_t>& dims, bool smooth, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0, 1);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = smooth ? 0.5f + 0.25f * std::sin(0.01f * static_cast<float>(i % 4096)) : noise(rng);
  }
  return std::string(reinterpret_cast<const char*>(v.data()), n * sizeof(float));
}

std::string Decode(Codec codec, const BlockLayout& layout, const std::string& payload) {
  std::string out(layout.num_bytes(), '\0');
  EXPECT_OK(
      DecodeBlock(codec, layout, payload, {reinterpret_cast<uint8_t*>(out.data()), out.size()}));
  return out;
}

const std::vector<int64_t> kDims = {4, 2, 16, 2, 64};  // the small preset's block

TEST(KvCodecTest, NoneKeepsTheBytesAsGiven) {
  const std::string raw = Block(kDims, true, 1);
  const EncodedBlock e =
      EncodeBlock({.mode = CompressionMode::kNone}, {common::DType::kF32, kDims}, raw);
  EXPECT_EQ(e.codec, Codec::kRaw);
  EXPECT_TRUE(e.payload.empty());  // the caller keeps `raw`
}

TEST(KvCodecTest, ZstdIsLosslessAndKeptWhereItPays) {
  const BlockLayout layout{common::DType::kF32, kDims};
  const std::string smooth = Block(kDims, true, 1);
  const EncodedBlock e = EncodeBlock({.mode = CompressionMode::kZstd}, layout, smooth);
  ASSERT_EQ(e.codec, Codec::kShuffleZstd);
  EXPECT_LT(e.payload.size(), smooth.size() / 2);
  EXPECT_TRUE(Decode(e.codec, layout, e.payload) == smooth);
}

TEST(KvCodecTest, ZstdFallsBackToRawWhenSavingsAreBelowTheFloor) {
  const BlockLayout layout{common::DType::kF32, kDims};
  const std::string noise = Block(kDims, false, 2);
  // Gaussian noise: only the sign/exponent byte compresses, well under half.
  const EncodedBlock kept =
      EncodeBlock({.mode = CompressionMode::kZstd, .min_savings = 0.01}, layout, noise);
  ASSERT_EQ(kept.codec, Codec::kShuffleZstd);
  EXPECT_TRUE(Decode(kept.codec, layout, kept.payload) == noise);
  const EncodedBlock raw =
      EncodeBlock({.mode = CompressionMode::kZstd, .min_savings = 0.9}, layout, noise);
  EXPECT_EQ(raw.codec, Codec::kRaw);
}

TEST(KvCodecTest, ZstdHandlesTwoByteTypesAndLargeBlocks) {
  const std::vector<int64_t> dims = {8, 2, 16, 4, 64};  // the bench preset's block: 256 KiB f32
  std::string raw = Block(dims, true, 3);
  raw.resize(raw.size() / 2);  // the same dims in bf16: half the bytes
  const BlockLayout layout{common::DType::kBF16, dims};
  const EncodedBlock e = EncodeBlock({.mode = CompressionMode::kZstd}, layout, raw);
  ASSERT_EQ(e.codec, Codec::kShuffleZstd);
  EXPECT_TRUE(Decode(e.codec, layout, e.payload) == raw);
  const BlockLayout f32{common::DType::kF32, dims};
  const std::string big = Block(dims, true, 4);
  const EncodedBlock e32 = EncodeBlock({.mode = CompressionMode::kZstd}, f32, big);
  ASSERT_EQ(e32.codec, Codec::kShuffleZstd);
  EXPECT_TRUE(Decode(e32.codec, f32, e32.payload) == big);
}

TEST(KvCodecTest, Int8IsWithinHalfAStepPerHeadAndAQuarterOfTheSize) {
  const BlockLayout layout{common::DType::kF32, kDims};
  const std::string raw = Block(kDims, false, 4);
  const EncodedBlock e = EncodeBlock({.mode = CompressionMode::kInt8}, layout, raw);
  ASSERT_EQ(e.codec, Codec::kInt8);
  EXPECT_EQ(e.payload.size(), raw.size() / 4 + 4 * 2 * 2 * sizeof(float));
  const std::string out = Decode(e.codec, layout, e.payload);
  const float* x = reinterpret_cast<const float*>(raw.data());
  const float* y = reinterpret_cast<const float*>(out.data());
  // Per (layer, k/v, head) the step is max|x| / 127; every error is within half a step.
  for (int64_t lk = 0; lk < 8; ++lk) {
    for (int64_t h = 0; h < 2; ++h) {
      float max_abs = 0;
      for (int64_t t = 0; t < 16; ++t)
        for (int64_t d = 0; d < 64; ++d)
          max_abs = std::max(max_abs, std::fabs(x[((lk * 16 + t) * 2 + h) * 64 + d]));
      for (int64_t t = 0; t < 16; ++t) {
        for (int64_t d = 0; d < 64; ++d) {
          const int64_t i = ((lk * 16 + t) * 2 + h) * 64 + d;
          ASSERT_LE(std::fabs(x[i] - y[i]), max_abs / 127 * 0.5f * 1.0001f) << i;
        }
      }
    }
  }
}

TEST(KvCodecTest, Int8LeavesNonKvLayoutsLossless) {
  const std::vector<int64_t> dims = {16, 64};
  const BlockLayout layout{common::DType::kF32, dims};
  const std::string raw = Block(dims, true, 5);
  const EncodedBlock e = EncodeBlock({.mode = CompressionMode::kInt8}, layout, raw);
  EXPECT_NE(e.codec, Codec::kInt8);
}

TEST(KvCodecTest, BackoffStopsTryingBlocksThatDoNotCompressAndResumesOnOneThatDoes) {
  const BlockLayout layout{common::DType::kF32, kDims};
  const CodecOptions zstd{.mode = CompressionMode::kZstd, .min_savings = 0.5};  // noise: no
  const std::string noise = Block(kDims, false, 7);
  CompressionBackoff backoff;
  // The first misses are all tried (kRaw, not backed off).
  for (int64_t i = 0; i < CompressionBackoff::kMissesBeforeBackoff; ++i) {
    const EncodedBlock e = EncodeBlock(zstd, layout, noise, &backoff);
    EXPECT_EQ(e.codec, Codec::kRaw);
    EXPECT_FALSE(e.backed_off) << i;
  }
  // Then one block in kProbeInterval is tried.
  int64_t tried = 0;
  for (int64_t i = 0; i < 3 * CompressionBackoff::kProbeInterval; ++i) {
    const EncodedBlock e = EncodeBlock(zstd, layout, noise, &backoff);
    EXPECT_EQ(e.codec, Codec::kRaw);
    EXPECT_TRUE(e.payload.empty());
    tried += e.backed_off ? 0 : 1;
  }
  EXPECT_EQ(tried, 3);
  // A probe that pays ends the backoff: every block is tried again.
  const std::string smooth = Block(kDims, true, 8);
  for (int64_t i = 0; !backoff.ShouldTry(); ++i) ASSERT_LT(i, CompressionBackoff::kProbeInterval);
  backoff.Record(true);
  for (int i = 0; i < 4; ++i) {
    const EncodedBlock e = EncodeBlock(zstd, layout, smooth, &backoff);
    EXPECT_EQ(e.codec, Codec::kShuffleZstd);
    EXPECT_TRUE(Decode(e.codec, layout, e.payload) == smooth);
  }
  EXPECT_FALSE(EncodeBlock(zstd, layout, noise, &backoff).backed_off);
}

TEST(KvCodecTest, BackoffLeavesInt8AndNoneAlone) {
  const BlockLayout layout{common::DType::kF32, kDims};
  const std::string noise = Block(kDims, false, 9);
  CompressionBackoff backoff;
  for (int i = 0; i < 100; ++i) backoff.Record(false);
  EXPECT_EQ(EncodeBlock({.mode = CompressionMode::kInt8}, layout, noise, &backoff).codec,
            Codec::kInt8);
  EXPECT_FALSE(EncodeBlock({.mode = CompressionMode::kNone}, layout, noise, &backoff).backed_off);
}

TEST(KvCodecTest, CorruptPayloadsAreDataLoss) {
  const BlockLayout layout{common::DType::kF32, kDims};
  const std::string raw = Block(kDims, true, 6);
  EncodedBlock e = EncodeBlock({.mode = CompressionMode::kZstd}, layout, raw);
  std::string out(raw.size(), '\0');
  std::span<uint8_t> dst(reinterpret_cast<uint8_t*>(out.data()), out.size());
  EXPECT_THAT(DecodeBlock(e.codec, layout, e.payload.substr(0, e.payload.size() / 2), dst),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(DecodeBlock(Codec::kRaw, layout, raw.substr(1), dst),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(DecodeBlock(Codec::kInt8, layout, "xyz", dst), StatusIs(absl::StatusCode::kDataLoss));
}

}  // namespace
}  // namespace moe::kv_store
