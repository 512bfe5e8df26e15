// `moe bench kv-store` (DESIGN.md §6): the kv-store's tiers as a router uses them, over gRPC on
// loopback (the kv-store core and server in this process, the router's core and KvStoreClient
// beside them), on the given preset (default bench; --preset small for the small one):
//   ttft_warm_over_cold_l2   TTFT of a 2k prompt whose 2k prefix comes from L2 with L1 flushed,
//                            + 32 new tokens, over the same-length prompt cold; goal <= 0.2
//   ttft_warm_over_cold_l3   the same after a kv-store restart (L2 empty), with the L3 files'
//                            page cache dropped (posix_fadvise DONTNEED); goal <= 0.3
//                            (params: fetch_s, the whole prefix's Fetch from L2 / a cold L3 with
//                            no deadline, beside the router's fetch_timeout_ms)
//   kv_store_put_gb_s        blocks through KvStoreClient::Store to the store (acknowledged), over
//                            memcpy of the same bytes
//   kv_store_get_gb_s        blocks fetched into a buffer by KvStoreClient::Fetch, over memcpy
//   kv_store_l3_write_gb_s   L3 file writes + syncfs, over a raw sequential write + fdatasync of
//                            the same bytes in the same directory
//   l3_backend_write_mb_s / l3_backend_read_mb_s / l3_backend_reopen_s   checksummed files vs
//                            RocksDB (WAL on, then flushed) for the same blocks (the L3 choice)
//   kv_compression_ratio     stored / raw bytes per mode (shuffle+zstd, plain zstd, int8) on
//                            random and real K/V (from this run's prefills); MB/s in params
// The compared configurations alternate within one run (3 repeats, medians and ranges).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/common/suite.h"
#include "bench/engine/engine_bench.h"
#include "common/base/clock.h"
#include "common/base/status_macros.h"
#include "common/grpc/server_runner.h"
#include "common/metrics/registry.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "services/kv-store/core/file_store.h"
#include "services/kv-store/core/kv_codec.h"
#include "services/kv-store/core/kv_store_core.h"
#include "services/kv-store/kv_store_server.h"
#include "services/router/core/router_core.h"
#include "services/router/kv_store_client.h"

namespace moe::bench {
namespace {

namespace fs = std::filesystem;
using router::GenerateRequest;

BenchResult WithCommon(BenchResult r, const SuiteOptions& o, const std::string& model) {
  r.params["model"] = model;
  r.params["threads"] = o.threads;
  r.params["quick"] = o.quick;
  return r;
}

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> out(n);
  for (auto& t : out) t = static_cast<int32_t>(16 + rng() % (vocab - 16));
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
nlohmann::json Range(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v.back()};
}

// Drops the page cache of every file under `dir` (works for clean pages without root).
int64_t DropPageCache(const std::string& dir) {
  int64_t files = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const int fd = open(it->path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    fdatasync(fd);
    if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0) ++files;
    close(fd);
  }
  return files;
}

