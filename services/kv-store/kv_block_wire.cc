#include "services/kv-store/kv_block_wire.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

namespace moe::kv_store {
namespace {

// proto moe.common.v1.DType numbers.
int ProtoDType(common::DType t) {
  switch (t) {
    case common::DType::kF32:
      return 1;
    case common::DType::kBF16:
      return 2;
    case common::DType::kF16:
      return 3;
    case common::DType::kQ8_0:  // weights only, never K/V
      break;
  }
  return 0;
}

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// A cursor over the slices of a ByteBuffer.
class Reader {
 public:
  explicit Reader(std::vector<::grpc::Slice> slices) : slices_(std::move(slices)) {
    for (const auto& s : slices_) size_ += s.size();
  }
  size_t pos() const { return pos_; }
  size_t size() const { return size_; }
  bool ReadByte(uint8_t* b) {
    while (idx_ < slices_.size() && off_ == slices_[idx_].size()) {
      ++idx_;
      off_ = 0;
    }
    if (idx_ == slices_.size()) return false;
    *b = slices_[idx_].begin()[off_++];
    ++pos_;
    return true;
  }
  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Hands the next `n` bytes to fn(ptr, len) fragment by fragment.
  template <typename F>
  bool Visit(size_t n, F&& fn) {
    if (size_ - pos_ < n) return false;
    while (n > 0) {
      while (off_ == slices_[idx_].size()) {
        ++idx_;
        off_ = 0;
      }
      const size_t take = std::min(n, slices_[idx_].size() - off_);
      fn(slices_[idx_].begin() + off_, take);
      off_ += take;
      pos_ += take;
      n -= take;
    }
    return true;
  }
  bool Skip(size_t n) {
    return Visit(n, [](const uint8_t*, size_t) {});
  }
  bool SkipField(uint64_t wire_type) {
    uint64_t v;
    switch (wire_type) {
      case 0:
        return ReadVarint(&v);
      case 1:
        return Skip(8);
      case 2:
        return ReadVarint(&v) && Skip(v);
      case 5:
        return Skip(4);
      default:
        return false;
    }
  }

