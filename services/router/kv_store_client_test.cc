// Routers over the real engine (tiny preset) sharing an in-process kv-store over gRPC on
// loopback: greedy tokens with the kv-store equal those without it when router B serves a prefix
// router A computed, after a kv-store restart (L3), after a byte of an L3 file is corrupted, and
// while the kv-store is down; Gets stay under 4 MiB; the response cache answers a repeat; mTLS.
#include "services/router/kv_store_client.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/testing/test_pki.h"
#include "common/metrics/registry.h"
#include "common/model/make_model.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/kv-store/core/kv_store_core.h"
#include "services/kv-store/kv_store_server.h"
#include "services/router/core/router_core.h"

namespace moe::router {
namespace {

using ::moe::generation::FinishReason;
using ::testing::ElementsAreArray;

struct Result {
  std::vector<int32_t> tokens;
  generation::Usage usage;
  FinishReason finish_reason = FinishReason::kNone;
};

// A kv-store process stand-in: core + gRPC server on a fixed port, restartable over its dir.
class Store {
 public:
  Store(std::string dir, int port) : dir_(std::move(dir)), port_(port) {}
  ~Store() { Stop(); }
  void Start(kv_store::CompressionMode compression = kv_store::CompressionMode::kZstd) {
    registry_ = std::make_unique<common::metrics::Registry>();
    kv_store::KvStoreCoreOptions o;
    o.l3_dir = dir_;
    o.compression = compression;
    auto core = kv_store::KvStoreCore::Create(o, *registry_, common::SystemClock::Get());
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    service_ = std::make_unique<kv_store::KvStoreServer>(*core_);
    common::rpc::ServerOptions so;
    so.host = "127.0.0.1";
    so.port = port_;
    so.tls = tls;
    runner_ = std::make_unique<common::rpc::ServerRunner>(so);
    runner_->AddService(service_.get());
    ASSERT_OK(runner_->Start());
    runner_->SetServing(true);
    port_ = runner_->port();
  }
  void Stop() {
    if (runner_ == nullptr) return;
    runner_->Shutdown(absl::Now());
    runner_.reset();
    service_.reset();
    core_.reset();  // finishes L3 writes
  }
  kv_store::KvStoreCore& core() { return *core_; }
  double Metric(const std::string& name, const common::metrics::Labels& labels = {}) {
    return registry_->Value(name, labels).value_or(-1);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  common::rpc::ServerTlsOptions tls;  // the kv-store's grpc.tls (read by Start)

 private:
  const std::string dir_;
  int port_;
  std::unique_ptr<common::metrics::Registry> registry_;
  std::unique_ptr<kv_store::KvStoreCore> core_;
  std::unique_ptr<kv_store::KvStoreServer> service_;
  std::unique_ptr<common::rpc::ServerRunner> runner_;
};

// One router: RouterCore over the tiny preset (embedded experts), with or without a kv-store.
class Router {
 public:
  Router(const std::string& model_dir, const std::string* kv_address, bool response_cache = false,
         bool lossy = false, const common::rpc::ChannelOptions& channel = {}) {
    RouterCoreOptions o;
    o.model_dir = model_dir;
    o.num_threads = 1;
    o.kv_num_blocks = 512;
    // These prompts prefill in well under kv_fetch_min_saving: fetch every miss, as they test.
    o.scheduler.kv_fetch_min_saving = absl::ZeroDuration();
    if (kv_address != nullptr) {
      KvStoreClientOptions k;
      k.targets = {*kv_address};
      k.fetch_timeout = absl::Seconds(5);  // the machine is shared; the deadline is tested apart
      k.response_cache = response_cache;
      k.lossy_int8 = lossy;
      k.channel = channel;
      auto config = model::LoadModelConfig(model_dir);
      EXPECT_TRUE(config.ok());
      auto client = KvStoreClient::Create(k,
                                          {config->num_hidden_layers, 2, o.block_size,
                                           config->num_key_value_heads, config->head_dim},
                                          registry_, common::SystemClock::Get());
      EXPECT_TRUE(client.ok()) << client.status();
      client_ = std::move(*client);
    }
    auto core =
        RouterCore::Create(o, registry_, common::SystemClock::Get(), nullptr, client_.get());
    EXPECT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }
  Result Greedy(const std::vector<int32_t>& prompt, int max_tokens) {
    GenerateRequest r;
    r.prompt_token_ids = prompt;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    auto sub = core_->scheduler().Submit(std::move(r));
    EXPECT_TRUE(sub.ok()) << sub.status();
    Result out;
    Scheduler& s = core_->scheduler();
    for (int i = 0; s.HasWork() && i < 100000; ++i) {
      // Nothing to step while a prefix is fetched (on a fetch thread): let it run.
      if (s.Step() == 0) absl::SleepFor(absl::Microseconds(200));
    }
    while (auto e = sub->stream->Next(absl::ZeroDuration())) {
      out.tokens.insert(out.tokens.end(), e->token_ids.begin(), e->token_ids.end());
      if (e->final()) {
        out.usage = e->usage;
        out.finish_reason = e->finish_reason;
      }
    }
    if (client_ != nullptr) client_->Flush(absl::Seconds(30));  // stores landed
    return out;
  }
  void FlushL1() { core_->scheduler().mutable_block_manager().ResetPrefixCache(); }
  const kv::BlockManager& blocks() { return core_->scheduler().block_manager(); }
  double Metric(const std::string& name, const common::metrics::Labels& labels = {}) {
    return registry_.Value(name, labels).value_or(-1);
  }

