#include "services/router/kv_store_client.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/hash.h"
#include "common/base/log.h"
#include "common/base/thread.h"
#include "common/grpc/status.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "moe/kv_store/v1/kv_store.grpc.pb.h"
#include "services/kv-store/kv_block_wire.h"

namespace moe::router {
namespace {

namespace pb = ::moe::kv_store::v1;

constexpr char kGetMethod[] = "/moe.kv_store.v1.KvStore/Get";

std::string HashBytes(const kv::BlockHash& h) {
  const std::array<uint8_t, 16> b = h.CanonicalBytes();
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

std::chrono::system_clock::time_point ChronoDeadline(absl::Time t) { return absl::ToChronoTime(t); }

// The client's own metrics (besides the scheduler's prefix-cache counters).
struct ClientMetrics {
  explicit ClientMetrics(common::metrics::Registry& r)
      : blocks_queued(r.AddCounter("moe_kv_store_client_blocks_total",
                                   "Blocks this router sent to (or dropped for) the kv-store.",
                                   {{"result", "queued"}})),
        blocks_dropped_full(
            r.AddCounter("moe_kv_store_client_blocks_total",
                         "Blocks this router sent to (or dropped for) the kv-store.",
                         {{"result", "dropped_queue_full"}})),
        blocks_dropped_unavailable(
            r.AddCounter("moe_kv_store_client_blocks_total",
                         "Blocks this router sent to (or dropped for) the kv-store.",
                         {{"result", "dropped_unavailable"}})),
        blocks_failed(r.AddCounter("moe_kv_store_client_blocks_total",
                                   "Blocks this router sent to (or dropped for) the kv-store.",
                                   {{"result", "put_failed"}})),
        fetch_deadline_exceeded(r.AddCounter(
            "moe_kv_store_client_fetch_deadline_exceeded_total",
            "Fetches cut short by kv_store.fetch_timeout (what arrived by then was used).")),
        rpc_errors(
            r.CounterFamily("moe_kv_store_client_rpc_errors_total",
                            "kv-store calls that failed (the router treats them as misses).")),
        put_queue_bytes(r.AddGauge("moe_kv_store_client_put_queue_bytes",
                                   "Bytes of blocks waiting to be sent to the kv-store.")) {}
  common::metrics::Counter& blocks_queued;
  common::metrics::Counter& blocks_dropped_full;
  common::metrics::Counter& blocks_dropped_unavailable;
  common::metrics::Counter& blocks_failed;
  common::metrics::Counter& fetch_deadline_exceeded;
  common::metrics::Family<common::metrics::Counter>& rpc_errors;
  common::metrics::Gauge& put_queue_bytes;
};

}  // namespace

class KvStoreClient::Impl {
 public:
  Impl(const KvStoreClientOptions& options, std::vector<int64_t> dims,
       common::metrics::Registry& registry, common::Clock& clock)
      : options_(options),
        dims_(std::move(dims)),
        metrics_(registry),
        fidelity_(options.lossy_int8 ? pb::KV_FIDELITY_LOSSY_INT8 : pb::KV_FIDELITY_EXACT) {
    block_bytes_ = 4;
    for (int64_t d : dims_) block_bytes_ *= d;
  }
  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (std::thread& w : workers_) w.join();
  }

  absl::Status Init() {
    for (const std::string& t : options_.targets) {
      auto target = std::make_unique<Target>();
      target->address = t;
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
          common::rpc::CreateChannel(t, options_.channel);
      if (!channel.ok()) return channel.status();
      target->channel = *channel;
      target->stub = pb::KvStore::NewStub(target->channel);
      target->generic = std::make_unique<grpc::GenericStub>(target->channel);
      targets_.push_back(std::move(target));
    }
    for (int i = 0; i < options_.put_parallelism; ++i) {
      workers_.emplace_back([this] { WorkerLoop(); });
    }
    return absl::OkStatus();
  }

  int64_t block_bytes() const { return block_bytes_; }
  bool response_cache() const { return options_.response_cache; }
  bool lossy() const { return options_.lossy_int8; }

