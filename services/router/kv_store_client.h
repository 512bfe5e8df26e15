// The router's KvTier over the kv-store service (proto/moe/kv_store/v1): the scheduler's fetches,
// stores and response-cache lookups as gRPC calls, with the failure semantics of kv_tier.h.
//
// Fetch: one Lookup per sequence, all at once; then the found prefix as Gets of at most
// max_call_bytes each (under gRPC's default 4 MiB), all at once; each Get response is walked
// with kv_block_wire.h as it arrives and its blocks' bytes are copied straight from gRPC's
// buffers into L1 (one copy), checksums checked on the way. Everything shares one deadline,
// the scheduler's timeout after the call (fetch_timeout or longer, scheduler.h): what arrived
// intact by then is used, the rest is cancelled. The scheduler calls Fetch on its fetch threads
// (kv_fetcher.h), several at once; no engine step waits for it. Blocks still in this client's store
// queue (a preempted sequence coming back soon) are copied from there. Store: blocks are copied
// once into a queue bounded by put_queue_bytes (full: dropped and counted) and sent by a worker
// thread in Puts of at most max_call_bytes, once the engine has been idle for put_idle_delay
// (SetEngineBusy; at most put_max_delay after queueing): the write-behind yields to requests.
// The workers run at background priority (common/base/thread.h). Replicas: each sequence's blocks
// live on one target, chosen by rendezvous hashing of its first block (kv_tier.h
// KvFetch::shard_key), so a chain is never split. Failures: a target whose channel is in
// TRANSIENT_FAILURE is skipped at once (misses, dropped stores); gRPC reconnects by itself (backoff
// channel.initial_reconnect_backoff .. max_reconnect_backoff) and hits resume. A target that
// answers FAILED_PRECONDITION (it holds another KV fidelity: kv_store.lossy_int8 differs from its
// core.compression) is refused for good, with one error log.
//
// Thread-safety: thread-safe (Fetch from several fetch threads at once, Store from the stepping
// thread, the response cache from any); put_parallelism worker threads, joined by the destructor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/config/schema.h"
#include "common/grpc/channel_factory.h"
#include "common/metrics/registry.h"
#include "services/router/core/kv_tier.h"

namespace moe::router {

struct KvStoreClientOptions {
  // kv-store replicas ("host:port"); empty = no kv-store (the router uses L1 only).
  std::vector<std::string> targets;
  // The least time one sequence's fetch (Lookup + Get) is given: the scheduler's per-sequence
  // deadline is this, or twice the estimated prefill time of the tokens asked for when that is
  // longer (at most 10 s; scheduler.h). Only that sequence waits for it, never a step.
  absl::Duration fetch_timeout = absl::Milliseconds(200);
  // Deadline of one Put (the store queue's worker; a step never waits for it).
  absl::Duration put_timeout = absl::Seconds(2);
  // Bytes of blocks queued for storage; beyond, blocks are dropped (counted).
  int64_t put_queue_bytes = 128ll << 20;
  // Largest Get or Put message, bytes: under gRPC's default 4 MiB receive limit.
  int64_t max_call_bytes = 3670016;  // 3.5 MiB
  // Puts in flight at once (one worker thread each).
  int32_t put_parallelism = 2;
  // The write-behind yields to requests: queued blocks are sent once the engine has had no
  // sequence for this long (a follow-up request that comes right after a response, the common
  // chat turn, then runs without the Puts' CPU: on a 2-core host they took ~1/3 of it, and the
  // warm TTFT of a 2k-token prefix from ~6.6 to ~10 ms). 0 = send at once.
  absl::Duration put_idle_delay = absl::Milliseconds(50);
  // ... but a block waits at most this long for an idle engine (sustained load).
  absl::Duration put_max_delay = absl::Seconds(2);
  // The opt-in lossy int8 KV mode (the store's core.compression: int8). Cluster-wide: it
  // changes outputs and the KV block identity, and a store in the other mode is refused.
  bool lossy_int8 = false;
  // The exact response cache (off by default): deterministic requests are answered from it.
  bool response_cache = false;
  // How long Submit may wait for a response-cache lookup.
  absl::Duration response_timeout = absl::Milliseconds(50);
  common::rpc::ChannelOptions channel;