 private:
  common::metrics::Registry registry_;
  std::unique_ptr<KvStoreClient> client_;
  std::unique_ptr<RouterCore> core_;
};

std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> out(n);
  for (int i = 0; i < n; ++i) out[i] = 3 + (seed * 977 + i * 131 + (i * i) % 11) % 500;
  return out;
}

class KvStoreClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(common::testing::MakeTempDir("kv_client_model") + "/tiny");
    ASSERT_OK(model::MakeModel(model::MakeModelOptions{}, *model_dir_));
  }
  void SetUp() override {
    store_ = std::make_unique<Store>(common::testing::MakeTempDir("kv_client_store"), 0);
    store_->Start();
    address_ = store_->address();
  }
  // What a router without a kv-store produces (the oracle).
  Result Reference(const std::vector<int32_t>& prompt, int n) {
    Router plain(*model_dir_, nullptr);
    return plain.Greedy(prompt, n);
  }

  static std::string* model_dir_;
  std::unique_ptr<Store> store_;
  std::string address_;
};
std::string* KvStoreClientTest::model_dir_ = nullptr;

TEST_F(KvStoreClientTest, RouterBServesRouterAsPrefixWithTheSameGreedyTokens) {
  const std::vector<int32_t> prompt = Prompt(200, 1);  // 12 eligible blocks of 16
  const Result want = Reference(prompt, 12);
  Router a(*model_dir_, &address_), b(*model_dir_, &address_);
  const Result ra = a.Greedy(prompt, 12);
  EXPECT_THAT(ra.tokens, ElementsAreArray(want.tokens));
  EXPECT_EQ(ra.usage.cached_prompt_tokens, 0);
  const Result rb = b.Greedy(prompt, 12);
  EXPECT_THAT(rb.tokens, ElementsAreArray(want.tokens));
  EXPECT_EQ(rb.usage.cached_prompt_tokens, 12 * 16);
  EXPECT_EQ(b.Metric("moe_prefix_cache_hits_total", {{"tier", "l2"}}), 12);
  // The gateway's view: the router's published namespace hashes the prompt to the blocks the
  // store holds (affinity keys agree with the routers' and the kv-store's identity).
  const std::vector<kv::BlockHash> chain = b.blocks().ChainHashes(prompt);
  EXPECT_EQ(store_->core().Lookup(chain).num_cached_blocks, static_cast<int32_t>(chain.size()));
}

// The write-behind yields to requests: nothing is sent while the engine is busy, blocks go out
// once it has been idle for put_idle_delay, or put_max_delay after queueing; Flush sends at once.
TEST_F(KvStoreClientTest, PutsWaitForAnIdleEngineUpToTheirMaxDelayAndFlushSendsAtOnce) {
  common::metrics::Registry registry;
  const std::vector<int64_t> dims = {1, 2, 2, 1, 4};  // 64-byte blocks
  auto make = [&](absl::Duration idle, absl::Duration max) {
    KvStoreClientOptions k;
    k.targets = {address_};
    k.put_idle_delay = idle;
    k.put_max_delay = max;
    auto c = KvStoreClient::Create(k, dims, registry, common::SystemClock::Get());
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  };
  auto chain = [](uint64_t base) {
    std::vector<kv::BlockHash> out;
    for (uint64_t i = 0; i < 3; ++i) out.push_back({base + i, 7});
    return out;
  };
  auto store = [](KvStoreClient& c, const std::vector<kv::BlockHash>& hashes) {
    EXPECT_EQ(c.Store(hashes[0], hashes,
                      [](size_t i, std::span<uint8_t> dst) {
                        std::fill(dst.begin(), dst.end(), static_cast<uint8_t>(i));
                      }),
              3);
  };
  auto stored = [&](const std::vector<kv::BlockHash>& hashes) {
    return store_->core().Lookup(hashes).num_cached_blocks;
  };
  auto arrives = [&](const std::vector<kv::BlockHash>& hashes) {
    for (int i = 0; i < 1000 && stored(hashes) < 3; ++i) absl::SleepFor(absl::Milliseconds(10));
    return stored(hashes) == 3;
  };

  // Busy: held (the max delay is far off) until the engine is idle for the idle delay.
  std::unique_ptr<KvStoreClient> a = make(absl::Milliseconds(100), absl::Minutes(10));
  a->SetEngineBusy(true);
  const auto first = chain(100);
  store(*a, first);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(stored(first), 0);
  a->SetEngineBusy(false);
  EXPECT_TRUE(arrives(first));

  // Busy for good: sent at the max delay.
  std::unique_ptr<KvStoreClient> b = make(absl::Minutes(1), absl::Milliseconds(200));
  b->SetEngineBusy(true);
  const auto second = chain(200);
  store(*b, second);
  EXPECT_TRUE(arrives(second));

  // Flush does not wait for the engine.
  std::unique_ptr<KvStoreClient> c = make(absl::Minutes(1), absl::Minutes(10));
  c->SetEngineBusy(true);
  const auto third = chain(300);
  store(*c, third);
  EXPECT_TRUE(c->Flush(absl::Seconds(10)));
  EXPECT_EQ(stored(third), 3);
}