 private:
  std::vector<::grpc::Slice> slices_;
  size_t idx_ = 0, off_ = 0, pos_ = 0, size_ = 0;
};

struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

// Parses one KvBlock occupying the next `len` bytes.
bool ParseBlock(Reader& r, size_t len, WireBlockSink& sink, XXH3_state_t* state) {
  const size_t end = r.pos() + len;
  bool have_hash = false, have_checksum = false, began = false, data_done = false;
  kv::BlockHash hash;
  uint64_t checksum = 0, tier = 0, data_hash = 0;
  // Every failure after BeginBlock ends that block (not intact), so the sink never sees two
  // blocks open at once (kv_store_wire_fuzzer).
  auto fail = [&] {
    if (began) sink.EndBlock(false);
    began = false;
    return false;
  };
  while (r.pos() < end) {
    uint64_t tag;
    if (!r.ReadVarint(&tag)) return fail();
    const uint64_t field = tag >> 3, wt = tag & 7;
    if (field == 1 && wt == 2) {  // hash
      uint64_t n;
      if (!r.ReadVarint(&n) || n != 16) return fail();
      uint8_t b[16];
      size_t k = 0;
      r.Visit(16, [&](const uint8_t* p, size_t m) {
        std::memcpy(b + k, p, m);
        k += m;
      });
      for (int i = 0; i < 8; ++i) hash.hi = (hash.hi << 8) | b[i];
      for (int i = 8; i < 16; ++i) hash.lo = (hash.lo << 8) | b[i];
      have_hash = true;
    } else if (field == 3 && wt == 0) {
      if (!r.ReadVarint(&checksum)) return fail();
      have_checksum = true;
    } else if (field == 4 && wt == 0) {
      if (!r.ReadVarint(&tier)) return fail();
    } else if (field == 2 && wt == 2) {  // Tensor
      uint64_t tlen;
      if (!r.ReadVarint(&tlen)) return fail();
      const size_t tend = r.pos() + tlen;
      uint64_t dtype = 0;
      std::vector<int64_t> dims;
      while (r.pos() < tend) {
        uint64_t ttag;
        if (!r.ReadVarint(&ttag)) return fail();
        const uint64_t tf = ttag >> 3, twt = ttag & 7;
        if (tf == 1 && twt == 0) {
          if (!r.ReadVarint(&dtype)) return fail();
        } else if (tf == 2 && twt == 2) {  // packed shape
          uint64_t n;
          if (!r.ReadVarint(&n)) return fail();
          const size_t send = r.pos() + n;
          while (r.pos() < send) {
            uint64_t d;
            if (!r.ReadVarint(&d)) return fail();
            dims.push_back(static_cast<int64_t>(d));
          }
        } else if (tf == 2 && twt == 0) {  // unpacked shape
          uint64_t d;
          if (!r.ReadVarint(&d)) return fail();
          dims.push_back(static_cast<int64_t>(d));
        } else if (tf == 3 && twt == 2) {  // data
          // A second data field in one block (protobuf would keep the last) is refused: the
          // sink has seen the first one's bytes already.
          if (began || data_done) return fail();
          uint64_t n;
          if (!r.ReadVarint(&n)) return fail();
          // The sink is told the size before the bytes: it must be there (within the tensor).
          if (r.pos() > tend || n > tend - r.pos()) return fail();
          common::DType dt = dtype == 2   ? common::DType::kBF16
                             : dtype == 3 ? common::DType::kF16
                                          : common::DType::kF32;
          began = have_hash && dtype >= 1 && dtype <= 3 &&
                  sink.BeginBlock(hash, dt, dims, static_cast<int64_t>(n), static_cast<int>(tier));
          XXH3_64bits_reset(state);
          int64_t offset = 0;
          if (!r.Visit(n, [&](const uint8_t* p, size_t m) {
                XXH3_64bits_update(state, p, m);
                if (began) sink.BlockData(offset, p, m);
                offset += static_cast<int64_t>(m);
              })) {
            return fail();
          }
          data_hash = XXH3_64bits_digest(state);
          data_done = true;
        } else if (!r.SkipField(twt)) {
          return fail();
        }
      }
      if (r.pos() != tend) return fail();
    } else if (!r.SkipField(wt)) {
      return fail();
    }
  }
  if (began) sink.EndBlock(data_done && have_checksum && data_hash == checksum);
  return r.pos() == end;
}

}  // namespace

void EncodeGetResponseBlock(const kv::BlockHash& hash, common::DType dtype,
                            std::span<const int64_t> dims, uint64_t checksum, int tier,
                            ::grpc::Slice data, std::vector<::grpc::Slice>* out) {
  std::string shape;
  for (int64_t d : dims) PutVarint(&shape, static_cast<uint64_t>(d));
  const size_t data_len = data.size();
  // Tensor: dtype, packed shape, data.
  const size_t tensor_len = 1 + VarintSize(ProtoDType(dtype)) + 1 + VarintSize(shape.size()) +
                            shape.size() + 1 + VarintSize(data_len) + data_len;
  // KvBlock: hash, checksum, tier, data.
  const size_t block_len = 1 + 1 + 16 + 1 + VarintSize(checksum) + 1 + VarintSize(tier) + 1 +
                           VarintSize(tensor_len) + tensor_len;
  std::string h;
  h.reserve(64 + shape.size());
  h.push_back(0x0A);  // GetResponse.blocks
  PutVarint(&h, block_len);
  h.push_back(0x0A);  // KvBlock.hash
  h.push_back(16);
  const std::array<uint8_t, 16> bytes = hash.CanonicalBytes();
  h.append(reinterpret_cast<const char*>(bytes.data()), 16);
  h.push_back(0x18);  // KvBlock.checksum
  PutVarint(&h, checksum);
  h.push_back(0x20);  // KvBlock.tier
  PutVarint(&h, static_cast<uint64_t>(tier));
  h.push_back(0x12);  // KvBlock.data
  PutVarint(&h, tensor_len);
  h.push_back(0x08);  // Tensor.dtype
  PutVarint(&h, static_cast<uint64_t>(ProtoDType(dtype)));
  h.push_back(0x12);  // Tensor.shape (packed)
  PutVarint(&h, shape.size());
  h += shape;
  h.push_back(0x1A);  // Tensor.data
  PutVarint(&h, data_len);
  out->emplace_back(h.data(), h.size());  // copies the few header bytes
  out->push_back(std::move(data));
}

absl::Status ParseGetResponse(const ::grpc::ByteBuffer& buffer, WireBlockSink& sink) {
  std::vector<::grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return absl::DataLossError("unreadable GetResponse buffer");
  Reader r(std::move(slices));
  std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  while (r.pos() < r.size()) {
    uint64_t tag;
    if (!r.ReadVarint(&tag)) return absl::DataLossError("truncated GetResponse");
    if ((tag >> 3) == 1 && (tag & 7) == 2) {
      uint64_t len;
      if (!r.ReadVarint(&len) || !ParseBlock(r, len, sink, state.get())) {
        return absl::DataLossError("malformed KvBlock in GetResponse");
      }
    } else if (!r.SkipField(tag & 7)) {
      return absl::DataLossError("malformed GetResponse");
    }
  }
  return absl::OkStatus();
}

}  // namespace moe::kv_store
