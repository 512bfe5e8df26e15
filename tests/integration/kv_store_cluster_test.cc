// The kv-store end to end: a kv-store process and router processes on loopback (tiny preset),
// against a router without a kv-store as the oracle. Greedy tokens with the kv-store equal those
// without it when router B serves a prefix router A computed, after a kv-store restart (L3
// hits), after one byte of an L3 block on disk is corrupted (detected, discarded, recomputed);
// a kill -9 of the kv-store while 32 streams run fails none of them, and hits resume once it is
// back. Block paths are derived from the namespace routers publish in GetStats, as the gateway
// hashes prompts: so the test also checks that identity end to end.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc/channel_factory.h"
#include "common/kv/block_hash.h"
#include "common/model/make_model.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "moe/kv_store/v1/kv_store.grpc.pb.h"
#include "tests/integration/experts_cluster.h"

namespace moe::testing {
namespace {

namespace rpb = ::moe::router::v1;
namespace kpb = ::moe::kv_store::v1;
using ::testing::ElementsAreArray;

constexpr int kVocab = 512;
constexpr int kBlock = 16;

struct Result {
  std::vector<int32_t> tokens;
  rpb::FinishReason finish_reason = rpb::FINISH_REASON_UNSPECIFIED;
  int cached = 0;
  std::string rpc_error;
};

Result GenerateWithUsage(rpb::Router::Stub& stub, const std::vector<int32_t>& prompt,
                         int max_tokens, const std::function<void()>& on_token = nullptr) {
  rpb::GenerateRequest req;
  for (int32_t t : prompt) req.add_prompt_token_ids(t);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
  auto reader = stub.Generate(&ctx, req);
  Result r;
  rpb::GenerateResponse resp;
  while (reader->Read(&resp)) {
    r.tokens.insert(r.tokens.end(), resp.token_ids().begin(), resp.token_ids().end());
    if (resp.finish_reason() != rpb::FINISH_REASON_UNSPECIFIED) {
      r.finish_reason = resp.finish_reason();
      r.cached = resp.usage().cached_prompt_tokens();
    }
    if (on_token) on_token();
  }
  const grpc::Status s = reader->Finish();
  if (!s.ok()) r.rpc_error = s.error_message();
  return r;
}

class KvStoreClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(common::testing::MakeTempDir("kv_store_cluster"));
    ASSERT_OK(model::MakeModel(model::MakeModelOptions{}, *dir_ + "/tiny"));
    auto oracle = StartRouter(false, "oracle");
    ASSERT_TRUE(oracle.ok()) << oracle.status();
    oracle_ = new Proc(std::move(*oracle));
  }
  static void TearDownTestSuite() {
    delete oracle_;
    oracle_ = nullptr;
  }
  void SetUp() override {
    static int n = 0;
    l3_dir_ = absl::StrCat(*dir_, "/l3-", ++n);
    store_port_ = common::testing::PickFreePort();
    ASSERT_OK(StartStore());
  }

  absl::Status StartStore(const std::string& compression = "zstd") {
    static int n = 0;
    auto p =
        LaunchService({BinPath("kv-store"), "--set", "core.l3_dir=" + l3_dir_, "--set",
                       "core.compression=" + compression, "--set", "grpc.host=127.0.0.1", "--set",
                       absl::StrCat("grpc.port=", store_port_), "--set", "metrics.host=127.0.0.1",
                       "--set", "metrics.port=0", "--set", "grpc.drain_timeout=1s"},
                      absl::StrCat(*dir_, "/kv-store-", ++n, ".log"));
    if (!p.ok()) return p.status();
    store_ = std::make_unique<Proc>(std::move(*p));
    store_stub_ = kpb::KvStore::NewStub(*common::rpc::CreateChannel(store_->address()));
    return absl::OkStatus();
  }
  // SIGTERM: drains and writes what is queued for L3.
  void StopStore() {
    store_->child->Signal(SIGTERM);
    ASSERT_TRUE(store_->child->Wait(absl::Seconds(30)).ok());
    store_.reset();
  }

  static absl::StatusOr<Proc> StartRouter(bool with_store, const std::string& name,
                                          int store_port = 0) {
    const std::string config = absl::StrCat(*dir_, "/", name, ".yaml");
    std::ofstream f(config);
    // The tiny model prefills these prompts in under kv_fetch_min_saving: fetch every miss.
    f << "core:\n  model_dir: \"" << *dir_ << "/tiny\"\n  model_name: tiny\n  num_threads: 1\n"
      << "  scheduler: {kv_fetch_min_saving: 0s}\n"
      << "grpc:\n  host: 127.0.0.1\n  port: 0\n  drain_timeout: 1s\n"
      << "metrics:\n  host: 127.0.0.1\n  port: 0\n";
    if (with_store) {
      // A generous deadline: this machine is shared; the deadline itself is unit-tested.
      f << "kv_store:\n  targets: [\"127.0.0.1:" << store_port << "\"]\n  fetch_timeout: 3s\n"
        << "  channel: {initial_reconnect_backoff: 50ms, max_reconnect_backoff: 500ms}\n";
    }
    f.close();
    return LaunchService({BinPath("router"), "--config", config},
                         absl::StrCat(*dir_, "/", name, ".log"));
  }
  absl::StatusOr<Proc> Router(const std::string& name) {
    static int n = 0;
    return StartRouter(true, absl::StrCat(name, ++n), store_port_);
  }