TEST_F(KvStoreClientTest, AfterAKvStoreRestartL3HitsAreServed) {
  const std::vector<int32_t> prompt = Prompt(150, 2);
  const Result want = Reference(prompt, 8);
  {
    Router a(*model_dir_, &address_);
    a.Greedy(prompt, 8);
  }
  store_->Stop();
  store_->Start();  // same port and dir: L2 is empty, L3 has the blocks
  Router b(*model_dir_, &address_);
  const Result rb = b.Greedy(prompt, 8);
  EXPECT_THAT(rb.tokens, ElementsAreArray(want.tokens));
  EXPECT_EQ(rb.usage.cached_prompt_tokens, 9 * 16);
  EXPECT_EQ(b.Metric("moe_prefix_cache_hits_total", {{"tier", "l3"}}), 9);
  EXPECT_EQ(store_->Metric("moe_prefix_cache_hits_total", {{"tier", "l3"}}), 9);
}

TEST_F(KvStoreClientTest, ACorruptByteInAnL3BlockIsDetectedDiscardedAndRecomputed) {
  store_->Stop();
  store_->Start(kv_store::CompressionMode::kNone);
  const std::vector<int32_t> prompt = Prompt(120, 3);  // 7 eligible blocks
  const Result want = Reference(prompt, 8);
  {
    Router a(*model_dir_, &address_);
    a.Greedy(prompt, 8);
  }
  Router probe(*model_dir_, nullptr);
  const std::vector<kv::BlockHash> chain = probe.blocks().ChainHashes(prompt);
  const std::string path = store_->core().L3PathForTesting(chain[3]);
  store_->Stop();
  {
    const int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << path;
    char c;
    ASSERT_EQ(pread(fd, &c, 1, 4000), 1);
    c ^= 0x10;
    ASSERT_EQ(pwrite(fd, &c, 1, 4000), 1);
    close(fd);
  }
  store_->Start(kv_store::CompressionMode::kNone);
  Router b(*model_dir_, &address_);
  const Result rb = b.Greedy(prompt, 8);
  EXPECT_THAT(rb.tokens, ElementsAreArray(want.tokens));
  EXPECT_EQ(rb.usage.cached_prompt_tokens, 3 * 16);  // blocks 0-2; 3 was dropped
  EXPECT_EQ(store_->Metric("moe_kv_corrupt_blocks_total"), 1);
  // B recomputed block 3 and stored it again: the store serves an intact copy now.
  const std::vector<kv::BlockHash> one = {chain[3]};
  EXPECT_EQ(store_->core().Get(one, false).size(), 1u);
  EXPECT_EQ(store_->Metric("moe_kv_corrupt_blocks_total"), 1);
}

TEST_F(KvStoreClientTest, ADeadKvStoreMeansMissesAndHitsResumeWhenItIsBack) {
  const std::vector<int32_t> prompt = Prompt(100, 4);
  const Result want = Reference(prompt, 6);
  Router a(*model_dir_, &address_);
  store_->Stop();
  const Result down = a.Greedy(prompt, 6);
  EXPECT_EQ(down.finish_reason, FinishReason::kLength);
  EXPECT_THAT(down.tokens, ElementsAreArray(want.tokens));
  store_->Start();
  a.FlushL1();
  // The channel reconnects on its own; the first lookups may still find it down: no failure.
  Result up = a.Greedy(prompt, 6);
  EXPECT_THAT(up.tokens, ElementsAreArray(want.tokens));
  // Bounded by gRPC's reconnect backoff (100 ms, growing; the store was down briefly).
  for (const absl::Time end = absl::Now() + absl::Seconds(30);
       up.usage.cached_prompt_tokens == 0 && absl::Now() < end;) {
    a.FlushL1();
    up = a.Greedy(prompt, 6);  // stores and then hits, once connected
  }
  EXPECT_EQ(up.usage.cached_prompt_tokens, 6 * 16);
  EXPECT_THAT(up.tokens, ElementsAreArray(want.tokens));
}