  absl::Duration fetch_timeout() const { return options_.fetch_timeout; }
  void Fetch(std::span<KvFetch> fetches, KvBlockWriter& writer, absl::Duration timeout);
  int64_t Store(const kv::BlockHash& shard_key, std::span<const kv::BlockHash> hashes,
                absl::FunctionRef<void(size_t, std::span<uint8_t>)> read);
  std::optional<CachedResponse> LookupResponse(const kv::BlockHash& key);
  void StoreResponse(const kv::BlockHash& key, const CachedResponse& response);
  bool Flush(absl::Duration timeout);
  void SetEngineBusy(bool busy);

 private:
  struct Target {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<pb::KvStore::Stub> stub;
    std::unique_ptr<grpc::GenericStub> generic;
    std::atomic<bool> refused{false};
    // When an RPC error was last logged (absl::ToUnixNanos), so a down store logs one line
    // per kErrorLogInterval rather than one per call.
    std::atomic<int64_t> last_error_log_ns{0};
  };
  static constexpr absl::Duration kErrorLogInterval = absl::Seconds(10);
  struct PutItem {
    kv::BlockHash hash;
    size_t target = 0;
    std::string data;
    uint64_t checksum = 0;
    absl::Time queued_at;
  };
  struct ResponseItem {
    kv::BlockHash key;
    size_t target = 0;
    std::string value;
  };

  size_t Shard(const kv::BlockHash& key) const {
    size_t best = 0;
    uint64_t best_score = 0;
    for (size_t i = 0; i < targets_.size(); ++i) {
      const uint64_t score = common::Mix64(key.lo ^ common::Mix64(key.hi + i));
      if (i == 0 || score > best_score) {
        best = i;
        best_score = score;
      }
    }
    return best;
  }
  // Whether calls to `t` may go out now (not refused, and not known down).
  bool Usable(Target& t) const {
    if (t.refused.load()) return false;
    return t.channel->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_TRANSIENT_FAILURE;
  }
  void OnError(Target& t, const char* rpc, const grpc::Status& s) {
    metrics_.rpc_errors.Add({{"rpc", rpc}}).Increment();
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION && !t.refused.exchange(true)) {
      MOE_LOG_ERROR("router: refusing kv-store {}: {}", t.address, s.error_message());
      return;
    }
    const int64_t now = absl::ToUnixNanos(absl::Now());
    int64_t last = t.last_error_log_ns.load();
    if (now - last >= absl::ToInt64Nanoseconds(kErrorLogInterval) &&
        t.last_error_log_ns.compare_exchange_strong(last, now)) {
      MOE_LOG_WARN("router: kv-store {} {} failed: {} (at most one such line per {})", t.address,
                   rpc, common::rpc::FromGrpcStatus(s).ToString(),
                   absl::FormatDuration(kErrorLogInterval));
    }
  }
  void WorkerLoop();
  // When the queue's first block may be sent: after put_idle_delay of an idle engine, at most
  // put_max_delay after it was queued; at once while Flush waits.
  absl::Time PutDueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const KvStoreClientOptions options_;
  const std::vector<int64_t> dims_;
  ClientMetrics metrics_;
  const pb::KvFidelity fidelity_;
  int64_t block_bytes_ = 0;
  std::vector<std::unique_ptr<Target>> targets_;
  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  std::deque<std::shared_ptr<PutItem>> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<ResponseItem> responses_ ABSL_GUARDED_BY(mu_);
  // Queued or in flight, by hash: Fetch copies from here what the store may not have yet.
  absl::flat_hash_map<kv::BlockHash, std::shared_ptr<PutItem>> pending_ ABSL_GUARDED_BY(mu_);
  int64_t queue_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // reserved, queued and in flight
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool engine_busy_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time engine_idle_since_ ABSL_GUARDED_BY(mu_) = absl::Now();
  int flushing_ ABSL_GUARDED_BY(mu_) = 0;  // Flush calls waiting
};

// ---------------------------------------------------------------------------------------------
// Fetch

