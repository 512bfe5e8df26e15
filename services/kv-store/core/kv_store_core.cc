#include "services/kv-store/core/kv_store_core.h"

#include <xxhash.h>

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/check.h"
#include "common/base/log.h"
#include "common/base/status_macros.h"
#include "common/base/thread.h"
#include "services/kv-store/core/file_store.h"

namespace moe::kv_store {
namespace {

// Bookkeeping charged to L2 per entry besides its payload (map node, metadata).
constexpr int64_t kL2EntryOverhead = 256;

std::unique_ptr<kv::EvictionPolicy> MakePolicy(const KvStoreCoreOptions& o, common::Clock& clock) {
  if (o.eviction_policy == kv::EvictionPolicyKind::kThreshold) {
    return std::make_unique<kv::ThresholdEvictionPolicy>(o.threshold, clock);
  }
  return std::make_unique<kv::LruEvictionPolicy>();
}

// Dense slot ids for the policies, recycled.
class Slots {
 public:
  int32_t Take(const kv::BlockHash& key) {
    int32_t s;
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
      keys_[s] = key;
    } else {
      s = static_cast<int32_t>(keys_.size());
      keys_.push_back(key);
    }
    return s;
  }
  void Release(int32_t s) { free_.push_back(s); }
  const kv::BlockHash& key(int32_t s) const { return keys_[s]; }

 private:
  std::vector<kv::BlockHash> keys_;
  std::vector<int32_t> free_;
};

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

std::string_view FidelityName(Fidelity f) { return f == Fidelity::kInt8 ? "int8" : "exact"; }

int32_t LookupResult::num_in_l2() const {
  return static_cast<int32_t>(std::count(tiers.begin(), tiers.end(), Tier::kL2));
}

class KvStoreCore::Impl {
 public:
  Impl(const KvStoreCoreOptions& options, common::metrics::Registry& registry, common::Clock& clock)
      : options_(options),
        clock_(clock),
        metrics_(registry),
        codec_{.mode = options.compression,
               .zstd_level = options.zstd_level,
               .min_savings = options.min_savings},
        fidelity_(options.compression == CompressionMode::kInt8 ? Fidelity::kInt8
                                                                : Fidelity::kExact),
        l2_policy_(MakePolicy(options, clock)),
        l3_policy_(MakePolicy(options, clock)),
        responses_policy_(std::make_unique<kv::LruEvictionPolicy>()),
        next_sweep_(clock.Now() + options.sweep_interval) {}

  absl::Status Open();
  void StartWriter() {
    writer_ = std::thread([this] { WriterLoop(); });
  }
  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (writer_.joinable()) writer_.join();
  }

  Fidelity fidelity() const { return fidelity_; }
  absl::StatusOr<PutResult> Put(std::vector<PutBlock> blocks);
  std::vector<GotBlock> Get(std::span<const kv::BlockHash> hashes, bool prefix_only);
  LookupResult Lookup(std::span<const kv::BlockHash> chain);
  StoreStats Stats() const;
  bool PutResponse(const kv::BlockHash& key, std::string_view value);
  std::optional<std::string> GetResponse(const kv::BlockHash& key);
  void FlushL3();
  std::string L3Path(const kv::BlockHash& h) const {
    return blocks_ != nullptr ? blocks_->PathForTesting(h) : "";
  }
  std::string ResponsePath(const kv::BlockHash& h) const {
    return responses_ != nullptr ? responses_->PathForTesting(h) : "";
  }

 private:
  struct L2Entry {
    int32_t slot = -1;
    Codec codec = Codec::kRaw;
    common::DType dtype = common::DType::kF32;
    std::vector<int64_t> dims;
    Bytes payload;  // encoded (the raw bytes for kRaw)
    int64_t raw_bytes = 0;
    uint64_t raw_checksum = 0;
    int64_t charged = 0;
    bool persisted = false;  // queued for L3 or on disk: an eviction needs no demotion
  };
  struct L3Entry {
    int32_t slot = -1;
    int64_t file_bytes = 0;
  };
  struct ResponseEntry {
    int32_t slot = -1;
    int64_t file_bytes = 0;
  };
  struct WriteJob {
    kv::BlockHash hash;
    EntryMeta meta;
    Bytes payload;
  };

