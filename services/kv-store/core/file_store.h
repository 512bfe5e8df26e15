// The L3 tier's storage: one checksummed file per entry in a directory, named by its 16-byte key.
// Used twice by the kv-store core: KV blocks (`<dir>/blocks`) and cached responses
// (`<dir>/responses`).
//
// Layout: <dir>/<first 2 hex digits of the key>/<32 hex digits>.<ext>, written as
// <name>.tmp.<unique> and renamed into place, so a crash (kill -9) mid-write leaves at most a
// temporary file (removed at the next Open) and never a partial entry under a final name. Files
// are not fsynced: a power loss may leave a torn file, which the checksums catch on read.
//
// File format (little-endian), a 152-byte header then the payload:
//   0   magic[8]          "MOEKVB\1\0" (blocks) / "MOERSP\1\0" (responses)
//   8   u32 header_bytes  152
//   12  u32 codec         kv_codec.h Codec
//   16  key[16]           canonical bytes (block_hash.h)
//   32  u32 dtype         common::DType
//   36  u32 num_dims      <= 8
//   40  i64 dims[8]
//   104 u64 raw_bytes     size once decoded
//   112 u64 payload_bytes
//   120 u64 raw_checksum      XXH3-64 of the decoded bytes (what Get serves)
//   128 u64 payload_checksum  XXH3-64 of the payload as stored
//   136 u64 reserved (0)
//   144 u64 header_checksum   XXH3-64 of bytes [0, 144)
// Every read checks the header checksum, the key, the sizes and the payload checksum; a file that
// fails any is reported as DATA_LOSS (the caller drops and counts it).
//
// Thread-safety: Write, Read and Remove are safe to call concurrently (for different keys; the
// caller serialises work on one key); Open once, before any of them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/kv/block_hash.h"
#include "common/tensor/dtype.h"
#include "services/kv-store/core/kv_codec.h"

namespace moe::kv_store {

inline constexpr int kMaxDims = 8;
inline constexpr int64_t kFileHeaderBytes = 152;

// The metadata of one entry (the header minus what is derived).
struct EntryMeta {
  Codec codec = Codec::kRaw;
  common::DType dtype = common::DType::kF32;
  std::vector<int64_t> dims;  // <= kMaxDims
  int64_t raw_bytes = 0;
  uint64_t raw_checksum = 0;
};

// A file found by Open: its key, size and modification time (the LRU order after a restart).
struct FoundEntry {
  kv::BlockHash key;
  int64_t file_bytes = 0;
  absl::Time mtime;
};

// What Read returns: the whole file in one buffer, and where the payload is in it.
struct ReadEntry {
  EntryMeta meta;
  std::shared_ptr<const std::string> file;  // header + payload
  size_t payload_offset = 0;
  size_t payload_bytes = 0;
  std::string_view payload() const { return {file->data() + payload_offset, payload_bytes}; }
};

class FileStore {
 public:
  enum class Kind { kBlocks, kResponses };

  // Creates `dir` (and parents) if needed, removes temporary files a crash left, and lists the
  // entries (files with a valid name; their contents are checked on read). Errors: INTERNAL
  // (cannot create or list the directory).
  static absl::StatusOr<std::unique_ptr<FileStore>> Open(const std::string& dir, Kind kind,
                                                         std::vector<FoundEntry>* found);

  // Writes the entry (replacing any file of that key). Returns the file's size. Errors:
  // INTERNAL (write failed: disk full, I/O error), nothing left behind.
  absl::StatusOr<int64_t> Write(const kv::BlockHash& key, const EntryMeta& meta,
                                std::string_view payload);
  // Reads and checks the entry. Errors: NOT_FOUND (no file), DATA_LOSS (corrupt: any check
  // failed), INTERNAL (read error).
  absl::StatusOr<ReadEntry> Read(const kv::BlockHash& key) const;
  // Deletes the entry's file (a missing file is fine).
  void Remove(const kv::BlockHash& key);

  // The file of `key` (tests corrupt it).
  std::string PathForTesting(const kv::BlockHash& key) const { return PathOf(key); }
  const std::string& dir() const { return dir_; }

 private:
  FileStore(std::string dir, Kind kind) : dir_(std::move(dir)), kind_(kind) {}
  std::string PathOf(const kv::BlockHash& key) const;
  std::string_view ext() const { return kind_ == Kind::kBlocks ? ".blk" : ".rsp"; }

  const std::string dir_;
  const Kind kind_;
};

}  // namespace moe::kv_store