namespace {

// One round of concurrent calls whose completions the stepping thread consumes in order.
struct Round {
  absl::Mutex mu;
  std::deque<size_t> completed ABSL_GUARDED_BY(mu);
  int64_t pending ABSL_GUARDED_BY(mu) = 0;
};

struct LookupCall {
  grpc::ClientContext ctx;
  pb::LookupRequest request;
  pb::LookupResponse response;
  grpc::Status status;
};

struct GetCall {
  grpc::ClientContext ctx;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  grpc::Status status;
  size_t fetch = 0;
  size_t first = 0;  // index in the fetch's hashes of the first block asked
  size_t count = 0;
};

// Waits for the next completed call of `round` until `deadline`; nullopt when none is left or
// the deadline passed.
std::optional<size_t> NextCompleted(Round& round, absl::Time deadline) {
  absl::MutexLock lock(&round.mu);
  auto ready = [&round]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(round.mu) {
    return !round.completed.empty() || round.pending == 0;
  };
  round.mu.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (round.completed.empty()) return std::nullopt;
  const size_t i = round.completed.front();
  round.completed.pop_front();
  return i;
}

// Routes a Get response's blocks to the writer and records which arrived intact.
class FetchSink final : public kv_store::WireBlockSink {
 public:
  FetchSink(const GetCall& call, const KvFetch& fetch, std::span<const int64_t> dims,
            int64_t block_bytes, KvBlockWriter& writer, std::vector<uint8_t>& intact)
      : call_(call),
        fetch_(fetch),
        dims_(dims),
        block_bytes_(block_bytes),
        writer_(writer),
        intact_(intact),
        next_(call.first) {}

  bool BeginBlock(const kv::BlockHash& hash, common::DType dtype, std::span<const int64_t> dims,
                  int64_t num_bytes, int) override {
    // prefix_only: blocks come in request order and stop at the first missing one.
    if (stopped_ || next_ >= call_.first + call_.count || hash != fetch_.hashes[next_] ||
        dtype != common::DType::kF32 || num_bytes != block_bytes_ ||
        !std::equal(dims.begin(), dims.end(), dims_.begin(), dims_.end())) {
      stopped_ = true;
      return false;
    }
    return true;
  }
  void BlockData(int64_t offset, const uint8_t* data, size_t size) override {
    writer_.Write(call_.fetch, next_, offset, {data, size});
  }
  void EndBlock(bool intact) override {
    intact_[next_] = intact ? 1 : 0;
    ++next_;
  }

 private:
  const GetCall& call_;
  const KvFetch& fetch_;
  std::span<const int64_t> dims_;
  const int64_t block_bytes_;
  KvBlockWriter& writer_;
  std::vector<uint8_t>& intact_;
  size_t next_;
  bool stopped_ = false;
};

}  // namespace