  EntryMeta MetaOf(const L2Entry& e) const {
    return {.codec = e.codec,
            .dtype = e.dtype,
            .dims = e.dims,
            .raw_bytes = e.raw_bytes,
            .raw_checksum = e.raw_checksum};
  }
  // Queues an L3 write of `e`; false when there is no L3 or the queue is full.
  bool EnqueueWrite(const kv::BlockHash& hash, const L2Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts into L2 (evicting as needed: demotions are queued). False when it cannot fit.
  bool InsertL2(const kv::BlockHash& hash, L2Entry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropL2(int32_t slot, kv::EvictionReason reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes block `hash` from the L3 index; its file goes to `unlink`.
  void DropL3(const kv::BlockHash& hash, std::vector<kv::BlockHash>* unlink)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictL3(std::vector<kv::BlockHash>* unlink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeSweep(std::vector<kv::BlockHash>* unlink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unlink(const std::vector<kv::BlockHash>& keys) ABSL_LOCKS_EXCLUDED(mu_);
  void PublishGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads block `hash` from L3 and checks it; drops and counts it when corrupt.
  std::optional<GotBlock> ReadL3(const kv::BlockHash& hash) ABSL_LOCKS_EXCLUDED(mu_);
  void DropCorrupt(const kv::BlockHash& hash, const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  void WriterLoop();

  // Constant after construction.
  const KvStoreCoreOptions options_;
  common::Clock& clock_;
  KvStoreMetrics metrics_;
  const CodecOptions codec_;
  CompressionBackoff backoff_;  // zstd tries that keep not paying (kv_codec.h)
  const Fidelity fidelity_;
  std::unique_ptr<FileStore> blocks_;     // null without L3
  std::unique_ptr<FileStore> responses_;  // null without L3
  std::thread writer_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<kv::BlockHash, L2Entry> l2_ ABSL_GUARDED_BY(mu_);
  Slots l2_slots_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<kv::EvictionPolicy> l2_policy_ ABSL_GUARDED_BY(mu_);
  int64_t l2_used_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<kv::BlockHash, L3Entry> l3_ ABSL_GUARDED_BY(mu_);
  Slots l3_slots_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<kv::EvictionPolicy> l3_policy_ ABSL_GUARDED_BY(mu_);
  int64_t l3_used_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<kv::BlockHash, ResponseEntry> responses_index_ ABSL_GUARDED_BY(mu_);
  Slots response_slots_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<kv::EvictionPolicy> responses_policy_ ABSL_GUARDED_BY(mu_);
  int64_t responses_used_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<WriteJob> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queue_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t writes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time next_sweep_ ABSL_GUARDED_BY(mu_);
  // Stats().
  uint64_t hits_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  uint64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evictions_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  uint64_t corrupt_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t response_hits_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status KvStoreCore::Impl::Open() {
  if (options_.l3_dir.empty()) return absl::OkStatus();
  std::vector<FoundEntry> found;
  ASSIGN_OR_RETURN(blocks_,
                   FileStore::Open(options_.l3_dir + "/blocks", FileStore::Kind::kBlocks, &found));
  std::sort(found.begin(), found.end(),
            [](const FoundEntry& a, const FoundEntry& b) { return a.mtime < b.mtime; });
  std::vector<FoundEntry> found_responses;
  ASSIGN_OR_RETURN(responses_, FileStore::Open(options_.l3_dir + "/responses",
                                               FileStore::Kind::kResponses, &found_responses));
  std::sort(found_responses.begin(), found_responses.end(),
            [](const FoundEntry& a, const FoundEntry& b) { return a.mtime < b.mtime; });
  std::vector<kv::BlockHash> unlink;
  {
    absl::MutexLock lock(&mu_);
    for (const FoundEntry& f : found) {
      const int32_t slot = l3_slots_.Take(f.key);
      l3_.emplace(f.key, L3Entry{slot, f.file_bytes});
      l3_policy_->Add(slot);
      l3_used_ += f.file_bytes;
    }
    EvictL3(&unlink);  // a smaller budget than last time
    for (const FoundEntry& f : found_responses) {
      const int32_t slot = response_slots_.Take(f.key);
      responses_index_.emplace(f.key, ResponseEntry{slot, f.file_bytes});
      responses_policy_->Add(slot);
      responses_used_ += f.file_bytes;
    }
    PublishGauges();
    MOE_LOG_INFO("kv-store: L3 {}: {} blocks ({} bytes), {} cached responses", options_.l3_dir,
                 l3_.size(), l3_used_, found_responses.size());
  }
  Unlink(unlink);
  return absl::OkStatus();
}

bool KvStoreCore::Impl::EnqueueWrite(const kv::BlockHash& hash, const L2Entry& e) {
  if (blocks_ == nullptr) return false;
  const int64_t bytes = static_cast<int64_t>(e.payload.size);
  if (queue_bytes_ + bytes > options_.l3_write_queue_bytes) return false;
  queue_.push_back(WriteJob{hash, MetaOf(e), e.payload});
  queue_bytes_ += bytes;
  return true;
}

void KvStoreCore::Impl::DropL2(int32_t slot, kv::EvictionReason reason) {
  const kv::BlockHash hash = l2_slots_.key(slot);
  auto it = l2_.find(hash);
  MOE_DCHECK(it != l2_.end());
  L2Entry& e = it->second;
  // Demotion: a block not yet persisted goes to L3 now (if the queue has room).
  if (!e.persisted && !l3_.contains(hash)) EnqueueWrite(hash, e);
  l2_used_ -= e.charged;
  l2_slots_.Release(slot);
  l2_.erase(it);
  ++evictions_[0];
  metrics_.Evictions(Tier::kL2, reason).Increment();
}

bool KvStoreCore::Impl::InsertL2(const kv::BlockHash& hash, L2Entry entry) {
  if (entry.charged > options_.l2_bytes) return false;
  while (l2_used_ + entry.charged > options_.l2_bytes && l2_policy_->Size() > 0) {
    const kv::Victim v = l2_policy_->EvictVictim();
    DropL2(v.block_id, v.reason);
  }
  entry.slot = l2_slots_.Take(hash);
  l2_policy_->Add(entry.slot);
  l2_used_ += entry.charged;
  l2_.emplace(hash, std::move(entry));
  return true;
}

void KvStoreCore::Impl::DropL3(const kv::BlockHash& hash, std::vector<kv::BlockHash>* unlink) {
  auto it = l3_.find(hash);
  if (it == l3_.end()) return;
  l3_policy_->Remove(it->second.slot);
  l3_slots_.Release(it->second.slot);
  l3_used_ -= it->second.file_bytes;
  l3_.erase(it);
  unlink->push_back(hash);
  // A copy in L2 must be demoted again if L2 evicts it.
  if (auto l2 = l2_.find(hash); l2 != l2_.end()) l2->second.persisted = false;
}

void KvStoreCore::Impl::EvictL3(std::vector<kv::BlockHash>* unlink) {
  while (l3_used_ > options_.l3_bytes && l3_policy_->Size() > 0) {
    const kv::Victim v = l3_policy_->EvictVictim();
    const kv::BlockHash hash = l3_slots_.key(v.block_id);
    // EvictVictim already released it from the policy: re-add so DropL3's Remove is balanced.
    l3_policy_->Add(v.block_id);
    DropL3(hash, unlink);
    ++evictions_[1];
    metrics_.Evictions(Tier::kL3, v.reason).Increment();
  }
}

void KvStoreCore::Impl::MaybeSweep(std::vector<kv::BlockHash>* unlink) {
  const absl::Time now = clock_.Now();
  if (now < next_sweep_) return;
  next_sweep_ = now + options_.sweep_interval;
  for (const kv::Victim& v : l2_policy_->TakeQualifying(1 << 20)) DropL2(v.block_id, v.reason);
  for (const kv::Victim& v : l3_policy_->TakeQualifying(1 << 20)) {
    l3_policy_->Add(v.block_id);
    DropL3(l3_slots_.key(v.block_id), unlink);
    ++evictions_[1];
    metrics_.Evictions(Tier::kL3, v.reason).Increment();
  }
}

void KvStoreCore::Impl::Unlink(const std::vector<kv::BlockHash>& keys) {
  for (const kv::BlockHash& k : keys) blocks_->Remove(k);
}

void KvStoreCore::Impl::PublishGauges() {
  metrics_.usage_ratio[0]->Set(options_.l2_bytes > 0 ? static_cast<double>(l2_used_) /
                                                           static_cast<double>(options_.l2_bytes)
                                                     : 0);
  metrics_.usage_ratio[1]->Set(blocks_ != nullptr && options_.l3_bytes > 0
                                   ? static_cast<double>(l3_used_) /
                                         static_cast<double>(options_.l3_bytes)
                                   : 0);
  metrics_.l3_queue_bytes.Set(static_cast<double>(queue_bytes_));
}

absl::StatusOr<PutResult> KvStoreCore::Impl::Put(std::vector<PutBlock> blocks) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    const PutBlock& b = blocks[i];
    if (b.dims.size() > static_cast<size_t>(kMaxDims)) {
      return absl::InvalidArgumentError(absl::StrCat("block ", i, ": more than 8 dims"));
    }
    const BlockLayout layout{b.dtype, b.dims};
    for (int64_t d : b.dims) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat("block ", i, ": negative dim"));
    }
    if (layout.num_bytes() != static_cast<int64_t>(b.data.size())) {
      return absl::InvalidArgumentError(absl::StrCat("block ", i, ": ", b.data.size(),
                                                     " bytes of data, its shape needs ",
                                                     layout.num_bytes()));
    }
    if (static_cast<int64_t>(b.data.size()) > options_.max_block_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("block ", i, ": ", b.data.size(),
                                                     " bytes, over max_block_bytes ",
                                                     options_.max_block_bytes));
    }
    if (XXH3_64bits(b.data.data(), b.data.size()) != b.checksum) {
      return absl::InvalidArgumentError(
          absl::StrCat("block ", i, " (", b.hash.ToHex(), "): checksum does not match its data"));
    }
  }
  PutResult result;
  // Which blocks are new (others are refreshed), then encode the new ones outside the lock.
  std::vector<bool> fresh(blocks.size(), false);
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < blocks.size(); ++i) {
      auto it = l2_.find(blocks[i].hash);
      if (it != l2_.end()) {
        l2_policy_->RecordLookup(it->second.slot, true);
        ++result.num_already_present;
      } else if (l3_.contains(blocks[i].hash)) {
        ++result.num_already_present;
      } else {
        fresh[i] = true;
      }
    }
  }
  std::vector<std::pair<kv::BlockHash, L2Entry>> encoded;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (!fresh[i]) continue;
    PutBlock& b = blocks[i];
    const absl::Time t0 = clock_.Now();
    const BlockLayout layout{b.dtype, b.dims};
    EncodedBlock enc = EncodeBlock(codec_, layout, b.data, &backoff_);
    if (enc.backed_off) metrics_.compression_skipped.Increment();
    L2Entry e;
    e.codec = enc.codec;
    e.dtype = b.dtype;
    e.dims = b.dims;
    e.raw_bytes = static_cast<int64_t>(b.data.size());
    e.raw_checksum = b.checksum;
    if (enc.codec == Codec::kInt8) {
      // What a Get will serve is the dequantized block: its checksum, computed once here.
      std::string decoded(b.data.size(), '\0');
      const absl::Status s =
          DecodeBlock(enc.codec, layout, enc.payload,
                      {reinterpret_cast<uint8_t*>(decoded.data()), decoded.size()});
      MOE_DCHECK(s.ok());
      e.raw_checksum = XXH3_64bits(decoded.data(), decoded.size());
    }
    auto storage = std::make_shared<const std::string>(
        enc.codec == Codec::kRaw ? std::move(b.data) : std::move(enc.payload));
    e.payload = Bytes{storage, 0, storage->size()};
    e.charged = static_cast<int64_t>(storage->size()) + kL2EntryOverhead;
    metrics_.put_seconds[0]->Observe(Seconds(clock_.Now() - t0));
    metrics_.bytes_put[0]->Increment(static_cast<double>(storage->size()));
    encoded.emplace_back(b.hash, std::move(e));
  }
  std::vector<kv::BlockHash> unlink;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [hash, e] : encoded) {
      if (l2_.contains(hash) || l3_.contains(hash)) {  // a concurrent Put won
        ++result.num_already_present;
        continue;
      }
      e.persisted = EnqueueWrite(hash, e);
      if (!InsertL2(hash, std::move(e))) {
        ++result.num_declined;
        metrics_.put_declined.Increment();
        continue;
      }
      ++result.num_stored;
    }
    MaybeSweep(&unlink);
    PublishGauges();
  }
  Unlink(unlink);
  return result;
}

