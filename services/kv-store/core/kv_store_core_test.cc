#include "services/kv-store/core/kv_store_core.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/kv/block_hash.h"
#include "common/metrics/registry.h"
#include "common/testing/fake_clock.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::kv_store {
namespace {

namespace fs = std::filesystem;
using ::moe::common::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A tiny-preset-shaped block: [2 layers, 2, 4 tokens, 2 heads, 8] f32 = 1 KiB.
const std::vector<int64_t> kDims = {2, 2, 4, 2, 8};
constexpr int64_t kBlockBytes = 2 * 2 * 4 * 2 * 8 * 4;

kv::BlockHash H(uint64_t i) { return kv::BlockHash{i * 0x9e3779b97f4a7c15ull + 1, i}; }

std::vector<kv::BlockHash> Chain(int n, uint64_t base = 0) {
  std::vector<kv::BlockHash> out;
  for (int i = 0; i < n; ++i) out.push_back(H(base + i));
  return out;
}

// K/V-like data: smooth values (they compress), distinct per block.
PutBlock Block(const kv::BlockHash& hash, uint64_t seed) {
  PutBlock b{.hash = hash, .dtype = common::DType::kF32, .dims = kDims};
  std::vector<float> v(kBlockBytes / 4);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = 0.5f + 0.001f * static_cast<float>((seed * 131 + i) % 97);
  }
  b.data.assign(reinterpret_cast<const char*>(v.data()), kBlockBytes);
  b.checksum = XXH3_64bits(b.data.data(), b.data.size());
  return b;
}

std::vector<PutBlock> Blocks(const std::vector<kv::BlockHash>& hashes) {
  std::vector<PutBlock> out;
  for (size_t i = 0; i < hashes.size(); ++i) out.push_back(Block(hashes[i], hashes[i].hi));
  return out;
}

std::string Tiers(const LookupResult& r) {
  std::string out;
  for (Tier t : r.tiers) out += t == Tier::kL2 ? '2' : '3';
  return out;
}

class KvStoreCoreTest : public ::testing::Test {
 protected:
  KvStoreCoreTest() : dir_(common::testing::MakeTempDir("kv_store_core")) {
    options_.l2_bytes = 64 << 10;
    options_.l3_bytes = 1 << 20;
    options_.l3_dir = dir_;
  }
  void Open() {
    core_.reset();  // the previous instance flushes and closes first
    registry_ = std::make_unique<common::metrics::Registry>();
    ASSERT_OK_AND_ASSIGN(core_, KvStoreCore::Create(options_, *registry_, clock_));
  }
  double Metric(const std::string& name, const common::metrics::Labels& labels = {}) {
    return registry_->Value(name, labels).value_or(-1);
  }
  // The data each Get returned, by hash order, checked against what was put.
  void ExpectServed(const std::vector<GotBlock>& got, const std::vector<kv::BlockHash>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].hash, want[i]);
      const PutBlock b = Block(want[i], want[i].hi);
      EXPECT_TRUE(got[i].data.view() == b.data) << "block " << i << " differs";
      EXPECT_EQ(got[i].checksum, b.checksum);
      EXPECT_EQ(got[i].dims, kDims);
    }
  }

  std::string dir_;
  common::testing::FakeClock clock_;
  KvStoreCoreOptions options_;
  std::unique_ptr<common::metrics::Registry> registry_;
  std::unique_ptr<KvStoreCore> core_;
};

TEST_F(KvStoreCoreTest, PutThenGetServesTheSameBytesInEveryLosslessMode) {
  for (CompressionMode mode : {CompressionMode::kNone, CompressionMode::kZstd}) {
    options_.compression = mode;
    options_.l3_dir = common::testing::MakeTempDir("kv_store_mode");
    Open();
    const auto chain = Chain(4);
    ASSERT_OK_AND_ASSIGN(PutResult r, core_->Put(Blocks(chain)));
    EXPECT_EQ(r.num_stored, 4);
    ExpectServed(core_->Get(chain, false), chain);
    EXPECT_EQ(core_->Get(chain, false)[0].tier, Tier::kL2);
  }
}

TEST_F(KvStoreCoreTest, BlocksThatDoNotCompressStopBeingTriedAndAreStillServedExactly) {
  options_.compression = CompressionMode::kZstd;
  options_.min_savings = 0.99;  // nothing pays
  options_.l2_bytes = 1 << 20;
  Open();
  const auto chain = Chain(100);
  ASSERT_OK_AND_ASSIGN(PutResult r, core_->Put(Blocks(chain)));
  EXPECT_EQ(r.num_stored, 100);
  // 8 tried, then 1 in 64 of the other 92: 91 skipped, counted.
  EXPECT_EQ(Metric("moe_kv_store_compression_skipped_total"), 91);
  ExpectServed(core_->Get(chain, false), chain);
  core_->FlushL3();
  EXPECT_EQ(Metric("moe_kv_store_bytes_total", {{"tier", "l2"}, {"op", "put"}}), 100 * kBlockBytes);
}