void KvStoreClient::Impl::Fetch(std::span<KvFetch> fetches, KvBlockWriter& writer,
                                absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + std::min(timeout, absl::Minutes(1));
  for (KvFetch& f : fetches) {
    f.num_fetched = 0;
    f.num_from_l2 = 0;
  }
  // Phase 1: Lookups, all at once. The calls' state outlives this function when it gives up on
  // them (their callbacks still run), hence the shared pointers.
  auto lookups_round = std::make_shared<Round>();
  std::vector<std::shared_ptr<LookupCall>> lookups(fetches.size());
  std::vector<size_t> target_of(fetches.size());
  for (size_t i = 0; i < fetches.size(); ++i) {
    const KvFetch& f = fetches[i];
    target_of[i] = Shard(f.shard_key);
    Target& t = *targets_[target_of[i]];
    if (f.hashes.empty() || !Usable(t)) continue;
    auto call = std::make_shared<LookupCall>();
    for (const kv::BlockHash& h : f.hashes) call->request.add_hashes(HashBytes(h));
    call->request.set_fidelity(fidelity_);
    call->ctx.set_deadline(ChronoDeadline(deadline));
    lookups[i] = call;
    {
      absl::MutexLock lock(&lookups_round->mu);
      ++lookups_round->pending;
    }
    t.stub->async()->Lookup(&call->ctx, &call->request, &call->response,
                            [round = lookups_round, call, i](grpc::Status s) {
                              call->status = std::move(s);
                              absl::MutexLock lock(&round->mu);
                              --round->pending;
                              round->completed.push_back(i);
                            });
  }
  std::vector<int64_t> in_store(fetches.size(), 0);
  for (;;) {
    std::optional<size_t> i = NextCompleted(*lookups_round, deadline);
    if (!i.has_value()) break;
    LookupCall& call = *lookups[*i];
    if (!call.status.ok()) {
      OnError(*targets_[target_of[*i]], "Lookup", call.status);
      continue;
    }
    in_store[*i] = std::min<int64_t>(call.response.num_cached_blocks(),
                                     static_cast<int64_t>(fetches[*i].hashes.size()));
  }
  bool timed_out = false;
  {
    absl::MutexLock lock(&lookups_round->mu);
    timed_out = lookups_round->pending > 0;
  }
  if (timed_out) {
    for (auto& call : lookups) {
      if (call != nullptr) call->ctx.TryCancel();
    }
  }

  // Phase 2: Gets of the found prefixes, batched by size, all at once; blocks still in this
  // client's own store queue are copied from there.
  std::vector<std::vector<uint8_t>> intact(fetches.size());
  auto gets_round = std::make_shared<Round>();
  std::vector<std::shared_ptr<GetCall>> gets;
  const size_t per_call =
      static_cast<size_t>(std::max<int64_t>(1, options_.max_call_bytes / block_bytes_ - 1));
  for (size_t i = 0; i < fetches.size(); ++i) {
    const KvFetch& f = fetches[i];
    intact[i].assign(f.hashes.size(), 0);
    size_t n = static_cast<size_t>(in_store[i]);
    {
      absl::MutexLock lock(&mu_);
      for (size_t j = n; j < f.hashes.size(); ++j) {
        auto it = pending_.find(f.hashes[j]);
        if (it == pending_.end()) break;
        const std::string& data = it->second->data;
        writer.Write(i, j, 0, {reinterpret_cast<const uint8_t*>(data.data()), data.size()});
        intact[i][j] = 1;
      }
    }
    if (n == 0 || timed_out) continue;
    Target& t = *targets_[target_of[i]];
    for (size_t first = 0; first < n; first += per_call) {
      auto call = std::make_shared<GetCall>();
      call->fetch = i;
      call->first = first;
      call->count = std::min(per_call, n - first);
      pb::GetRequest req;
      for (size_t j = first; j < first + call->count; ++j) req.add_hashes(HashBytes(f.hashes[j]));
      req.set_fidelity(fidelity_);
      req.set_prefix_only(true);
      bool own;
      if (!grpc::SerializationTraits<pb::GetRequest>::Serialize(req, &call->request, &own).ok()) {
        continue;
      }
      call->ctx.set_deadline(ChronoDeadline(deadline));
      const size_t index = gets.size();
      gets.push_back(call);
      {
        absl::MutexLock lock(&gets_round->mu);
        ++gets_round->pending;
      }
      t.generic->UnaryCall(&call->ctx, kGetMethod, grpc::StubOptions(), &call->request,
                           &call->response, [round = gets_round, call, index](grpc::Status s) {
                             call->status = std::move(s);
                             absl::MutexLock lock(&round->mu);
                             --round->pending;
                             round->completed.push_back(index);
                           });
    }
  }
  // Each response is copied into L1 on this thread as it arrives, until the deadline.
  for (;;) {
    std::optional<size_t> c = NextCompleted(*gets_round, deadline);
    if (!c.has_value()) break;
    GetCall& call = *gets[*c];
    if (!call.status.ok()) {
      OnError(*targets_[target_of[call.fetch]], "Get", call.status);
      continue;
    }
    FetchSink sink(call, fetches[call.fetch], dims_, block_bytes_, writer, intact[call.fetch]);
    if (absl::Status s = kv_store::ParseGetResponse(call.response, sink); !s.ok()) {
      metrics_.rpc_errors.Add({{"rpc", "Get"}}).Increment();
    }
  }
  {
    absl::MutexLock lock(&gets_round->mu);
    if (gets_round->pending > 0) timed_out = true;
  }
  if (timed_out) {
    metrics_.fetch_deadline_exceeded.Increment();
    for (auto& call : gets) call->ctx.TryCancel();
  }
  for (size_t i = 0; i < fetches.size(); ++i) {
    KvFetch& f = fetches[i];
    const LookupCall* lookup = lookups[i].get();
    while (f.num_fetched < static_cast<int64_t>(f.hashes.size()) && intact[i][f.num_fetched]) {
      const int64_t j = f.num_fetched;
      if (lookup != nullptr && j < in_store[i] && j < lookup->response.tiers_size() &&
          lookup->response.tiers(static_cast<int>(j)) == pb::TIER_L2) {
        ++f.num_from_l2;
      }
      ++f.num_fetched;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Store and the worker

int64_t KvStoreClient::Impl::Store(const kv::BlockHash& shard_key,
                                   std::span<const kv::BlockHash> hashes,
                                   absl::FunctionRef<void(size_t, std::span<uint8_t>)> read) {
  if (hashes.empty()) return 0;
  const size_t target = Shard(shard_key);
  if (!Usable(*targets_[target])) {
    metrics_.blocks_dropped_unavailable.Increment(static_cast<double>(hashes.size()));
    return static_cast<int64_t>(hashes.size());  // nothing to retry: the store is down
  }
  int64_t n;
  {
    absl::MutexLock lock(&mu_);
    const int64_t room = (options_.put_queue_bytes - queue_bytes_) / block_bytes_;
    n = std::clamp<int64_t>(room, 0, static_cast<int64_t>(hashes.size()));
    queue_bytes_ += n * block_bytes_;
  }
  if (n < static_cast<int64_t>(hashes.size())) {
    metrics_.blocks_dropped_full.Increment(static_cast<double>(hashes.size() - n));
  }
  if (n == 0) return 0;
  std::vector<std::shared_ptr<PutItem>> items;
  items.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    auto item = std::make_shared<PutItem>();
    item->hash = hashes[i];
    item->target = target;
    item->data.resize(static_cast<size_t>(block_bytes_));
    read(static_cast<size_t>(i),
         {reinterpret_cast<uint8_t*>(item->data.data()), item->data.size()});
    item->checksum = XXH3_64bits(item->data.data(), item->data.size());
    item->queued_at = absl::Now();
    items.push_back(std::move(item));
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto& item : items) {
      pending_[item->hash] = item;
      queue_.push_back(std::move(item));
    }
    metrics_.put_queue_bytes.Set(static_cast<double>(queue_bytes_));
  }
  metrics_.blocks_queued.Increment(static_cast<double>(n));
  return n;
}

void KvStoreClient::Impl::WorkerLoop() {
  // Write-behind: yields the cores to the engine's threads (a full queue drops, counted).
  common::BecomeBackgroundThread("kv-put");
  for (;;) {
    std::vector<std::shared_ptr<PutItem>> batch;
    std::optional<ResponseItem> response;
    {
      absl::MutexLock lock(&mu_);
      // Wakes on a new item, a change of the engine's state, a Flush or the stop; sends when
      // a response is queued or the first block is due (PutDueLocked).
      for (;;) {
        const bool busy = engine_busy_;
        const int flushing = flushing_;
        const bool had_queue = !queue_.empty();
        auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || !responses_.empty() || engine_busy_ != busy ||
                 flushing_ != flushing || !queue_.empty() != had_queue;
        };
        if (stopping_ || !responses_.empty()) break;
        if (had_queue) {
          const absl::Time due = PutDueLocked();
          const absl::Time now = absl::Now();
          if (now >= due) break;
          mu_.AwaitWithTimeout(absl::Condition(&changed), due - now);
        } else {
          mu_.Await(absl::Condition(&changed));
        }
      }
      if (stopping_) return;
      if (!responses_.empty()) {
        response = std::move(responses_.front());
        responses_.pop_front();
      } else {
        // One target per Put, under max_call_bytes (at least one block).
        const size_t target = queue_.front()->target;
        int64_t bytes = 0;
        while (!queue_.empty() && queue_.front()->target == target &&
               (batch.empty() || bytes + block_bytes_ + 256 <= options_.max_call_bytes)) {
          bytes += block_bytes_ + 256;
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      ++in_flight_;
    }
    if (response.has_value()) {
      Target& t = *targets_[response->target];
      pb::PutCachedResponseRequest req;
      req.set_key(HashBytes(response->key));
      req.set_value(std::move(response->value));
      pb::PutCachedResponseResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(ChronoDeadline(absl::Now() + options_.put_timeout));
      if (Usable(t)) {
        const grpc::Status s = t.stub->PutCachedResponse(&ctx, req, &resp);
        if (!s.ok()) OnError(t, "PutCachedResponse", s);
      }
    } else {
      Target& t = *targets_[batch.front()->target];
      pb::PutRequest req;
      req.set_fidelity(fidelity_);
      for (const auto& item : batch) {
        pb::KvBlock* b = req.add_blocks();
        b->set_hash(HashBytes(item->hash));
        b->mutable_data()->set_dtype(moe::common::v1::DTYPE_F32);
        for (int64_t d : dims_) b->mutable_data()->add_shape(d);
        b->mutable_data()->set_data(item->data);
        b->set_checksum(item->checksum);
      }
      pb::PutResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(ChronoDeadline(absl::Now() + options_.put_timeout));
      grpc::Status s = Usable(t) ? t.stub->Put(&ctx, req, &resp)
                                 : grpc::Status(grpc::StatusCode::UNAVAILABLE, "kv-store down");
      if (!s.ok()) {
        OnError(t, "Put", s);
        metrics_.blocks_failed.Increment(static_cast<double>(batch.size()));
      }
    }
    absl::MutexLock lock(&mu_);
    --in_flight_;
    for (const auto& item : batch) {
      auto it = pending_.find(item->hash);
      if (it != pending_.end() && it->second == item) pending_.erase(it);
      queue_bytes_ -= block_bytes_;
    }
    metrics_.put_queue_bytes.Set(static_cast<double>(queue_bytes_));
  }
}

absl::Time KvStoreClient::Impl::PutDueLocked() const {
  if (flushing_ > 0) return absl::InfinitePast();
  const absl::Time latest = queue_.front()->queued_at + options_.put_max_delay;
  if (engine_busy_) return latest;
  return std::min(latest, engine_idle_since_ + options_.put_idle_delay);
}

void KvStoreClient::Impl::SetEngineBusy(bool busy) {
  absl::MutexLock lock(&mu_);
  engine_busy_ = busy;
  if (!busy) engine_idle_since_ = absl::Now();
}

bool KvStoreClient::Impl::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  ++flushing_;
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.empty() && responses_.empty() && in_flight_ == 0;
  };
  const bool done = mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
  --flushing_;
  return done;
}