void KvStoreCore::Impl::DropCorrupt(const kv::BlockHash& hash, const absl::Status& why) {
  MOE_LOG_WARN("kv-store: dropping block {}: {}", hash.ToHex(), why.ToString());
  std::vector<kv::BlockHash> unlink;
  {
    absl::MutexLock lock(&mu_);
    DropL3(hash, &unlink);
    ++corrupt_;
    PublishGauges();
  }
  metrics_.corrupt_blocks.Increment();
  if (unlink.empty()) blocks_->Remove(hash);  // not indexed (raced with an eviction): still go
  Unlink(unlink);
}

std::optional<GotBlock> KvStoreCore::Impl::ReadL3(const kv::BlockHash& hash) {
  const absl::Time t0 = clock_.Now();
  absl::StatusOr<ReadEntry> read = blocks_->Read(hash);
  if (!read.ok()) {
    if (absl::IsDataLoss(read.status())) {
      DropCorrupt(hash, read.status());
    } else {
      // Gone (evicted meanwhile) or unreadable: forget it.
      std::vector<kv::BlockHash> unlink;
      absl::MutexLock lock(&mu_);
      DropL3(hash, &unlink);
    }
    return std::nullopt;
  }
  const BlockLayout layout{read->meta.dtype, read->meta.dims};
  GotBlock got;
  got.hash = hash;
  got.tier = Tier::kL3;
  got.dtype = read->meta.dtype;
  got.dims = read->meta.dims;
  got.checksum = read->meta.raw_checksum;
  if (layout.num_bytes() != read->meta.raw_bytes) {
    DropCorrupt(hash, absl::DataLossError("dims do not match the size"));
    return std::nullopt;
  }
  if (read->meta.codec == Codec::kRaw) {
    got.data = Bytes{read->file, read->payload_offset, read->payload_bytes};
  } else {
    auto decoded = std::make_shared<std::string>(static_cast<size_t>(read->meta.raw_bytes), '\0');
    absl::Status s = DecodeBlock(read->meta.codec, layout, read->payload(),
                                 {reinterpret_cast<uint8_t*>(decoded->data()), decoded->size()});
    if (!s.ok()) {
      DropCorrupt(hash, s);
      return std::nullopt;
    }
    got.data = Bytes{std::move(decoded), 0, static_cast<size_t>(read->meta.raw_bytes)};
  }
  if (XXH3_64bits(got.data.view().data(), got.data.size) != got.checksum) {
    DropCorrupt(hash, absl::DataLossError("decoded data does not match its checksum"));
    return std::nullopt;
  }
  metrics_.get_seconds[1]->Observe(Seconds(clock_.Now() - t0));
  metrics_.bytes_get[1]->Increment(static_cast<double>(got.data.size));
  if (options_.promote_on_l3_hit) {
    L2Entry e;
    e.codec = read->meta.codec;
    e.dtype = read->meta.dtype;
    e.dims = read->meta.dims;
    e.raw_bytes = read->meta.raw_bytes;
    e.raw_checksum = read->meta.raw_checksum;
    // A raw block shares the buffer it is served from; an encoded one keeps the file's bytes.
    e.payload = read->meta.codec == Codec::kRaw
                    ? got.data
                    : Bytes{read->file, read->payload_offset, read->payload_bytes};
    e.charged = static_cast<int64_t>(read->file->size()) + kL2EntryOverhead;
    e.persisted = true;
    absl::MutexLock lock(&mu_);
    if (!l2_.contains(hash) && l3_.contains(hash)) InsertL2(hash, std::move(e));
    PublishGauges();
  }
  return got;
}

