// The kv-store's core (DESIGN.md §2, §3): content-addressed KV blocks in two tiers, and the
// routers' exact response cache. No gRPC: the server (kv_store_server.h) converts proto to these
// calls, and tests drive it directly.
//
// Tiers.
//   L2  host memory, `l2_bytes` of (compressed) payloads, one eviction policy.
//   L3  files under `l3_dir/blocks` (file_store.h), `l3_bytes`, its own policy; survives
//       restarts (the index is rebuilt from the directory at Create, oldest file = least
//       recently used).
// A Put stores a block in L2 and queues it for L3 (write-behind, bounded by
// l3_write_queue_bytes); when L2 evicts a block that is not on disk yet it is demoted (queued)
// then. A Get that finds a block only in L3 reads and checks the file and, with
// promote_on_l3_hit, copies it into L2. A block is in at least one tier until L3 evicts it.
//
// Integrity. A Put's checksum (XXH3-64 of the data) is checked on arrival; every L3 read checks
// the file's header and payload checksums and, once decoded, the data's checksum. A block that
// fails is dropped from the tier, its file deleted, moe_kv_corrupt_blocks_total counted, and it
// is a miss: never served. A crash mid-write leaves no partial file under a final name
// (file_store.h). L2 holds what was checked on Put.
//
// Lookups and the eviction policy. Lookup(chain) walks the chain: every block asked for is a
// prefix-cache query at L2 (the caller's L1 missed it), every L2 miss a query at L3, and the
// cached prefix is the longest run of blocks present in either tier. A lookup "reaches" every
// present entry it names: those in the cached prefix are hits, those after a gap (an orphan
// whose parent is gone, unusable) are misses; that is the hit rate the threshold policy judges.
// Get and Put do not count as lookups (Put refreshes recency).
//
// Fidelity. The store holds exact blocks (compression none/zstd) or, with `compression: int8`,
// lossy ones; requests state the fidelity they expect and a mismatch is FAILED_PRECONDITION (a
// router configured otherwise refuses the store; block_hash.h names the mode in the identity).
//
// Response cache. Opaque values under 16-byte keys, kept as files in `l3_dir/responses`
// (checksummed like blocks, LRU within response_cache_bytes).
//
// Thread-safety: every public method is thread-safe (gRPC threads call them at once); one mutex
// guards the indexes, and compression, decompression and file I/O run outside it. One writer
// thread (started by Create, joined by the destructor) does the L3 writes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/kv/block_hash.h"
#include "common/metrics/registry.h"
#include "common/tensor/dtype.h"
#include "services/kv-store/core/kv_store_metrics.h"
#include "services/kv-store/core/kv_store_options.h"