// ---------------------------------------------------------------------------------------------
// Response cache

std::optional<CachedResponse> KvStoreClient::Impl::LookupResponse(const kv::BlockHash& key) {
  if (!options_.response_cache) return std::nullopt;
  Target& t = *targets_[Shard(key)];
  if (!Usable(t)) return std::nullopt;
  pb::GetCachedResponseRequest req;
  req.set_key(HashBytes(key));
  pb::GetCachedResponseResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(ChronoDeadline(absl::Now() + options_.response_timeout));
  const grpc::Status s = t.stub->GetCachedResponse(&ctx, req, &resp);
  if (!s.ok()) {
    OnError(t, "GetCachedResponse", s);
    return std::nullopt;
  }
  if (!resp.found()) return std::nullopt;
  pb::CachedResponse cached;
  if (!cached.ParseFromString(resp.value())) return std::nullopt;
  CachedResponse out;
  out.token_ids.assign(cached.token_ids().begin(), cached.token_ids().end());
  for (const pb::CachedLogprob& lp : cached.logprobs()) {
    engine::SampledToken t;
    t.logprob = lp.logprob();
    for (int k = 0; k < lp.top_token_ids_size() && k < lp.top_logprobs_size(); ++k) {
      t.top.push_back({lp.top_token_ids(k), lp.top_logprobs(k)});
    }
    out.logprobs.push_back(std::move(t));
  }
  for (size_t i = 0; i < out.logprobs.size() && i < out.token_ids.size(); ++i) {
    out.logprobs[i].token_id = out.token_ids[i];
  }
  out.finish_reason =
      cached.finish_reason() == static_cast<int>(generation::FinishReason::kStop)
          ? generation::FinishReason::kStop
      : cached.finish_reason() == static_cast<int>(generation::FinishReason::kLength)
          ? generation::FinishReason::kLength
          : generation::FinishReason::kNone;
  out.prompt_tokens = cached.prompt_tokens();
  out.completion_tokens = cached.completion_tokens();
  return out;
}