// The kv-store in this process: core + gRPC server on a fixed port, restartable over its dir.
class InProcessStore {
 public:
  InProcessStore(std::string dir, kv_store::CompressionMode compression)
      : dir_(std::move(dir)), compression_(compression) {}
  absl::Status Start() {
    registry_ = std::make_unique<common::metrics::Registry>();
    kv_store::KvStoreCoreOptions o;
    o.l3_dir = dir_;
    o.compression = compression_;
    o.l2_bytes = 4ll << 30;
    o.l3_bytes = 16ll << 30;
    o.l3_write_queue_bytes = 1ll << 30;
    ASSIGN_OR_RETURN(core_,
                     kv_store::KvStoreCore::Create(o, *registry_, common::SystemClock::Get()));
    service_ = std::make_unique<kv_store::KvStoreServer>(*core_);
    common::rpc::ServerOptions so;
    so.host = "127.0.0.1";
    so.port = port_;
    runner_ = std::make_unique<common::rpc::ServerRunner>(so);
    runner_->AddService(service_.get());
    RETURN_IF_ERROR(runner_->Start());
    runner_->SetServing(true);
    port_ = runner_->port();
    return absl::OkStatus();
  }
  void Stop() {
    if (runner_ == nullptr) return;
    runner_->Shutdown(absl::Now());
    runner_.reset();
    service_.reset();
    core_.reset();
  }
  ~InProcessStore() { Stop(); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  kv_store::KvStoreCore& core() { return *core_; }
  const std::string& dir() const { return dir_; }

 private:
  const std::string dir_;
  const kv_store::CompressionMode compression_;
  int port_ = 0;
  std::unique_ptr<common::metrics::Registry> registry_;
  std::unique_ptr<kv_store::KvStoreCore> core_;
  std::unique_ptr<kv_store::KvStoreServer> service_;
  std::unique_ptr<common::rpc::ServerRunner> runner_;
};

std::vector<int64_t> BlockDims(const std::string& model_dir, int block_size) {
  auto config = model::LoadModelConfig(model_dir);
  return {config->num_hidden_layers, 2, block_size, config->num_key_value_heads, config->head_dim};
}

// A router (core + kv-store client) driven step by step on this thread.
struct BenchRouter {
  common::metrics::Registry registry;
  std::unique_ptr<router::KvStoreClient> client;
  std::unique_ptr<router::RouterCore> core;
};

absl::StatusOr<std::unique_ptr<BenchRouter>> MakeRouter(const std::string& model_dir,
                                                        const SuiteOptions& o,
                                                        const std::string& store,
                                                        absl::Duration fetch_timeout) {
  auto r = std::make_unique<BenchRouter>();
  router::KvStoreClientOptions k;
  k.targets = {store};
  k.fetch_timeout = fetch_timeout;
  k.put_queue_bytes = 1ll << 30;
  ASSIGN_OR_RETURN(r->client,
                   router::KvStoreClient::Create(k, BlockDims(model_dir, 16), r->registry,
                                                 common::SystemClock::Get()));
  router::RouterCoreOptions c;
  c.model_dir = model_dir;
  c.num_threads = o.threads;
  c.kv_num_blocks = 1024;
  c.scheduler.max_batch_tokens = 2048;
  c.scheduler.chunked_prefill_size = 2048;
  ASSIGN_OR_RETURN(r->core, router::RouterCore::Create(c, r->registry, common::SystemClock::Get(),
                                                       nullptr, r->client.get()));
  return r;
}

// Submit-to-first-token wall time of one greedy request run alone, and its cached tokens.
absl::StatusOr<std::pair<double, int64_t>> Ttft(router::Scheduler& s, std::vector<int32_t> prompt) {
  GenerateRequest r;
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = 1;
  r.sampling.ignore_eos = true;
  const absl::Time t0 = absl::Now();
  ASSIGN_OR_RETURN(auto sub, s.Submit(std::move(r)));
  double ttft = -1;
  while (s.HasWork()) {
    // Nothing to step while the prefix is being fetched (off this thread): do not spin.
    if (s.Step() == 0) absl::SleepFor(absl::Microseconds(200));
    if (ttft < 0 && sub.stream->finished()) ttft = absl::ToDoubleSeconds(absl::Now() - t0);
  }
  int64_t cached = 0;
  while (auto e = sub.stream->Next(absl::ZeroDuration())) {
    if (e->final() && !e->status.ok()) return e->status;
    if (e->final()) cached = e->usage.cached_prompt_tokens;
  }
  return std::make_pair(ttft, cached);
}

// A block writer that copies into one buffer (what L1 would get), for the Get figure.
class BufferWriter final : public router::KvBlockWriter {
 public:
  BufferWriter(int64_t block_bytes, size_t blocks)
      : block_bytes_(block_bytes), buf_(block_bytes * blocks) {}
  void Write(size_t, size_t block, int64_t offset, std::span<const uint8_t> bytes) override {
    std::memcpy(buf_.data() + block * block_bytes_ + offset, bytes.data(), bytes.size());
  }

