#include "common/kv/block_hash.h"

#include <xxhash.h>

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::kv {
namespace {

using ::moe::common::DType;
using ::moe::common::testing::IsOkAndHolds;
using ::moe::common::testing::StatusIs;

BlockHash Xxh3(const std::string& bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return BlockHash{h.low64, h.high64};
}

std::vector<int32_t> Iota(int32_t start, int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

TEST(BlockHashTest, HexIsTheCanonicalFormXxh128sumPrints) {
  // xxhash's own sanity vector: XXH3_128 of the empty input, as `xxh128sum /dev/null` prints it.
  const BlockHash empty = Xxh3("");
  EXPECT_EQ(empty.lo, 0x6001C324468D497FULL);
  EXPECT_EQ(empty.hi, 0x99AA06D3014798D8ULL);
  EXPECT_EQ(empty.ToHex(), "99aa06d3014798d86001c324468d497f");
  const std::array<uint8_t, 16> bytes = empty.CanonicalBytes();
  EXPECT_EQ(bytes[0], 0x99);
  EXPECT_EQ(bytes[7], 0xD8);
  EXPECT_EQ(bytes[8], 0x60);
  EXPECT_EQ(bytes[15], 0x7F);
}

TEST(BlockHashTest, FromHexRoundTripsAndRejectsBadInput) {
  const BlockHash h{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(h.ToHex(), "fedcba98765432100123456789abcdef");
  EXPECT_THAT(BlockHash::FromHex(h.ToHex()), IsOkAndHolds(h));
  EXPECT_THAT(BlockHash::FromHex("FEDCBA98765432100123456789ABCDEF"), IsOkAndHolds(h));
  EXPECT_THAT(BlockHash::FromHex("abc"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BlockHash::FromHex("fedcba98765432100123456789abcdeg"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(BlockHashTest, RootKeySerialisationIsTheDocumentedBytes) {
  BlockHashRootKey key{"m1", 16, DType::kBF16, "salt"};
  key.checkpoint_fingerprint = "fp";
  key.numerics = "n";
  const std::string expected =
      std::string("moe.kv.v2") + std::string("\x02\x00\x00\x00", 4) + "m1" +
      std::string("\x02\x00\x00\x00", 4) + "fp" + std::string("\x10\x00\x00\x00", 4) +
      std::string("\x04\x00\x00\x00", 4) + "bf16" + std::string("\x01\x00\x00\x00", 4) + "n" +
      std::string("\x04\x00\x00\x00", 4) + "salt";
  EXPECT_EQ(SerializeRootKey(key), expected);
  EXPECT_EQ(RootHash(key), Xxh3(expected));
}

TEST(BlockHashTest, BlockHashIsXxh3OfParentBytesThenLittleEndianTokens) {
  const BlockHash parent{0x1122334455667788ULL, 0x99aabbccddeeff00ULL};
  const std::string expected_input =
      std::string("\x99\xaa\xbb\xcc\xdd\xee\xff\x00\x11\x22\x33\x44\x55\x66\x77\x88", 16) +
      std::string("\x01\x00\x00\x00\x02\x01\x00\x00\xff\xff\xff\xff", 12);
  EXPECT_EQ(HashBlock(parent, {1, 258, -1}), Xxh3(expected_input));
}

TEST(BlockHashTest, GoldenVectorsPinTheFormat) {
  // Pinned outputs: any change here changes every L1/L2/L3 cache key and the gateway's routing,
  // and must come with a new version tag in SerializeRootKey.
  const BlockHash root = RootHash({"tiny", 16, DType::kF32, ""});
  EXPECT_EQ(root.ToHex(), "5fd75d35e7889e2ea53cccd7f7a75054");
  const std::vector<BlockHash> chain = HashFullBlocks(root, Iota(0, 32), 16);
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(chain[0].ToHex(), "09eb61d4649bd3a6786817510f70b381");
  EXPECT_EQ(chain[1].ToHex(), "1e609e9a0ab4d283b5600d45b5a95419");
}

TEST(BlockHashTest, ChainHashesOnlyFullBlocksAndLinksParents) {
  const BlockHash root = RootHash({"m", 4, DType::kF32, ""});
  const std::vector<int32_t> tokens = Iota(100, 11);
  const std::vector<BlockHash> chain = HashFullBlocks(root, tokens, 4);
  ASSERT_EQ(chain.size(), 2u);  // the 3-token tail has no identity
  EXPECT_EQ(chain[0], HashBlock(root, {100, 101, 102, 103}));
  EXPECT_EQ(chain[1], HashBlock(chain[0], {104, 105, 106, 107}));
}

TEST(BlockHashTest, EqualBlocksUnderDifferentPrefixesDiffer) {
  const BlockHash root = RootHash({"m", 2, DType::kF32, ""});
  const std::vector<BlockHash> a = HashFullBlocks(root, {1, 2, 5, 6}, 2);
  const std::vector<BlockHash> b = HashFullBlocks(root, {3, 4, 5, 6}, 2);
  EXPECT_NE(a[1], b[1]);
}

TEST(BlockHashTest, EveryRootKeyFieldSeparatesNamespaces) {
  const BlockHashRootKey base{"model", 16, DType::kF32, ""};
  absl::flat_hash_set<BlockHash> roots = {RootHash(base)};
  BlockHashRootKey k = base;
  k.model_id = "model2";
  roots.insert(RootHash(k));
  k = base;
  k.block_size = 32;
  roots.insert(RootHash(k));
  k = base;
  k.kv_dtype = DType::kF16;
  roots.insert(RootHash(k));
  k = base;
  k.cache_salt = "tenant-a";
  roots.insert(RootHash(k));
  // What computed the blocks: another checkpoint of the same name, another numerics mode.
  k = base;
  k.checkpoint_fingerprint = "0123456789abcdef0123456789abcdef";
  roots.insert(RootHash(k));
  k = base;
  k.numerics = NumericsSetting("bf16", "exact");
  roots.insert(RootHash(k));
  k = base;
  k.numerics = NumericsSetting("f32", "int8");
  roots.insert(RootHash(k));
  k = base;
  k.numerics = NumericsSetting("f32", "exact", "q8_0");
  roots.insert(RootHash(k));
  EXPECT_EQ(roots.size(), 9u);
  EXPECT_EQ(base.numerics, NumericsSetting("f32", "exact"));
  // Weights as stored name no weights mode: those roots are the ones before the mode existed.
  EXPECT_EQ(NumericsSetting("f32", "exact", "checkpoint"), "activations=f32;kv=exact");
  EXPECT_EQ(NumericsSetting("bf16", "int8", "q8_0"), "activations=bf16;kv=int8;weights=q8_0");
  // Length prefixes keep field boundaries: moving a byte from model id to salt is a new key.
  EXPECT_NE(RootHash({"ab", 16, DType::kF32, "c"}), RootHash({"a", 16, DType::kF32, "bc"}));
}

TEST(BlockHashTest, LongBlocksHashLikeShortOnes) {
  // Blocks beyond the 64-token stack buffer take the heap path; same definition.
  const BlockHash parent = RootHash({"m", 100, DType::kF32, ""});
  const std::vector<int32_t> tokens = Iota(7, 100);
  std::string input(reinterpret_cast<const char*>(parent.CanonicalBytes().data()), 16);
  for (int32_t t : tokens) {
    for (int i = 0; i < 4; ++i) input.push_back(static_cast<char>((t >> (8 * i)) & 0xff));
  }
  EXPECT_EQ(HashBlock(parent, tokens), Xxh3(input));
}

}  // namespace
}  // namespace moe::kv