  std::vector<int32_t> Oracle(const std::vector<int32_t>& prompt, int n) {
    return GenerateWithUsage(*RouterStub(oracle_->address()), prompt, n).tokens;
  }

  // The chain of `prompt` under the namespace `router` publishes (what the gateway hashes).
  std::vector<kv::BlockHash> Chain(const Proc& router, const std::vector<int32_t>& prompt) {
    grpc::ClientContext ctx;
    rpb::GetStatsResponse stats;
    EXPECT_TRUE(RouterStub(router.address())->GetStats(&ctx, {}, &stats).ok());
    const rpb::KvNamespace& ns = stats.kv_namespace();
    EXPECT_EQ(ns.checkpoint_fingerprint().size(), 32u);
    kv::BlockHashRootKey key{ns.model_id(), ns.block_size(), common::DType::kF32, ""};
    key.checkpoint_fingerprint = ns.checkpoint_fingerprint();
    key.numerics = ns.numerics();
    return kv::HashFullBlocks(kv::RootHash(key), prompt, ns.block_size());
  }
  // Polls the kv-store until the first `n` blocks of `chain` are there (the router stores
  // asynchronously); false after `timeout`.
  bool StoreHas(const std::vector<kv::BlockHash>& chain, int n,
                absl::Duration timeout = absl::Seconds(30)) {
    kpb::LookupRequest req;
    for (int i = 0; i < n; ++i) {
      const auto b = chain[i].CanonicalBytes();
      req.add_hashes(std::string(reinterpret_cast<const char*>(b.data()), 16));
    }
    for (const absl::Time end = absl::Now() + timeout; absl::Now() < end;) {
      grpc::ClientContext ctx;
      kpb::LookupResponse resp;
      if (store_stub_->Lookup(&ctx, req, &resp).ok() && resp.num_cached_blocks() == n) return true;
    }
    return false;
  }
  std::string BlockPath(const kv::BlockHash& h) const {
    const std::string hex = h.ToHex();
    return absl::StrCat(l3_dir_, "/blocks/", hex.substr(0, 2), "/", hex, ".blk");
  }

  static std::string* dir_;
  static Proc* oracle_;
  std::string l3_dir_;
  int store_port_ = 0;
  std::unique_ptr<Proc> store_;
  std::unique_ptr<kpb::KvStore::Stub> store_stub_;
};
std::string* KvStoreClusterTest::dir_ = nullptr;
Proc* KvStoreClusterTest::oracle_ = nullptr;

TEST_F(KvStoreClusterTest, RouterBServesRouterAsPrefixWithTheOraclesTokens) {
  ASSERT_OK_AND_ASSIGN(Proc a, Router("a"));
  ASSERT_OK_AND_ASSIGN(Proc b, Router("b"));
  const std::vector<int32_t> prompt = MakePrompts(1, 200, kVocab, 1)[0];  // 12 eligible blocks
  const std::vector<int32_t> want = Oracle(prompt, 16);
  const Result ra = GenerateWithUsage(*RouterStub(a.address()), prompt, 16);
  EXPECT_THAT(ra.tokens, ElementsAreArray(want));
  EXPECT_EQ(ra.cached, 0);
  ASSERT_TRUE(StoreHas(Chain(b, prompt), 12));
  const Result rb = GenerateWithUsage(*RouterStub(b.address()), prompt, 16);
  EXPECT_THAT(rb.tokens, ElementsAreArray(want));
  EXPECT_EQ(rb.cached, 12 * kBlock);
}

TEST_F(KvStoreClusterTest, AfterAKvStoreRestartL3HitsKeepTheTokens) {
  const std::vector<int32_t> prompt = MakePrompts(1, 150, kVocab, 2)[0];
  const std::vector<int32_t> want = Oracle(prompt, 12);
  {
    ASSERT_OK_AND_ASSIGN(Proc a, Router("a"));
    GenerateWithUsage(*RouterStub(a.address()), prompt, 12);
    ASSERT_TRUE(StoreHas(Chain(a, prompt), 9));
  }
  StopStore();
  ASSERT_OK(StartStore());
  ASSERT_OK_AND_ASSIGN(Proc b, Router("b"));
  const Result rb = GenerateWithUsage(*RouterStub(b.address()), prompt, 12);
  EXPECT_THAT(rb.tokens, ElementsAreArray(want));
  EXPECT_EQ(rb.cached, 9 * kBlock);  // from L3: the restarted store's L2 was empty
  kpb::StatsResponse stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(store_stub_->Stats(&ctx, {}, &stats).ok());
  ASSERT_EQ(stats.tiers_size(), 2);
  EXPECT_EQ(stats.tiers(1).hits(), 9u);
}

