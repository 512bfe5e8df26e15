// The wire form of GetResponse (proto/moe/kv_store/v1/kv_store.proto), written and read without
// protobuf's copies, so that a block's bytes move once on each side: the server hands gRPC a
// slice over the block's buffer (a small slice of field headers before it), and the client
// copies each received fragment straight to its destination (a router's L1 pages).
//
// The bytes are exactly the protobuf encoding of GetResponse, so any protobuf client can parse
// them (the server test does). EncodeGetResponseBlock writes a KvBlock's fields in the order hash,
// checksum, tier, data; ParseGetResponse accepts any field order except a hash after the data
// (such a block is skipped), and checks each block's checksum while its bytes stream through.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/kv/block_hash.h"
#include "common/tensor/dtype.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace moe::kv_store {

// Appends one GetResponse.blocks entry: a header slice, then `data` itself (not copied).
// `tier`: proto Tier value.
void EncodeGetResponseBlock(const kv::BlockHash& hash, common::DType dtype,
                            std::span<const int64_t> dims, uint64_t checksum, int tier,
                            ::grpc::Slice data, std::vector<::grpc::Slice>* out);

// Receives the blocks of a GetResponse as ParseGetResponse walks it.
class WireBlockSink {
 public:
  virtual ~WireBlockSink() = default;
  // A block's data is next (its hash, dtype and dims are known; the checksum may not be yet).
  // `tier` is the proto Tier if it came before the data, else 0. Return false to skip it.
  virtual bool BeginBlock(const kv::BlockHash& hash, common::DType dtype,
                          std::span<const int64_t> dims, int64_t num_bytes, int tier) = 0;
  // Bytes [offset, offset + size) of the block's data. Called in order, covering it once.
  virtual void BlockData(int64_t offset, const uint8_t* data, size_t size) = 0;
  // The block accepted by BeginBlock ended; `intact` = its data matches its checksum.
  virtual void EndBlock(bool intact) = 0;
};

// Walks a serialized GetResponse. Errors: DATA_LOSS when the bytes are not a valid encoding
// (blocks already ended stay delivered).
absl::Status ParseGetResponse(const ::grpc::ByteBuffer& buffer, WireBlockSink& sink);

}  // namespace moe::kv_store