 private:
  const int64_t block_bytes_;
  std::vector<uint8_t> buf_;
};

// Wall time of one KvStoreClient::Fetch of `chain` (what a router's step waits for, without its
// deadline), after a probe that lets a restarted store's channel reconnect. -1 if incomplete.
double FetchSeconds(router::KvStoreClient& client, const std::vector<kv::BlockHash>& chain,
                    int64_t block_bytes, std::mt19937_64& rng) {
  class NoWrites final : public router::KvBlockWriter {
    void Write(size_t, size_t, int64_t, std::span<const uint8_t>) override {}
  } none;
  const kv::BlockHash probe{rng(), rng()};
  router::KvFetch p{.shard_key = probe, .hashes = std::span<const kv::BlockHash>(&probe, 1)};
  client.Fetch(std::span<router::KvFetch>(&p, 1), none, absl::Seconds(10));
  BufferWriter writer(block_bytes, chain.size());
  router::KvFetch f{.shard_key = chain[0], .hashes = chain};
  const absl::Time t0 = absl::Now();
  client.Fetch(std::span<router::KvFetch>(&f, 1), writer, absl::Seconds(10));
  const double s = absl::ToDoubleSeconds(absl::Now() - t0);
  return f.num_fetched == static_cast<int64_t>(chain.size()) ? s : -1;
}

// ttft_warm_over_cold_l2 / _l3. Also returns real K/V blocks (for the compression figures).
absl::Status WarmOverCold(const std::string& model_dir, const std::string& model,
                          const SuiteOptions& o, const std::string& work, BenchReport& report,
                          std::vector<std::string>* real_blocks) {
  const int64_t prefix = o.quick ? 512 : 2048;
  const absl::Duration fetch_timeout = router::KvStoreClientOptions{}.fetch_timeout;
  InProcessStore store(work + "/ttft-l3", kv_store::CompressionMode::kZstd);
  RETURN_IF_ERROR(store.Start());
  ASSIGN_OR_RETURN(auto r, MakeRouter(model_dir, o, store.address(), fetch_timeout));
  router::Scheduler& s = r->core->scheduler();
  const int64_t vocab = r->core->config().vocab_size;
  std::mt19937_64 rng(11);
  std::vector<double> cold, warm2, warm3, cached2, cached3, dropped, fetch2, fetch3;
  // The same fetches without a deadline (why a warm TTFT is what it is): a second client.
  common::metrics::Registry probe_registry;
  const std::vector<int64_t> dims = BlockDims(model_dir, 16);
  int64_t block_bytes = 4;
  for (int64_t d : dims) block_bytes *= d;
  router::KvStoreClientOptions pk;
  pk.targets = {store.address()};
  pk.fetch_timeout = absl::Seconds(10);  // the longest the options allow
  ASSIGN_OR_RETURN(auto probe_client, router::KvStoreClient::Create(pk, dims, probe_registry,
                                                                    common::SystemClock::Get()));
  for (int rep = 0; rep < 3; ++rep) {
    const std::vector<int32_t> doc = RandomTokens(rng, prefix, vocab);
    ASSIGN_OR_RETURN(auto c, Ttft(s, doc));  // stores its 128 blocks
    cold.push_back(c.first);
    if (!r->client->Flush(absl::Seconds(60))) return absl::DeadlineExceededError("puts");
    // L2: L1 flushed, the prefix from the kv-store's memory.
    s.mutable_block_manager().ResetPrefixCache();
    std::vector<int32_t> q = doc;
    for (int32_t t : RandomTokens(rng, 32, vocab)) q.push_back(t);
    ASSIGN_OR_RETURN(auto w2, Ttft(s, q));
    warm2.push_back(w2.first);
    cached2.push_back(static_cast<double>(w2.second));
    const std::vector<kv::BlockHash> chain = s.block_manager().ChainHashes(doc);
    fetch2.push_back(FetchSeconds(*probe_client, chain, block_bytes, rng));
    // L3: the kv-store restarted (L2 empty), the files' page cache dropped.
    if (!r->client->Flush(absl::Seconds(60))) return absl::DeadlineExceededError("puts");
    store.Stop();
    dropped.push_back(static_cast<double>(DropPageCache(store.dir())));
    RETURN_IF_ERROR(store.Start());
    s.mutable_block_manager().ResetPrefixCache();
    std::vector<int32_t> q3 = doc;
    for (int32_t t : RandomTokens(rng, 32, vocab)) q3.push_back(t);
    // The client's channel reconnects to the restarted store (a real router would have been
    // serving meanwhile): one probe fetch, a miss, so the measured one finds it connected.
    {
      class NoWrites final : public router::KvBlockWriter {
        void Write(size_t, size_t, int64_t, std::span<const uint8_t>) override {}
      } none;
      const kv::BlockHash probe{rng(), rng()};
      router::KvFetch f{.shard_key = probe, .hashes = std::span<const kv::BlockHash>(&probe, 1)};
      r->client->Fetch(std::span<router::KvFetch>(&f, 1), none, absl::Seconds(10));
    }
    ASSIGN_OR_RETURN(auto w3, Ttft(s, q3));
    warm3.push_back(w3.first);
    cached3.push_back(static_cast<double>(w3.second));
    // Again from a cold L3 (restart, page cache dropped), the whole prefix, no deadline.
    if (!r->client->Flush(absl::Seconds(60))) return absl::DeadlineExceededError("puts");
    store.Stop();
    DropPageCache(store.dir());
    RETURN_IF_ERROR(store.Start());
    fetch3.push_back(FetchSeconds(*probe_client, chain, block_bytes, rng));
    if (rep == 0 && real_blocks != nullptr) {
      for (const kv_store::GotBlock& b : store.core().Get(chain, false)) {
        real_blocks->emplace_back(b.data.view());
      }
    }
  }
  const double c = Median(cold);
  auto add = [&](const char* name, const std::vector<double>& w, const std::vector<double>& cached,
                 const std::vector<double>& fetch, const char* goal, const char* how) {
    report.Add(
        WithCommon({.name = name,
                    .value = Median(w) / c,
                    .unit = "ratio",
                    .params = {{"prefix_tokens", prefix},
                               {"new_tokens", 32},
                               {"ttft_cold_s", c},
                               {"ttft_cold_s_range", Range(cold)},
                               {"ttft_warm_s", Median(w)},
                               {"ttft_warm_s_range", Range(w)},
                               {"cached_prompt_tokens", Median(cached)},
                               {"cached_prompt_tokens_range", Range(cached)},
                               // the whole prefix's Fetch without a deadline (-1: incomplete)
                               {"fetch_s", Median(fetch)},
                               {"fetch_s_range", Range(fetch)},
                               {"fetch_bytes", static_cast<int64_t>(prefix / 16) * block_bytes},
                               {"fetch_timeout_ms", absl::ToDoubleMilliseconds(fetch_timeout)},
                               {"compression", "zstd"},
                               {"how", how},
                               {"repeats", 3},
                               {"goal", goal}}},
                   o, model));
  };
  add("ttft_warm_over_cold_l2", warm2, cached2, fetch2, "<= 0.2",
      "router L1 flushed, prefix from L2");
  add("ttft_warm_over_cold_l3", warm3, cached3, fetch3, "<= 0.3",
      "kv-store restarted (L2 empty), L3 page cache dropped with posix_fadvise(DONTNEED)");
  return absl::OkStatus();
}

double MemcpyGbS(int64_t block_bytes, int64_t blocks) {
  std::vector<uint8_t> src(block_bytes * blocks, 1), dst(block_bytes * blocks);
  std::memcpy(dst.data(), src.data(), src.size());  // fault the pages in
  const absl::Time t0 = absl::Now();
  for (int64_t i = 0; i < blocks; ++i) {
    std::memcpy(dst.data() + i * block_bytes, src.data() + i * block_bytes, block_bytes);
  }
  const double s = absl::ToDoubleSeconds(absl::Now() - t0);
  return static_cast<double>(src.size()) / s / 1e9;
}

// Put and Get through the client and server, against memcpy.
absl::Status Throughput(const std::string& model_dir, const std::string& model,
                        const SuiteOptions& o, const std::string& work, BenchReport& report) {
  const std::vector<int64_t> dims = BlockDims(model_dir, 16);
  int64_t block_bytes = 4;
  for (int64_t d : dims) block_bytes *= d;
  const int64_t blocks = std::max<int64_t>(64, (o.quick ? 64ll << 20 : 256ll << 20) / block_bytes);
  std::vector<double> put, get, mem;
  for (int rep = 0; rep < 3; ++rep) {
    InProcessStore store(absl::StrCat(work, "/tput-", rep), kv_store::CompressionMode::kNone);
    RETURN_IF_ERROR(store.Start());
    common::metrics::Registry registry;
    router::KvStoreClientOptions k;
    k.targets = {store.address()};
    k.put_queue_bytes = 2ll << 30;
    k.fetch_timeout = absl::Seconds(10);
    ASSIGN_OR_RETURN(auto client,
                     router::KvStoreClient::Create(k, dims, registry, common::SystemClock::Get()));
    std::vector<kv::BlockHash> hashes;
    for (int64_t i = 0; i < blocks; ++i)
      hashes.push_back({static_cast<uint64_t>(i + 1), static_cast<uint64_t>(7 + rep)});
    std::vector<uint8_t> src(block_bytes);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131);
    const absl::Time t0 = absl::Now();
    client->Store(hashes[0], hashes, [&](size_t, std::span<uint8_t> dst) {
      std::memcpy(dst.data(), src.data(), dst.size());
    });
    if (!client->Flush(absl::Seconds(120))) return absl::DeadlineExceededError("puts");
    put.push_back(static_cast<double>(blocks * block_bytes) /
                  absl::ToDoubleSeconds(absl::Now() - t0) / 1e9);
    BufferWriter writer(block_bytes, blocks);
    router::KvFetch f{.shard_key = hashes[0], .hashes = hashes};
    const absl::Time t1 = absl::Now();
    client->Fetch(std::span<router::KvFetch>(&f, 1), writer, absl::Seconds(10));
    const double s = absl::ToDoubleSeconds(absl::Now() - t1);
    if (f.num_fetched != blocks) {
      return absl::InternalError(absl::StrCat("fetched ", f.num_fetched, " of ", blocks));
    }
    get.push_back(static_cast<double>(blocks * block_bytes) / s / 1e9);
    mem.push_back(MemcpyGbS(block_bytes, blocks));
  }
  const double m = Median(mem);
  for (auto [name, v] :
       {std::pair{"kv_store_put_gb_s", put}, std::pair{"kv_store_get_gb_s", get}}) {
    report.Add(WithCommon({.name = name,
                           .value = Median(v),
                           .unit = "GB/s",
                           .params = {{"range", Range(v)},
                                      {"blocks", blocks},
                                      {"block_bytes", block_bytes},
                                      {"compression", "none"},
                                      {"transport", "gRPC loopback, one client"},
                                      {"memcpy_range", Range(mem)}},
                           .baseline = Baseline{"memcpy_gb_s", m}},
                          o, model));
  }
  return absl::OkStatus();
}