TEST_F(KvStoreClusterTest, ACorruptByteOfAnL3BlockIsDiscardedAndRecomputed) {
  StopStore();
  ASSERT_OK(StartStore("none"));
  const std::vector<int32_t> prompt = MakePrompts(1, 120, kVocab, 3)[0];  // 7 eligible blocks
  const std::vector<int32_t> want = Oracle(prompt, 10);
  std::vector<kv::BlockHash> chain;
  {
    ASSERT_OK_AND_ASSIGN(Proc a, Router("a"));
    chain = Chain(a, prompt);
    GenerateWithUsage(*RouterStub(a.address()), prompt, 10);
    ASSERT_TRUE(StoreHas(chain, 7));
  }
  StopStore();
  const std::string path = BlockPath(chain[2]);
  {
    const int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << path;  // where the published namespace says the block is
    char c;
    ASSERT_EQ(pread(fd, &c, 1, 3000), 1);
    c ^= 0x01;
    ASSERT_EQ(pwrite(fd, &c, 1, 3000), 1);
    close(fd);
  }
  ASSERT_OK(StartStore("none"));
  ASSERT_OK_AND_ASSIGN(Proc b, Router("b"));
  const Result rb = GenerateWithUsage(*RouterStub(b.address()), prompt, 10);
  EXPECT_THAT(rb.tokens, ElementsAreArray(want));
  EXPECT_EQ(rb.cached, 2 * kBlock);  // blocks 0 and 1; 2 was dropped, the rest recomputed
  kpb::StatsResponse stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(store_stub_->Stats(&ctx, {}, &stats).ok());
  EXPECT_EQ(stats.corrupt_blocks_dropped(), 1u);
}

TEST_F(KvStoreClusterTest, KillNineOfTheKvStoreUnder32StreamsFailsNoneAndHitsResume) {
  ASSERT_OK_AND_ASSIGN(Proc a, Router("a"));
  ASSERT_OK_AND_ASSIGN(Proc b, Router("b"));
  const auto prompts = MakePrompts(32, 70, kVocab, 4);
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(Oracle(p, 24));

  std::atomic<int> tokens{0};
  std::atomic<bool> killed{false};
  std::vector<Result> results(32);
  std::vector<std::thread> threads;
  auto stub_a = RouterStub(a.address());
  auto stub_b = RouterStub(b.address());
  for (int i = 0; i < 32; ++i) {
    threads.emplace_back([&, i] {
      results[i] = GenerateWithUsage(i % 2 == 0 ? *stub_a : *stub_b, prompts[i], 24, [&] {
        // Mid-stream, with fetches and stores in flight: kill -9.
        if (++tokens == 200 && !killed.exchange(true)) store_->child->Signal(SIGKILL);
      });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(killed.load());
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(results[i].rpc_error, "") << i;
    EXPECT_EQ(results[i].finish_reason, rpb::FINISH_REASON_LENGTH) << i;
    EXPECT_THAT(results[i].tokens, ElementsAreArray(want[i])) << i;
  }
  // Back on the same port and directory: what reached L3 before the kill is intact or gone,
  // never wrong; new prefixes are shared again once the routers have reconnected.
  ASSERT_TRUE(store_->child->Wait(absl::Seconds(10)).ok());
  ASSERT_OK(StartStore());
  bool resumed = false;
  for (int round = 0; round < 100 && !resumed; ++round) {
    const std::vector<int32_t> q = MakePrompts(1, 60, kVocab, 1000 + round)[0];
    const std::vector<int32_t> qwant = Oracle(q, 4);
    EXPECT_THAT(GenerateWithUsage(*stub_a, q, 4).tokens, ElementsAreArray(qwant));
    // A not reconnected yet: its stores were dropped; the next round tries a new prompt.
    if (!StoreHas(Chain(a, q), 3, absl::Seconds(3))) continue;
    const Result rb = GenerateWithUsage(*stub_b, q, 4);
    EXPECT_THAT(rb.tokens, ElementsAreArray(qwant));
    resumed = rb.cached == 3 * kBlock;
  }
  EXPECT_TRUE(resumed);
  // Blocks of the 32 streams that reached L3 before the kill serve again, with the same tokens.
  const Result again = GenerateWithUsage(*stub_b, prompts[0], 24);
  EXPECT_THAT(again.tokens, ElementsAreArray(want[0]));
}

}  // namespace
}  // namespace moe::testing