  static void Describe(common::config::Schema<KvStoreClientOptions>& s) {
    s.Add("targets", &KvStoreClientOptions::targets, "kv-store addresses; empty = none");
    s.Add("fetch_timeout", &KvStoreClientOptions::fetch_timeout,
          "least time one sequence waits for its prefix from the kv-store")
        .Range(absl::Milliseconds(1), absl::Seconds(10));
    s.Add("put_timeout", &KvStoreClientOptions::put_timeout, "deadline of one Put")
        .Range(absl::Milliseconds(1), absl::Minutes(1));
    s.Add("put_queue_bytes", &KvStoreClientOptions::put_queue_bytes,
          "blocks queued for storage, bytes; beyond: dropped")
        .Min(0);
    s.Add("max_call_bytes", &KvStoreClientOptions::max_call_bytes, "largest Get or Put, bytes")
        .Range(1 << 16, 1 << 30);
    s.Add("put_parallelism", &KvStoreClientOptions::put_parallelism, "Puts in flight at once")
        .Range(1, 16);
    s.Add("put_idle_delay", &KvStoreClientOptions::put_idle_delay,
          "Puts wait until the engine has been idle this long; 0 = at once")
        .Range(absl::ZeroDuration(), absl::Minutes(1));
    s.Add("put_max_delay", &KvStoreClientOptions::put_max_delay,
          "longest a block waits for an idle engine")
        .Range(absl::ZeroDuration(), absl::Minutes(10));
    s.Add("lossy_int8", &KvStoreClientOptions::lossy_int8,
          "opt-in lossy int8 KV in the store (cluster-wide; changes outputs)");
    s.Add("response_cache", &KvStoreClientOptions::response_cache,
          "exact response cache for deterministic requests");
    s.Add("response_timeout", &KvStoreClientOptions::response_timeout,
          "longest a response-cache lookup waits")
        .Range(absl::Milliseconds(1), absl::Seconds(10));
    s.Section("channel", &KvStoreClientOptions::channel);
  }
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

class KvStoreClient final : public KvTier {
 public:
  // `block_dims`: [num_layers, 2, block_size, num_kv_heads, head_dim] of the router's KV (f32).
  // `registry` and `clock` are borrowed and must outlive the client. Errors: INVALID_ARGUMENT
  // (options, no targets, bad dims), the channel factory's (TLS files).
  static absl::StatusOr<std::unique_ptr<KvStoreClient>> Create(const KvStoreClientOptions& options,
                                                               std::vector<int64_t> block_dims,
                                                               common::metrics::Registry& registry,
                                                               common::Clock& clock);
  // Stops the worker (what is still queued is dropped).
  ~KvStoreClient() override;
  KvStoreClient(const KvStoreClient&) = delete;
  KvStoreClient& operator=(const KvStoreClient&) = delete;

  // Waits until every store queued so far has been sent (or dropped), up to `timeout`; false on
  // timeout. For tests and benches.
  bool Flush(absl::Duration timeout);

  // KvTier
  bool enabled() const override { return true; }
  std::string_view fidelity() const override;
  int64_t block_bytes() const override;
  absl::Duration fetch_timeout() const override;
  void Fetch(std::span<KvFetch> fetches, KvBlockWriter& writer, absl::Duration timeout) override;
  int64_t Store(const kv::BlockHash& shard_key, std::span<const kv::BlockHash> hashes,
                absl::FunctionRef<void(size_t, std::span<uint8_t>)> read) override;
  bool response_cache_enabled() const override;
  std::optional<CachedResponse> LookupResponse(const kv::BlockHash& key) override;
  void StoreResponse(const kv::BlockHash& key, const CachedResponse& response) override;
  void SetEngineBusy(bool busy) override;

 private:
  class Impl;  // targets, the store queue and its worker (kv_store_client.cc)
  explicit KvStoreClient(std::unique_ptr<Impl> impl);
  const std::unique_ptr<Impl> impl_;
};

}  // namespace moe::router