// Raw sequential write of `bytes` + fdatasync, GB/s.
double RawWriteGbS(const std::string& path, const std::string& block, int64_t blocks) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const absl::Time t0 = absl::Now();
  for (int64_t i = 0; i < blocks; ++i) {
    if (write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) break;
  }
  fdatasync(fd);
  const double s = absl::ToDoubleSeconds(absl::Now() - t0);
  close(fd);
  unlink(path.c_str());
  return static_cast<double>(block.size() * blocks) / s / 1e9;
}

// L3 as files (ours) vs RocksDB, and vs the raw disk.
absl::Status L3Backends(const std::string& model_dir, const std::string& model,
                        const SuiteOptions& o, const std::string& work, BenchReport& report) {
  const std::vector<int64_t> dims = BlockDims(model_dir, 16);
  int64_t block_bytes = 4;
  for (int64_t d : dims) block_bytes *= d;
  const int64_t blocks = std::max<int64_t>(64, (o.quick ? 64ll << 20 : 256ll << 20) / block_bytes);
  std::string block(block_bytes, '\0');
  std::mt19937 rng(3);
  for (auto& c : block) c = static_cast<char>(rng());
  const uint64_t checksum = XXH3_64bits(block.data(), block.size());
  std::vector<double> raw, files_w, files_r, files_open, rocks_w, rocks_r, rocks_open;
  for (int rep = 0; rep < 3; ++rep) {
    raw.push_back(RawWriteGbS(absl::StrCat(work, "/raw-", rep), block, blocks));
    std::vector<kv::BlockHash> keys;
    for (int64_t i = 0; i < blocks; ++i)
      keys.push_back({static_cast<uint64_t>(i + 1), static_cast<uint64_t>(99 + rep)});
    {  // files
      const std::string dir = absl::StrCat(work, "/files-", rep);
      ASSIGN_OR_RETURN(auto fsx,
                       kv_store::FileStore::Open(dir, kv_store::FileStore::Kind::kBlocks, nullptr));
      const kv_store::EntryMeta meta{.codec = kv_store::Codec::kRaw,
                                     .dtype = common::DType::kF32,
                                     .dims = dims,
                                     .raw_bytes = block_bytes,
                                     .raw_checksum = checksum};
      const absl::Time t0 = absl::Now();
      for (const auto& k : keys) RETURN_IF_ERROR(fsx->Write(k, meta, block).status());
      {
        const int dfd = open(dir.c_str(), O_RDONLY);
        syncfs(dfd);
        close(dfd);
      }
      files_w.push_back(static_cast<double>(blocks * block_bytes) /
                        absl::ToDoubleSeconds(absl::Now() - t0) / 1e6);
      DropPageCache(dir);
      const absl::Time t1 = absl::Now();
      std::vector<kv_store::FoundEntry> found;
      ASSIGN_OR_RETURN(fsx,
                       kv_store::FileStore::Open(dir, kv_store::FileStore::Kind::kBlocks, &found));
      files_open.push_back(absl::ToDoubleSeconds(absl::Now() - t1));
      const absl::Time t2 = absl::Now();
      for (const auto& k : keys) RETURN_IF_ERROR(fsx->Read(k).status());
      files_r.push_back(static_cast<double>(blocks * block_bytes) /
                        absl::ToDoubleSeconds(absl::Now() - t2) / 1e6);
      fs::remove_all(dir);
    }
    {  // RocksDB: default options, WAL on (crash safety comparable to the files' rename)
      const std::string dir = absl::StrCat(work, "/rocksdb-", rep);
      rocksdb::Options ro;
      ro.create_if_missing = true;
      rocksdb::DB* db = nullptr;
      if (!rocksdb::DB::Open(ro, dir, &db).ok()) return absl::InternalError("rocksdb open");
      const absl::Time t0 = absl::Now();
      for (const auto& k : keys) {
        const auto kb = k.CanonicalBytes();
        db->Put(rocksdb::WriteOptions(),
                rocksdb::Slice(reinterpret_cast<const char*>(kb.data()), 16), block);
      }
      db->Flush(rocksdb::FlushOptions());
      db->SyncWAL();
      rocks_w.push_back(static_cast<double>(blocks * block_bytes) /
                        absl::ToDoubleSeconds(absl::Now() - t0) / 1e6);
      delete db;
      DropPageCache(dir);
      const absl::Time t1 = absl::Now();
      if (!rocksdb::DB::Open(ro, dir, &db).ok()) return absl::InternalError("rocksdb reopen");
      // An L3 index is rebuilt at open: iterate the keys (RocksDB reads values with them).
      int64_t n = 0;
      {
        std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
        for (it->SeekToFirst(); it->Valid(); it->Next()) ++n;
      }
      rocks_open.push_back(absl::ToDoubleSeconds(absl::Now() - t1));
      DropPageCache(dir);
      const absl::Time t2 = absl::Now();
      std::string value;
      for (const auto& k : keys) {
        const auto kb = k.CanonicalBytes();
        db->Get(rocksdb::ReadOptions(),
                rocksdb::Slice(reinterpret_cast<const char*>(kb.data()), 16), &value);
      }
      rocks_r.push_back(static_cast<double>(blocks * block_bytes) /
                        absl::ToDoubleSeconds(absl::Now() - t2) / 1e6);
      delete db;
      (void)n;
      fs::remove_all(dir);
    }
  }
  const double raw_m = Median(raw);
  report.Add(WithCommon({.name = "kv_store_l3_write_gb_s",
                         .value = Median(files_w) / 1e3,
                         .unit = "GB/s",
                         .params = {{"range_mb_s", Range(files_w)},
                                    {"blocks", blocks},
                                    {"block_bytes", block_bytes},
                                    {"sync", "syncfs after the writes; raw: fdatasync"},
                                    {"raw_range_gb_s", Range(raw)}},
                         .baseline = Baseline{"raw_disk_write_gb_s", raw_m}},
                        o, model));
  auto backend = [&](const char* name, const char* unit, const std::vector<double>& f,
                     const std::vector<double>& r) {
    report.Add(WithCommon({.name = name,
                           .value = Median(f),
                           .unit = unit,
                           .params = {{"backend", "files"},
                                      {"files_range", Range(f)},
                                      {"rocksdb_range", Range(r)},
                                      {"blocks", blocks},
                                      {"block_bytes", block_bytes},
                                      {"page_cache", "dropped before reads and reopen"}},
                           .baseline = Baseline{"rocksdb", Median(r)}},
                          o, model));
  };
  backend("l3_backend_write_mb_s", "MB/s", files_w, rocks_w);
  backend("l3_backend_read_mb_s", "MB/s", files_r, rocks_r);
  backend("l3_backend_reopen_s", "s", files_open, rocks_open);
  return absl::OkStatus();
}