std::vector<GotBlock> KvStoreCore::Impl::Get(std::span<const kv::BlockHash> hashes,
                                             bool prefix_only) {
  std::vector<GotBlock> out;
  out.reserve(hashes.size());
  for (const kv::BlockHash& hash : hashes) {
    std::optional<L2Entry> l2;
    bool in_l3 = false;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = l2_.find(hash); it != l2_.end()) {
        l2 = it->second;  // shares the payload
        ++hits_[0];
      } else {
        in_l3 = l3_.contains(hash);
      }
    }
    if (l2.has_value()) {
      const absl::Time t0 = clock_.Now();
      GotBlock got{.hash = hash,
                   .tier = Tier::kL2,
                   .dtype = l2->dtype,
                   .dims = l2->dims,
                   .checksum = l2->raw_checksum};
      if (l2->codec == Codec::kRaw) {
        got.data = l2->payload;  // sent from L2's own memory
      } else {
        auto decoded = std::make_shared<std::string>(static_cast<size_t>(l2->raw_bytes), '\0');
        const absl::Status s =
            DecodeBlock(l2->codec, BlockLayout{l2->dtype, l2->dims}, l2->payload.view(),
                        {reinterpret_cast<uint8_t*>(decoded->data()), decoded->size()});
        // L2 holds what was encoded here from checked data: a failure is a bug.
        MOE_DCHECK(s.ok());
        got.data = Bytes{std::move(decoded), 0, static_cast<size_t>(l2->raw_bytes)};
      }
      metrics_.get_seconds[0]->Observe(Seconds(clock_.Now() - t0));
      metrics_.bytes_get[0]->Increment(static_cast<double>(got.data.size));
      out.push_back(std::move(got));
      continue;
    }
    if (in_l3) {
      std::optional<GotBlock> got = ReadL3(hash);
      if (got.has_value()) {
        absl::MutexLock lock(&mu_);
        ++hits_[1];
        out.push_back(std::move(*got));
        continue;
      }
    }
    {
      absl::MutexLock lock(&mu_);
      ++misses_;
    }
    if (prefix_only) break;
  }
  return out;
}