TEST_F(KvStoreCoreTest, PutIsIdempotentPerHash) {
  Open();
  ASSERT_OK(core_->Put(Blocks(Chain(3))).status());
  ASSERT_OK_AND_ASSIGN(PutResult r, core_->Put(Blocks(Chain(4))));
  EXPECT_EQ(r.num_stored, 1);
  EXPECT_EQ(r.num_already_present, 3);
}

TEST_F(KvStoreCoreTest, MalformedPutIsInvalidArgumentAndStoresNothing) {
  Open();
  std::vector<PutBlock> blocks = Blocks(Chain(3));
  blocks[2].checksum ^= 1;
  EXPECT_THAT(core_->Put(blocks), StatusIs(absl::StatusCode::kInvalidArgument));
  blocks = Blocks(Chain(3));
  blocks[1].dims = {2, 2, 4, 2, 9};
  EXPECT_THAT(core_->Put(blocks), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(core_->Lookup(Chain(3)).num_cached_blocks, 0);
}

TEST_F(KvStoreCoreTest, LookupIsTheLongestPrefixPresentInAnyTier) {
  Open();
  const auto chain = Chain(6);
  ASSERT_OK(core_->Put(Blocks({chain[0], chain[1], chain[2], chain[4]})).status());
  const LookupResult r = core_->Lookup(chain);
  EXPECT_EQ(r.num_cached_blocks, 3);  // block 3 is missing; 4 is an orphan
  EXPECT_EQ(Tiers(r), "222");
  EXPECT_EQ(r.num_in_l2(), 3);
  EXPECT_EQ(core_->Lookup(Chain(2, 100)).num_cached_blocks, 0);
  // Get with prefix_only stops at the gap; without, returns what exists.
  ExpectServed(core_->Get(chain, /*prefix_only=*/true), {chain[0], chain[1], chain[2]});
  ExpectServed(core_->Get(chain, /*prefix_only=*/false), {chain[0], chain[1], chain[2], chain[4]});
}

TEST_F(KvStoreCoreTest, PrefixCacheMetricsCountEachTiersOwnQueries) {
  options_.compression = CompressionMode::kNone;
  options_.l2_bytes = 3 * (kBlockBytes + 256);  // three blocks fit in L2
  Open();
  const auto chain = Chain(5);
  ASSERT_OK(core_->Put(Blocks(chain)).status());
  core_->FlushL3();  // all five on disk; L2 kept the last three
  const LookupResult r = core_->Lookup(Chain(6));
  EXPECT_EQ(Tiers(r), "33222");
  // L2 was asked 6 blocks and had 3; L3 was asked the 3 L2 missed and had 2.
  EXPECT_EQ(Metric("moe_prefix_cache_queries_total", {{"tier", "l2"}}), 6);
  EXPECT_EQ(Metric("moe_prefix_cache_hits_total", {{"tier", "l2"}}), 3);
  EXPECT_EQ(Metric("moe_prefix_cache_queries_total", {{"tier", "l3"}}), 3);
  EXPECT_EQ(Metric("moe_prefix_cache_hits_total", {{"tier", "l3"}}), 2);
  EXPECT_EQ(Metric("moe_kv_evictions_total", {{"tier", "l2"}, {"reason", "lru"}}), 2);
}

TEST_F(KvStoreCoreTest, L2EvictionDemotesToL3AndAGetPromotesBack) {
  options_.compression = CompressionMode::kNone;
  // Two blocks fit; a block promoted from L3 keeps its file buffer (+152 bytes of header).
  options_.l2_bytes = 2 * (kBlockBytes + 152 + 256);
  options_.l3_write_queue_bytes = 0;  // no write-behind: only evictions reach L3
  Open();
  const auto chain = Chain(3);
  ASSERT_OK(core_->Put(Blocks(chain)).status());
  core_->FlushL3();
  EXPECT_EQ(Tiers(core_->Lookup(chain)), "");  // block 0 was dropped: the queue had no room
  options_.l3_write_queue_bytes = 1 << 20;
  Open();
  ASSERT_OK(core_->Put(Blocks(chain)).status());
  core_->FlushL3();
  EXPECT_EQ(Tiers(core_->Lookup(chain)), "322");
  const std::vector<GotBlock> got = core_->Get(std::vector<kv::BlockHash>{chain[0]}, false);
  ExpectServed(got, {chain[0]});
  EXPECT_EQ(got[0].tier, Tier::kL3);
  EXPECT_EQ(Tiers(core_->Lookup(chain)), "232");  // promoted; block 1 demoted to make room
  const StoreStats s = core_->Stats();
  ASSERT_EQ(s.tiers.size(), 2u);
  EXPECT_EQ(s.tiers[0].blocks_used, 2);
  EXPECT_EQ(s.tiers[1].blocks_used, 3);
  EXPECT_EQ(s.tiers[1].hits, 1u);
}

TEST_F(KvStoreCoreTest, L3SurvivesARestartAndKeepsItsBudget) {
  options_.compression = CompressionMode::kNone;  // equal file sizes
  Open();
  const auto chain = Chain(8);
  ASSERT_OK(core_->Put(Blocks(chain)).status());
  Open();  // the destructor finished the queued writes; L2 starts empty
  EXPECT_EQ(Tiers(core_->Lookup(chain)), "33333333");
  ExpectServed(core_->Get(chain, true), chain);
  // A smaller budget on reopen evicts the oldest files.
  core_->FlushL3();
  const int64_t file_bytes = core_->Stats().tiers[1].bytes_used / 8;
  options_.l3_bytes = 3 * file_bytes;
  Open();
  EXPECT_EQ(core_->Stats().tiers[1].blocks_used, 3);
}

TEST_F(KvStoreCoreTest, OneCorruptByteOnDiskIsDetectedDroppedCountedAndNeverServed) {
  options_.compression = CompressionMode::kNone;
  Open();
  const auto chain = Chain(3);
  ASSERT_OK(core_->Put(Blocks(chain)).status());
  const std::string path = core_->L3PathForTesting(chain[1]);
  Open();  // blocks only in L3 now
  {
    const int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char c;
    ASSERT_EQ(pread(fd, &c, 1, 500), 1);
    c ^= 0x40;
    ASSERT_EQ(pwrite(fd, &c, 1, 500), 1);
    close(fd);
  }
  ExpectServed(core_->Get(chain, /*prefix_only=*/true), {chain[0]});
  EXPECT_EQ(Metric("moe_kv_corrupt_blocks_total"), 1);
  EXPECT_EQ(core_->Stats().corrupt_blocks_dropped, 1u);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(Tiers(core_->Lookup(chain)), "2");  // block 0 was promoted; 1 is gone
  // Put again (a router recomputed it): served again.
  ASSERT_OK(core_->Put(Blocks({chain[1]})).status());
  ExpectServed(core_->Get(chain, true), chain);
}

TEST_F(KvStoreCoreTest, CorruptCompressedBlocksAndHeadersAreCaughtToo) {
  Open();  // zstd
  const auto chain = Chain(2);
  ASSERT_OK(core_->Put(Blocks(chain)).status());
  const std::string p0 = core_->L3PathForTesting(chain[0]);
  const std::string p1 = core_->L3PathForTesting(chain[1]);
  Open();
  auto flip = [](const std::string& path, off_t at) {
    const int fd = open(path.c_str(), O_RDWR);
    char c;
    ASSERT_EQ(pread(fd, &c, 1, at), 1);
    c ^= 1;
    ASSERT_EQ(pwrite(fd, &c, 1, at), 1);
    close(fd);
  };
  flip(p0, 20);                                         // the key, in the header
  flip(p1, static_cast<off_t>(fs::file_size(p1)) - 1);  // the compressed payload's last byte
  EXPECT_THAT(core_->Get(chain, false), IsEmpty());
  EXPECT_EQ(Metric("moe_kv_corrupt_blocks_total"), 2);
}

TEST_F(KvStoreCoreTest, ACrashMidWriteLeavesNoServableDamage) {
  Open();
  const auto chain = Chain(3);
  ASSERT_OK(core_->Put(Blocks(chain)).status());
  core_->FlushL3();
  const std::string p0 = core_->L3PathForTesting(chain[0]);
  const std::string p2 = core_->L3PathForTesting(chain[2]);
  core_.reset();
  // What kill -9 can leave: a temporary file of an interrupted write (never renamed)...
  std::ofstream(p0 + ".tmp.12345.7") << "partial";
  // ...and what a torn write on power loss could: a final file cut short.
  fs::resize_file(p2, fs::file_size(p2) / 2);
  Open();
  EXPECT_FALSE(fs::exists(p0 + ".tmp.12345.7"));
  ExpectServed(core_->Get(chain, false), {chain[0], chain[1]});
  EXPECT_EQ(Metric("moe_kv_corrupt_blocks_total"), 1);
}

TEST_F(KvStoreCoreTest, AnIntactFileUnderAnotherBlocksNameIsNeverServed) {
  // A file moved or restored under the wrong name is a valid file of another block: its header
  // names the block it holds, so serving it under this name would be wrong K/V.
  options_.compression = CompressionMode::kNone;
  Open();
  const auto chain = Chain(2);
  ASSERT_OK(core_->Put(Blocks(chain)).status());
  const std::string p0 = core_->L3PathForTesting(chain[0]);
  const std::string p1 = core_->L3PathForTesting(chain[1]);
  Open();  // both only in L3
  fs::copy_file(p0, p1, fs::copy_options::overwrite_existing);
  ExpectServed(core_->Get(chain, /*prefix_only=*/false), {chain[0]});
  EXPECT_EQ(Metric("moe_kv_corrupt_blocks_total"), 1);
  EXPECT_FALSE(fs::exists(p1));
  EXPECT_TRUE(fs::exists(p0));
}

TEST_F(KvStoreCoreTest, StrayEmptyAndForeignFilesInL3DoNotStopARestart) {
  options_.compression = CompressionMode::kNone;
  Open();
  const auto chain = Chain(2);
  ASSERT_OK(core_->Put(Blocks(chain)).status());
  core_->FlushL3();
  const std::string p0 = core_->L3PathForTesting(chain[0]);
  const std::string empty = core_->L3PathForTesting(H(9));
  const std::string blocks_dir = fs::path(p0).parent_path().parent_path().string();
  core_.reset();
  // What an operator, a full disk or another program can leave in the directory.
  std::ofstream(blocks_dir + "/notes.txt") << "not a block";
  std::ofstream(blocks_dir + "/zz-not-hex.blk") << "not a block either";
  fs::create_directories(blocks_dir + "/subdir/deeper");
  fs::create_directories(fs::path(empty).parent_path());
  std::ofstream(empty).flush();  // a block's name, zero bytes (ENOSPC before any write)
  Open();
  ExpectServed(core_->Get(chain, false), chain);
  const std::vector<kv::BlockHash> nine = {H(9)};
  EXPECT_EQ(core_->Lookup(nine).num_cached_blocks, 1);  // indexed by name...
  EXPECT_THAT(core_->Get(nine, false), IsEmpty());      // ...but never served
  EXPECT_EQ(Metric("moe_kv_corrupt_blocks_total"), 1);
  EXPECT_EQ(core_->Lookup(nine).num_cached_blocks, 0);
  EXPECT_TRUE(fs::exists(blocks_dir + "/notes.txt"));  // not ours: left alone
}

TEST_F(KvStoreCoreTest, AnL3DirectoryThatCannotBeCreatedIsAClearErrorAtStart) {
  const std::string file = dir_ + "/a-file";
  std::ofstream(file) << "x";
  options_.l3_dir = file + "/l3";
  registry_ = std::make_unique<common::metrics::Registry>();
  absl::StatusOr<std::unique_ptr<KvStoreCore>> core =
      KvStoreCore::Create(options_, *registry_, clock_);
  ASSERT_FALSE(core.ok());
  EXPECT_THAT(core.status().message(), ::testing::HasSubstr(file));
}

TEST_F(KvStoreCoreTest, L3EvictsTheLeastRecentlyUsedOverItsBudget) {
  options_.compression = CompressionMode::kNone;
  options_.l3_bytes = 4 * (kBlockBytes + 152);
  Open();
  ASSERT_OK(core_->Put(Blocks(Chain(6))).status());
  core_->FlushL3();
  const StoreStats s = core_->Stats();
  EXPECT_EQ(s.tiers[1].blocks_used, 4);
  EXPECT_EQ(Metric("moe_kv_evictions_total", {{"tier", "l3"}, {"reason", "lru"}}), 2);
  EXPECT_FALSE(fs::exists(core_->L3PathForTesting(H(0))));
  EXPECT_TRUE(fs::exists(core_->L3PathForTesting(H(5))));
}

TEST_F(KvStoreCoreTest, ThresholdPolicySweepsColdBlocksAndKeepsHotOnes) {
  options_.eviction_policy = kv::EvictionPolicyKind::kThreshold;
  options_.l3_dir = "";  // L2 only: a swept block is gone
  Open();
  const auto hot = Chain(2, 0);
  const auto cold = Chain(2, 10);
  ASSERT_OK(core_->Put(Blocks(hot)).status());
  ASSERT_OK(core_->Put(Blocks(cold)).status());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(core_->Lookup(hot).num_cached_blocks, 2);
  clock_.Advance(absl::Hours(3));
  EXPECT_EQ(core_->Lookup(hot).num_cached_blocks, 2);  // the sweep runs; hot was hit recently
  EXPECT_EQ(core_->Lookup(cold).num_cached_blocks, 0);
  EXPECT_EQ(Metric("moe_kv_evictions_total", {{"tier", "l2"}, {"reason", "threshold"}}), 2);
}

TEST_F(KvStoreCoreTest, FidelityMismatchIsFailedPrecondition) {
  Open();
  EXPECT_OK(core_->CheckFidelity(Fidelity::kExact));
  EXPECT_THAT(core_->CheckFidelity(Fidelity::kInt8),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  options_.compression = CompressionMode::kInt8;
  Open();
  EXPECT_EQ(core_->fidelity(), Fidelity::kInt8);
  EXPECT_THAT(core_->CheckFidelity(Fidelity::kExact),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(KvStoreCoreTest, Int8ModeServesDequantizedBlocksWithTheirOwnChecksum) {
  options_.compression = CompressionMode::kInt8;
  Open();
  const auto chain = Chain(1);
  ASSERT_OK(core_->Put(Blocks(chain)).status());
  for (int pass = 0; pass < 2; ++pass) {  // from L2, then from L3 after a restart
    const std::vector<GotBlock> got = core_->Get(chain, false);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].checksum, XXH3_64bits(got[0].data.view().data(), got[0].data.size));
    const PutBlock b = Block(chain[0], chain[0].hi);
    const float* x = reinterpret_cast<const float*>(b.data.data());
    const float* y = reinterpret_cast<const float*>(got[0].data.view().data());
    for (int64_t i = 0; i < kBlockBytes / 4; ++i) ASSERT_NEAR(x[i], y[i], 0.6f / 127) << i;
    Open();
  }
}

TEST_F(KvStoreCoreTest, ResponsesRoundTripSurviveRestartsAndCorruptionIsAMiss) {
  Open();
  const kv::BlockHash key = H(77);
  EXPECT_EQ(core_->GetResponse(key), std::nullopt);
  EXPECT_TRUE(core_->PutResponse(key, "serialized response"));
  EXPECT_EQ(core_->GetResponse(key), "serialized response");
  Open();
  EXPECT_EQ(core_->GetResponse(key), "serialized response");
  EXPECT_EQ(Metric("moe_response_cache_hits_total"), 1);
  const std::string path = core_->ResponsePathForTesting(key);
  std::fstream(path, std::ios::in | std::ios::out | std::ios::binary)
      .seekp(-1, std::ios::end)
      .put('X');
  EXPECT_EQ(core_->GetResponse(key), std::nullopt);
  EXPECT_EQ(Metric("moe_kv_corrupt_blocks_total"), 1);
  EXPECT_EQ(core_->Stats().response_entries, 0);
}

TEST_F(KvStoreCoreTest, ResponsesNeedAnL3Directory) {
  options_.l3_dir = "";
  Open();
  EXPECT_FALSE(core_->PutResponse(H(1), "x"));
  EXPECT_EQ(core_->GetResponse(H(1)), std::nullopt);
}

TEST_F(KvStoreCoreTest, UsageAndByteMetrics) {
  options_.compression = CompressionMode::kNone;
  Open();
  ASSERT_OK(core_->Put(Blocks(Chain(2))).status());
  core_->FlushL3();
  core_->Get(Chain(2), false);
  EXPECT_EQ(Metric("moe_kv_store_bytes_total", {{"tier", "l2"}, {"op", "put"}}), 2 * kBlockBytes);
  EXPECT_EQ(Metric("moe_kv_store_bytes_total", {{"tier", "l2"}, {"op", "get"}}), 2 * kBlockBytes);
  EXPECT_EQ(Metric("moe_kv_store_bytes_total", {{"tier", "l3"}, {"op", "put"}}),
            2 * (kBlockBytes + 152));
  EXPECT_NEAR(Metric("moe_kv_usage_ratio", {{"tier", "l2"}}),
              2.0 * (kBlockBytes + 256) / (64 << 10), 1e-9);
  EXPECT_EQ(Metric("moe_kv_store_op_seconds", {{"tier", "l3"}, {"op", "put"}}), 2);
}

}  // namespace
}  // namespace moe::kv_store