// Compression ratio and speed per mode on random and real K/V.
void Compression(const std::string& model_dir, const std::string& model, const SuiteOptions& o,
                 const std::vector<std::string>& real, BenchReport& report) {
  const std::vector<int64_t> dims = BlockDims(model_dir, 16);
  int64_t block_bytes = 4;
  for (int64_t d : dims) block_bytes *= d;
  std::vector<std::string> random;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 1);
  for (int b = 0; b < 32; ++b) {
    std::vector<float> v(block_bytes / 4);
    for (float& x : v) x = normal(rng);
    random.emplace_back(reinterpret_cast<const char*>(v.data()), block_bytes);
  }
  const kv_store::BlockLayout layout{common::DType::kF32, dims};
  for (const auto& [data_name, blocks] :
       {std::pair<const char*, const std::vector<std::string>&>{"random_normal", random},
        std::pair<const char*, const std::vector<std::string>&>{"real_kv", real}}) {
    if (blocks.empty()) continue;
    const double raw_bytes = static_cast<double>(blocks.size() * block_bytes);
    for (const char* mode : {"shuffle_zstd", "zstd_plain", "int8"}) {
      double stored = 0, max_err = 0;
      std::vector<std::string> payloads;
      const absl::Time t0 = absl::Now();
      for (const std::string& b : blocks) {
        if (std::string(mode) == "zstd_plain") {
          std::string out(ZSTD_compressBound(b.size()), '\0');
          out.resize(ZSTD_compress(out.data(), out.size(), b.data(), b.size(), 1));
          payloads.push_back(std::move(out));
        } else {
          const kv_store::CodecOptions co{.mode = std::string(mode) == "int8"
                                                      ? kv_store::CompressionMode::kInt8
                                                      : kv_store::CompressionMode::kZstd,
                                          .min_savings = 0};
          kv_store::EncodedBlock e = kv_store::EncodeBlock(co, layout, b);
          payloads.push_back(e.codec == kv_store::Codec::kRaw ? b : std::move(e.payload));
        }
        stored += static_cast<double>(payloads.back().size());
      }
      const double enc_s = absl::ToDoubleSeconds(absl::Now() - t0);
      std::string out(block_bytes, '\0');
      const absl::Time t1 = absl::Now();
      for (size_t i = 0; i < blocks.size(); ++i) {
        if (std::string(mode) == "zstd_plain") {
          ZSTD_decompress(out.data(), out.size(), payloads[i].data(), payloads[i].size());
        } else {
          const kv_store::Codec codec =
              std::string(mode) == "int8" ? kv_store::Codec::kInt8 : kv_store::Codec::kShuffleZstd;
          (void)kv_store::DecodeBlock(codec, layout, payloads[i],
                                      {reinterpret_cast<uint8_t*>(out.data()), out.size()});
        }
        if (std::string(mode) == "int8") {
          const float* x = reinterpret_cast<const float*>(blocks[i].data());
          const float* y = reinterpret_cast<const float*>(out.data());
          double max_abs = 0, err = 0;
          for (int64_t k = 0; k < block_bytes / 4; ++k) {
            max_abs = std::max(max_abs, static_cast<double>(std::fabs(x[k])));
            err = std::max(err, static_cast<double>(std::fabs(x[k] - y[k])));
          }
          max_err = std::max(max_err, max_abs > 0 ? err / max_abs : 0);
        }
      }
      const double dec_s = absl::ToDoubleSeconds(absl::Now() - t1);
      nlohmann::json params = {{"mode", mode},
                               {"data", data_name},
                               {"blocks", blocks.size()},
                               {"block_bytes", block_bytes},
                               {"compress_mb_s", raw_bytes / enc_s / 1e6},
                               {"decompress_mb_s", raw_bytes / dec_s / 1e6},
                               {"lossless", std::string(mode) != "int8"}};
      if (std::string(mode) == "int8") params["max_error_over_block_max_abs"] = max_err;
      report.Add(WithCommon({.name = "kv_compression_ratio",
                             .value = stored / raw_bytes,
                             .unit = "ratio",
                             .params = params},
                            o, model));
    }
  }
}