LookupResult KvStoreCore::Impl::Lookup(std::span<const kv::BlockHash> chain) {
  LookupResult out;
  std::vector<kv::BlockHash> unlink;
  int64_t l2_hits = 0, l3_hits = 0;
  {
    absl::MutexLock lock(&mu_);
    bool in_prefix = true;
    for (const kv::BlockHash& hash : chain) {
      auto l2 = l2_.find(hash);
      auto l3 = l3_.find(hash);
      const Tier tier = l2 != l2_.end() ? Tier::kL2 : l3 != l3_.end() ? Tier::kL3 : Tier::kNone;
      if (tier == Tier::kNone) in_prefix = false;
      // Every present entry the lookup names is reached: a hit inside the prefix, a miss after.
      if (l2 != l2_.end()) l2_policy_->RecordLookup(l2->second.slot, in_prefix);
      if (l3 != l3_.end()) l3_policy_->RecordLookup(l3->second.slot, in_prefix);
      if (!in_prefix) continue;
      out.tiers.push_back(tier);
      (tier == Tier::kL2 ? l2_hits : l3_hits) += 1;
    }
    out.num_cached_blocks = static_cast<int32_t>(out.tiers.size());
    MaybeSweep(&unlink);
    PublishGauges();
  }
  Unlink(unlink);
  const int64_t n = static_cast<int64_t>(chain.size());
  metrics_.queries[0]->Increment(static_cast<double>(n));
  metrics_.hits[0]->Increment(static_cast<double>(l2_hits));
  if (blocks_ != nullptr) {
    metrics_.queries[1]->Increment(static_cast<double>(n - l2_hits));
    metrics_.hits[1]->Increment(static_cast<double>(l3_hits));
  }
  return out;
}