namespace moe::kv_store {

// Which blocks a store holds and a caller expects: exact ones, or the lossy int8 mode.
enum class Fidelity : uint8_t { kExact, kInt8 };
std::string_view FidelityName(Fidelity f);  // "exact" | "int8" (block_hash.h's kv= part)

// Shared bytes: a view into a buffer kept alive by whoever holds it (the server hands it to
// gRPC as a slice without copying).
struct Bytes {
  std::shared_ptr<const std::string> storage;
  size_t offset = 0;
  size_t size = 0;
  std::string_view view() const { return {storage->data() + offset, size}; }
};

// One block of a Put. `data` is moved in (kept as is when stored uncompressed).
struct PutBlock {
  kv::BlockHash hash;
  common::DType dtype = common::DType::kF32;
  std::vector<int64_t> dims;  // [num_layers, 2, block_size, num_kv_heads, head_dim]
  std::string data;           // product(dims) elements, little-endian
  uint64_t checksum = 0;      // XXH3-64 of data
};

struct PutResult {
  int32_t num_stored = 0;
  int32_t num_already_present = 0;
  int32_t num_declined = 0;  // larger than the whole L2
};

// One block a Get found.
struct GotBlock {
  kv::BlockHash hash;
  Tier tier = Tier::kNone;  // where it was found
  common::DType dtype = common::DType::kF32;
  std::vector<int64_t> dims;
  Bytes data;             // the decoded block, ready to send
  uint64_t checksum = 0;  // XXH3-64 of data
};

struct LookupResult {
  int32_t num_cached_blocks = 0;
  std::vector<Tier> tiers;  // [num_cached_blocks]: where each block of the prefix is
  int32_t num_in_l2() const;
};

struct TierStats {
  Tier tier = Tier::kNone;
  int64_t blocks_used = 0;
  int64_t bytes_used = 0;
  int64_t bytes_capacity = 0;
  uint64_t hits = 0;       // blocks served (Get) from this tier
  uint64_t misses = 0;     // blocks asked for (Get) and found in no tier (L2 entry only)
  uint64_t evictions = 0;  // L2: demotions; L3: blocks dropped
};

struct StoreStats {
  std::vector<TierStats> tiers;  // L2, then L3 when configured
  uint64_t corrupt_blocks_dropped = 0;
  int64_t l3_queue_bytes = 0;
  int64_t response_entries = 0;
  int64_t response_bytes = 0;
  uint64_t response_hits = 0;
  Fidelity fidelity = Fidelity::kExact;
  CompressionMode compression = CompressionMode::kZstd;
};

class KvStoreCore {
 public:
  // Opens L3 (indexing what is on disk) and starts the L3 writer. `registry` and `clock` are
  // borrowed and must outlive the core. Errors: INVALID_ARGUMENT (options), INTERNAL (cannot
  // create or list l3_dir).
  static absl::StatusOr<std::unique_ptr<KvStoreCore>> Create(const KvStoreCoreOptions& options,
                                                             common::metrics::Registry& registry,
                                                             common::Clock& clock);
  // Finishes the queued L3 writes, then joins the writer.
  ~KvStoreCore();
  KvStoreCore(const KvStoreCore&) = delete;
  KvStoreCore& operator=(const KvStoreCore&) = delete;

  Fidelity fidelity() const;
  // OK when a caller expecting `expected` may use this store; else FAILED_PRECONDITION naming
  // both settings.
  absl::Status CheckFidelity(Fidelity expected) const;

  // Stores `blocks` (idempotent per hash: a present block is refreshed, not rewritten).
  // INVALID_ARGUMENT, storing nothing, when any block is malformed: dims that do not match the
  // data size, more than 8 dims, data over max_block_bytes, a checksum that does not match.
  absl::StatusOr<PutResult> Put(std::vector<PutBlock> blocks);

  // The blocks of `hashes` that are present and intact, in request order (missing and corrupt
  // ones omitted); with `prefix_only`, stops at the first one missing.
  std::vector<GotBlock> Get(std::span<const kv::BlockHash> hashes, bool prefix_only);

  // The longest cached prefix of `chain` (root-most block first), with the tier of each block.
  LookupResult Lookup(std::span<const kv::BlockHash> chain);

  StoreStats Stats() const;

  // The response cache. PutResponse stores `value` under `key` (replacing it); declined
  // (returns false) without an L3 directory or when the value exceeds response_cache_bytes.
  // GetResponse returns the value when present and intact (a corrupt file is dropped and
  // counted).
  bool PutResponse(const kv::BlockHash& key, std::string_view value);
  std::optional<std::string> GetResponse(const kv::BlockHash& key);

  // Blocks until every L3 write queued so far is done (tests, benches; the destructor).
  void FlushL3();

  // The L3 file of block `hash` ("" without L3).
  std::string L3PathForTesting(const kv::BlockHash& hash) const;
  std::string ResponsePathForTesting(const kv::BlockHash& key) const;

 private:
  class Impl;  // indexes, policies, the writer thread (kv_store_core.cc)
  explicit KvStoreCore(std::unique_ptr<Impl> impl);
  const std::unique_ptr<Impl> impl_;
};

}  // namespace moe::kv_store