void KvStoreClient::Impl::StoreResponse(const kv::BlockHash& key, const CachedResponse& response) {
  if (!options_.response_cache) return;
  pb::CachedResponse cached;
  for (int32_t t : response.token_ids) cached.add_token_ids(t);
  for (const engine::SampledToken& t : response.logprobs) {
    pb::CachedLogprob* lp = cached.add_logprobs();
    lp->set_logprob(t.logprob);
    for (const engine::TokenLogprob& top : t.top) {
      lp->add_top_token_ids(top.token_id);
      lp->add_top_logprobs(top.logprob);
    }
  }
  cached.set_finish_reason(static_cast<int>(response.finish_reason));
  cached.set_prompt_tokens(static_cast<int32_t>(response.prompt_tokens));
  cached.set_completion_tokens(static_cast<int32_t>(response.completion_tokens));
  absl::MutexLock lock(&mu_);
  if (responses_.size() >= 256) return;  // bounded: a cache, not a log
  responses_.push_back({key, Shard(key), cached.SerializeAsString()});
}

// ---------------------------------------------------------------------------------------------
// KvStoreClient: the contract of kv_store_client.h, forwarded.

absl::StatusOr<std::unique_ptr<KvStoreClient>> KvStoreClient::Create(
    const KvStoreClientOptions& options, std::vector<int64_t> block_dims,
    common::metrics::Registry& registry, common::Clock& clock) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (options.targets.empty()) return absl::InvalidArgumentError("kv_store.targets is empty");
  if (block_dims.size() != 5 || block_dims[1] != 2 ||
      std::any_of(block_dims.begin(), block_dims.end(), [](int64_t d) { return d <= 0; })) {
    return absl::InvalidArgumentError("KvStoreClient: block dims must be [L, 2, bs, heads, dim]");
  }
  auto impl = std::make_unique<Impl>(options, std::move(block_dims), registry, clock);
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<KvStoreClient>(new KvStoreClient(std::move(impl)));
}