TEST_F(KvStoreClientTest, ALossyRouterRefusesAnExactStore) {
  const std::vector<int32_t> prompt = Prompt(80, 5);
  Router exact(*model_dir_, &address_);
  exact.Greedy(prompt, 4);
  Router lossy(*model_dir_, &address_, false, /*lossy=*/true);
  const Result r = lossy.Greedy(prompt, 4);
  EXPECT_EQ(r.usage.cached_prompt_tokens, 0);  // another identity, and the store refused anyway
  EXPECT_GE(lossy.Metric("moe_kv_store_client_rpc_errors_total", {{"rpc", "Lookup"}}), 1);
}

TEST_F(KvStoreClientTest, TheResponseCacheAnswersARepeatOverGrpc) {
  const std::vector<int32_t> prompt = Prompt(40, 6);
  Router a(*model_dir_, &address_, /*response_cache=*/true);
  const Result first = a.Greedy(prompt, 9);
  const Result second = a.Greedy(prompt, 9);
  EXPECT_FALSE(first.usage.from_response_cache);
  EXPECT_TRUE(second.usage.from_response_cache);
  EXPECT_THAT(second.tokens, ElementsAreArray(first.tokens));
  EXPECT_EQ(second.usage.completion_tokens, 9);
  EXPECT_EQ(store_->Metric("moe_response_cache_hits_total"), 1);
}

// mTLS (the kv-store's grpc.tls, the routers' kv_store.channel.tls): routers holding a client
// certificate signed by the store's client CA share their prefixes; a router without one (or in
// plaintext) fails the handshake and sees misses only: the same tokens, never a failed request.
TEST_F(KvStoreClientTest, OverMutualTlsCertifiedRoutersShareAndOthersOnlyMiss) {
  // A CA made now (common/grpc/testing/test_pki.h): the store's certificate for localhost, the
  // routers' client certificate.
  common::rpc::testing::TestPki pki(common::testing::MakeTempDir("kv_client_pki"));
  const common::rpc::testing::CertFiles ca = pki.Ca("cluster");
  const common::rpc::testing::CertFiles server = pki.Issue(ca, "kv-store", {"DNS:localhost"});
  const common::rpc::testing::CertFiles client =
      pki.Issue(ca, "router", {"URI:spiffe://moe.test/router"});
  store_->Stop();
  store_->tls = {.cert_file = server.cert_file,
                 .key_file = server.key_file,
                 .client_ca_file = ca.cert_file,
                 .require_client_cert = true};
  store_->Start();
  auto tls = [&](bool with_cert) {
    common::rpc::ChannelOptions c;
    c.tls = {.enabled = true,
             .ca_file = ca.cert_file,
             .cert_file = with_cert ? client.cert_file : "",
             .key_file = with_cert ? client.key_file : "",
             .server_name_override = "localhost"};
    return c;
  };
  const std::vector<int32_t> prompt = Prompt(100, 7);  // 6 eligible blocks
  const Result want = Reference(prompt, 6);
  Router a(*model_dir_, &address_, false, false, tls(true));
  EXPECT_THAT(a.Greedy(prompt, 6).tokens, ElementsAreArray(want.tokens));
  Router b(*model_dir_, &address_, false, false, tls(true));
  const Result rb = b.Greedy(prompt, 6);
  EXPECT_THAT(rb.tokens, ElementsAreArray(want.tokens));
  EXPECT_EQ(rb.usage.cached_prompt_tokens, 6 * 16);
  Router no_cert(*model_dir_, &address_, false, false, tls(false));
  Router plaintext(*model_dir_, &address_);
  for (Router* r : {&no_cert, &plaintext}) {
    const Result out = r->Greedy(prompt, 6);
    EXPECT_EQ(out.finish_reason, FinishReason::kLength);
    EXPECT_THAT(out.tokens, ElementsAreArray(want.tokens));
    EXPECT_EQ(out.usage.cached_prompt_tokens, 0);
  }
  EXPECT_EQ(store_->Metric("moe_prefix_cache_hits_total", {{"tier", "l2"}}), 6);
}

}  // namespace
}  // namespace moe::router