StoreStats KvStoreCore::Impl::Stats() const {
  absl::MutexLock lock(&mu_);
  StoreStats s;
  s.tiers.push_back({.tier = Tier::kL2,
                     .blocks_used = static_cast<int64_t>(l2_.size()),
                     .bytes_used = l2_used_,
                     .bytes_capacity = options_.l2_bytes,
                     .hits = hits_[0],
                     .misses = misses_,
                     .evictions = evictions_[0]});
  if (blocks_ != nullptr) {
    s.tiers.push_back({.tier = Tier::kL3,
                       .blocks_used = static_cast<int64_t>(l3_.size()),
                       .bytes_used = l3_used_,
                       .bytes_capacity = options_.l3_bytes,
                       .hits = hits_[1],
                       .evictions = evictions_[1]});
  }
  s.corrupt_blocks_dropped = corrupt_;
  s.l3_queue_bytes = queue_bytes_;
  s.response_entries = static_cast<int64_t>(responses_index_.size());
  s.response_bytes = responses_used_;
  s.response_hits = response_hits_;
  s.fidelity = fidelity_;
  s.compression = options_.compression;
  return s;
}

bool KvStoreCore::Impl::PutResponse(const kv::BlockHash& key, std::string_view value) {
  if (responses_ == nullptr) return false;
  if (static_cast<int64_t>(value.size()) + kFileHeaderBytes > options_.response_cache_bytes) {
    return false;
  }
  EntryMeta meta{.codec = Codec::kRaw,
                 .dtype = common::DType::kF32,
                 .dims = {},
                 .raw_bytes = static_cast<int64_t>(value.size()),
                 .raw_checksum = XXH3_64bits(value.data(), value.size())};
  absl::StatusOr<int64_t> written = responses_->Write(key, meta, value);
  if (!written.ok()) {
    MOE_LOG_WARN("kv-store: response {}: {}", key.ToHex(), written.status().ToString());
    return false;
  }
  std::vector<kv::BlockHash> unlink;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = responses_index_.find(key); it != responses_index_.end()) {
      responses_used_ -= it->second.file_bytes;
      it->second.file_bytes = *written;
      responses_policy_->RecordLookup(it->second.slot, true);
    } else {
      const int32_t slot = response_slots_.Take(key);
      responses_index_.emplace(key, ResponseEntry{slot, *written});
      responses_policy_->Add(slot);
    }
    responses_used_ += *written;
    while (responses_used_ > options_.response_cache_bytes && responses_policy_->Size() > 1) {
      const int32_t slot = responses_policy_->Evict();
      const kv::BlockHash victim = response_slots_.key(slot);
      responses_used_ -= responses_index_[victim].file_bytes;
      responses_index_.erase(victim);
      response_slots_.Release(slot);
      unlink.push_back(victim);
    }
  }
  for (const kv::BlockHash& k : unlink) responses_->Remove(k);
  return true;
}