KvStoreClient::KvStoreClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvStoreClient::~KvStoreClient() = default;

bool KvStoreClient::Flush(absl::Duration timeout) { return impl_->Flush(timeout); }
std::string_view KvStoreClient::fidelity() const { return impl_->lossy() ? "int8" : "exact"; }
int64_t KvStoreClient::block_bytes() const { return impl_->block_bytes(); }
absl::Duration KvStoreClient::fetch_timeout() const { return impl_->fetch_timeout(); }
void KvStoreClient::Fetch(std::span<KvFetch> fetches, KvBlockWriter& writer,
                          absl::Duration timeout) {
  impl_->Fetch(fetches, writer, timeout);
}
int64_t KvStoreClient::Store(const kv::BlockHash& shard_key, std::span<const kv::BlockHash> hashes,
                             absl::FunctionRef<void(size_t, std::span<uint8_t>)> read) {
  return impl_->Store(shard_key, hashes, read);
}
void KvStoreClient::SetEngineBusy(bool busy) { impl_->SetEngineBusy(busy); }
bool KvStoreClient::response_cache_enabled() const { return impl_->response_cache(); }
std::optional<CachedResponse> KvStoreClient::LookupResponse(const kv::BlockHash& key) {
  return impl_->LookupResponse(key);
}
void KvStoreClient::StoreResponse(const kv::BlockHash& key, const CachedResponse& response) {
  impl_->StoreResponse(key, response);
}

}  // namespace moe::router