absl::StatusOr<BenchReport> RunKvStoreSuite(const SuiteOptions& options) {
  SuiteOptions o = options;
  if (o.quick && o.model_dir.empty()) o.preset = "small";
  std::string dir = o.model_dir;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, PresetCheckpoint(o));
  }
  const std::string model = o.model_dir.empty() ? o.preset : o.model_dir;
  const std::string work =
      (fs::temp_directory_path() / absl::StrCat("moe-bench-kv-store-", getpid())).string();
  fs::create_directories(work);
  BenchReport report("kv-store");
  std::vector<std::string> real;
  std::fprintf(stderr, "moe bench kv-store: ttft_warm_over_cold_l2/_l3 on %s\n", model.c_str());
  RETURN_IF_ERROR(WarmOverCold(dir, model, o, work, report, &real));
  std::fprintf(stderr, "moe bench kv-store: put/get GB/s\n");
  RETURN_IF_ERROR(Throughput(dir, model, o, work, report));
  std::fprintf(stderr, "moe bench kv-store: L3 files vs RocksDB vs raw disk\n");
  RETURN_IF_ERROR(L3Backends(dir, model, o, work, report));
  std::fprintf(stderr, "moe bench kv-store: compression\n");
  Compression(dir, model, o, real, report);
  std::error_code ec;
  fs::remove_all(work, ec);
  return report;
}

}  // namespace

MOE_REGISTER_BENCH_SUITE("kv-store",
                         "kv-store: warm/cold TTFT from L2 and L3, put/get GB/s vs memcpy, L3 "
                         "write vs raw disk, files vs RocksDB, compression per mode",
                         RunKvStoreSuite);

}  // namespace moe::bench