std::optional<std::string> KvStoreCore::Impl::GetResponse(const kv::BlockHash& key) {
  if (responses_ == nullptr) return std::nullopt;
  metrics_.response_cache_queries.Increment();
  {
    absl::MutexLock lock(&mu_);
    auto it = responses_index_.find(key);
    if (it == responses_index_.end()) return std::nullopt;
    responses_policy_->RecordLookup(it->second.slot, true);
  }
  absl::StatusOr<ReadEntry> read = responses_->Read(key);
  if (read.ok() &&
      XXH3_64bits(read->payload().data(), read->payload_bytes) != read->meta.raw_checksum) {
    read = absl::DataLossError("value does not match its checksum");
  }
  if (!read.ok()) {
    absl::MutexLock lock(&mu_);
    if (auto it = responses_index_.find(key); it != responses_index_.end()) {
      responses_policy_->Remove(it->second.slot);
      response_slots_.Release(it->second.slot);
      responses_used_ -= it->second.file_bytes;
      responses_index_.erase(it);
    }
    if (absl::IsDataLoss(read.status())) {
      MOE_LOG_WARN("kv-store: dropping response {}: {}", key.ToHex(), read.status().ToString());
      ++corrupt_;
      metrics_.corrupt_blocks.Increment();
      responses_->Remove(key);
    }
    return std::nullopt;
  }
  {
    absl::MutexLock lock(&mu_);
    ++response_hits_;
  }
  metrics_.response_cache_hits.Increment();
  return std::string(read->payload());
}

void KvStoreCore::Impl::FlushL3() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Impl* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->queue_.empty() && self->writes_in_flight_ == 0;
      },
      this));
}

void KvStoreCore::Impl::WriterLoop() {
  // Write-behind: the disk tier yields the cores to the engines sharing this host (Gets never
  // wait for this thread; a full queue drops L3 copies, counted).
  common::BecomeBackgroundThread("kv-l3-writer");
  for (;;) {
    WriteJob job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Impl* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return !self->queue_.empty() || self->stopping_;
          },
          this));
      // Stopping still writes what is queued (a SIGTERM keeps L2's recent blocks on disk).
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      ++writes_in_flight_;
    }
    const absl::Time t0 = clock_.Now();
    absl::StatusOr<int64_t> written = blocks_->Write(job.hash, job.meta, job.payload.view());
    const absl::Duration took = clock_.Now() - t0;
    std::vector<kv::BlockHash> unlink;
    if (written.ok()) {
      metrics_.put_seconds[1]->Observe(Seconds(took));
      metrics_.bytes_put[1]->Increment(static_cast<double>(*written));
    }
    {
      absl::MutexLock lock(&mu_);
      --writes_in_flight_;
      queue_bytes_ -= static_cast<int64_t>(job.payload.size);
      if (!written.ok()) {
        MOE_LOG_WARN("kv-store: L3 write of {}: {}", job.hash.ToHex(), written.status().ToString());
        if (auto l2 = l2_.find(job.hash); l2 != l2_.end()) l2->second.persisted = false;
      } else {
        if (auto it = l3_.find(job.hash); it != l3_.end()) {
          l3_used_ += *written - it->second.file_bytes;
          it->second.file_bytes = *written;
        } else {
          const int32_t slot = l3_slots_.Take(job.hash);
          l3_.emplace(job.hash, L3Entry{slot, *written});
          l3_policy_->Add(slot);
          l3_used_ += *written;
        }
        EvictL3(&unlink);
      }
      PublishGauges();
    }
    Unlink(unlink);
  }
}

// ---------------------------------------------------------------------------------------------
// KvStoreCore: the contract of kv_store_core.h, forwarded.

absl::StatusOr<std::unique_ptr<KvStoreCore>> KvStoreCore::Create(
    const KvStoreCoreOptions& options, common::metrics::Registry& registry, common::Clock& clock) {
  RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>(options, registry, clock);
  RETURN_IF_ERROR(impl->Open());
  impl->StartWriter();
  return std::unique_ptr<KvStoreCore>(new KvStoreCore(std::move(impl)));
}

KvStoreCore::KvStoreCore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvStoreCore::~KvStoreCore() = default;

Fidelity KvStoreCore::fidelity() const { return impl_->fidelity(); }

absl::Status KvStoreCore::CheckFidelity(Fidelity expected) const {
  if (expected == impl_->fidelity()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "kv-store holds ", std::string(FidelityName(impl_->fidelity())), " blocks (core.compression ",
      impl_->fidelity() == Fidelity::kInt8 ? "int8" : "none|zstd", "); the caller expects ",
      std::string(FidelityName(expected)),
      " (router kv_store.lossy_int8 must match: a cluster-wide setting)"));
}

absl::StatusOr<PutResult> KvStoreCore::Put(std::vector<PutBlock> blocks) {
  return impl_->Put(std::move(blocks));
}
std::vector<GotBlock> KvStoreCore::Get(std::span<const kv::BlockHash> hashes, bool prefix_only) {
  return impl_->Get(hashes, prefix_only);
}
LookupResult KvStoreCore::Lookup(std::span<const kv::BlockHash> chain) {
  return impl_->Lookup(chain);
}
StoreStats KvStoreCore::Stats() const { return impl_->Stats(); }
bool KvStoreCore::PutResponse(const kv::BlockHash& key, std::string_view value) {
  return impl_->PutResponse(key, value);
}
std::optional<std::string> KvStoreCore::GetResponse(const kv::BlockHash& key) {
  return impl_->GetResponse(key);
}
void KvStoreCore::FlushL3() { impl_->FlushL3(); }
std::string KvStoreCore::L3PathForTesting(const kv::BlockHash& hash) const {
  return impl_->L3Path(hash);
}
std::string KvStoreCore::ResponsePathForTesting(const kv::BlockHash& key) const {
  return impl_->ResponsePath(key);
}

}  // namespace moe::kv_store
